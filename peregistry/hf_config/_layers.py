"""Which RoPE settings a layer uses: ``rope_parameters`` flat or keyed by layer type (5.x), the
4.x keys (Gemma 3's ``rope_local_base_freq``), and the layers with no positional encoding
(Llama 4's and SmolLM3's ``no_rope_layers``, a layer type whose parameters are ``None``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._rope import ConfigError

__all__ = ["NoPositionalEncodingError", "layer_rope"]

#: Keys of a flat ``rope_parameters`` dict (a dict keyed by layer type has none of them).
_ROPE_KEYS = frozenset({"rope_type", "type", "rope_theta", "factor", "partial_rotary_factor",
                        "mrope_section", "original_max_position_embeddings"})


class NoPositionalEncodingError(ConfigError):
    """The layer asked for uses no positional encoding (NoPE): there is no encoder to give."""


def _by_type(text: Mapping[str, Any]) -> dict[str, Any] | None:
    """RoPE settings keyed by layer type (None: one flat setting for every layer)."""
    params = text.get("rope_parameters")
    if isinstance(params, Mapping) and params:
        labels = set(text.get("_rope_type_labels") or text.get("layer_types") or ())
        nested = [k for k in params if k in labels]
        if not nested and not (set(params) & _ROPE_KEYS) and all(
                v is None or isinstance(v, Mapping) for v in params.values()):
            nested = list(params)  # keyed by layer type, the config not listing the types
        if nested:
            return {k: (None if params[k] is None else dict(params[k])) for k in nested}
        return None
    if text.get("rope_local_base_freq") is not None:  # Gemma 3, transformers 4.x
        full = {**(text.get("rope_scaling") or {}), "rope_theta": text.get("rope_theta")}
        return {"full_attention": full, "sliding_attention": {
            "rope_type": "default", "rope_theta": text["rope_local_base_freq"]}}
    return None


def _flat(text: Mapping[str, Any]) -> dict[str, Any]:
    params = text.get("rope_parameters")
    if isinstance(params, Mapping) and params:
        return dict(params)
    return dict(text.get("rope_scaling") or {})  # 4.x: rope_theta stays beside it


def _nope_layers(text: Mapping[str, Any], count: int | None) -> set[int]:
    """Indices of the layers without RoPE. ``no_rope_layers`` is a mask (1: RoPE, 0: NoPE) as
    Llama 4 and SmolLM3 define it; absent, it follows ``no_rope_layer_interval`` as they do."""
    mask = text.get("no_rope_layers")
    interval = text.get("no_rope_layer_interval")
    if not mask and interval and count:
        mask = [int((i + 1) % int(interval) != 0) for i in range(count)]
    return {i for i, v in enumerate(mask or ()) if not v}


def _describe(types: dict[str, Any], layer_types: list[str], nope: set[int]) -> str:
    parts = []
    for t, params in types.items():
        idx = [i for i, lt in enumerate(layer_types) if lt == t]
        if params is None or (idx and all(i in nope for i in idx)):
            parts.append(f"{t!r} (no positional encoding)")
        else:
            kind = params.get("rope_type") or params.get("type") or "default"
            theta = params.get("rope_theta")
            parts.append(f"{t!r} (RoPE, rope_type={kind!r}"
                         + (f", rope_theta={theta!r})" if theta is not None else ")"))
    return ", ".join(parts)


def _nope(where: str, what: str, why: str) -> NoPositionalEncodingError:
    return NoPositionalEncodingError(f"{where}: {what} uses no positional encoding ({why}); "
                                     f"its attention needs no encoder")


def layer_rope(text: Mapping[str, Any], layer_type: str | int | None,
               where: str) -> dict[str, Any]:
    """The flat RoPE settings of ``layer_type`` (a layer type name, a layer index, or None for
    a model whose layers all agree)."""
    if text.get("use_rope") is False:
        raise _nope(where, "every layer", "use_rope is false")
    if text.get("use_mem_rope") is False:  # Zamba2's shared attention blocks
        raise _nope(where, "every layer", "use_mem_rope is false")
    layer_types = [str(t) for t in text.get("layer_types") or ()]
    count = len(layer_types) or text.get("num_hidden_layers")
    nope = _nope_layers(text, count)
    by_type = _by_type(text)
    flat = _flat(text) if by_type is None else None
    types: dict[str, Any] = by_type if by_type is not None else {
        t: flat for t in dict.fromkeys(layer_types)}
    if isinstance(layer_type, bool) or not isinstance(layer_type, (str, int, type(None))):
        raise TypeError(f"{where}: layer_type must be a layer type name, a layer index or "
                        f"None, got {layer_type!r}")
    if isinstance(layer_type, int):
        if count is not None and not 0 <= layer_type < count:
            raise ConfigError(f"{where}: layer index {layer_type} is out of range: the model "
                              f"has {count} layers (0 to {count - 1})")
        if layer_type in nope:
            raise _nope(where, f"layer {layer_type}", "no_rope_layers marks it NoPE")
        if not layer_types and by_type is None:
            return dict(flat or {})
        layer_type = layer_types[layer_type] if layer_types else None
        if layer_type is None:
            raise ConfigError(f"{where}: the RoPE settings are keyed by layer type "
                              f"({', '.join(types)}) but the config has no 'layer_types'")
        nope = set()  # this layer uses RoPE: its type's settings apply
    if layer_type is None:
        settings = [p for t, p in types.items()
                    if not layer_types or t in layer_types] or list(types.values())
        if not nope and all(p == settings[0] for p in settings):
            if settings and settings[0] is None:
                raise _nope(where, "every layer", "rope_parameters is None")
            return dict(settings[0] if settings else flat or {})
        listed = _describe(types, layer_types, nope) if types else "(no layer types)"
        raise ConfigError(f"{where}: the layers use different positional encodings; pass "
                          f"layer_type= one of {listed}"
                          + (f", or a layer index (layers {sorted(nope)} use none)"
                             if nope else ""))
    if layer_type not in types:
        known = ", ".join(repr(t) for t in types) or "none (pass a layer index or None)"
        raise ConfigError(f"{where}: unknown layer_type {layer_type!r}; the config's layer "
                          f"types: {known}")
    idx = [i for i, t in enumerate(layer_types) if t == layer_type]
    if types[layer_type] is None:
        raise _nope(where, f"layer type {layer_type!r}", "its rope_parameters entry is None")
    if idx and all(i in nope for i in idx):
        raise _nope(where, f"layer type {layer_type!r}", f"no_rope_layers marks layers {idx} "
                    f"NoPE")
    if any(i in nope for i in idx):
        raise ConfigError(f"{where}: layers of type {layer_type!r} differ: "
                          f"{sorted(i for i in idx if i in nope)} use no positional encoding, "
                          f"the others RoPE; pass a layer index")
    return dict(types[layer_type])


#: The ``per_layer_config`` keys that change a layer's rotary embedding.
_ROPE_SHAPING = frozenset({"head_dim", "qk_rope_head_dim", "hidden_size", "num_attention_heads",
                           "partial_rotary_factor", "rope_parameters", "rotary_dim"})


def layer_overrides(text: Mapping[str, Any], layer_type: str | int | None,
                    where: str) -> dict[str, Any]:
    """The ``per_layer_config`` overrides of the layers ``layer_type`` selects (Gemma 4's
    full-attention layers have their own ``head_dim``, its ``global_head_dim``): a dict keyed by
    layer index (as a string in JSON). Layers of one type that disagree are an error."""
    per_layer = text.get("per_layer_config")
    if not isinstance(per_layer, Mapping) or not per_layer:
        return {}
    layer_types = [str(t) for t in text.get("layer_types") or ()]
    count = len(layer_types) or int(text.get("num_hidden_layers") or 0)
    if isinstance(layer_type, int):
        idx = [layer_type]
    elif layer_type is None:
        idx = list(range(count))
    else:
        idx = [i for i, t in enumerate(layer_types) if t == layer_type]
    by_index: dict[int, Any] = {}
    for key, value in per_layer.items():
        try:
            by_index[int(key)] = value  # JSON keys are strings, zero-padded ("05")
        except (TypeError, ValueError):
            continue
    found = [{k: v for k, v in dict(by_index.get(i) or {}).items() if k in _ROPE_SHAPING}
             for i in idx]
    if any(f != found[0] for f in found):
        what = "the layers" if layer_type is None else f"the layers of type {layer_type!r}"
        raise ConfigError(f"{where}: {what} differ in per_layer_config ({found[0]} vs "
                          f"{next(f for f in found if f != found[0])}); pass a layer index")
    return found[0] if found else {}
