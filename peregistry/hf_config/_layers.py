"""Which RoPE settings a layer uses: ``rope_parameters`` flat or keyed by layer type (5.x), the
4.x keys (Gemma 3's ``rope_local_base_freq``), and the layers with no positional encoding
(Llama 4's and SmolLM3's ``no_rope_layers``, a layer type whose parameters are ``None``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._conventions import conventions_of
from ._values import ConfigError, integer, mapping, summary

__all__ = ["NO_ATTENTION_LAYER_TYPES", "NoPositionalEncodingError", "layer_rope"]

#: Keys of a flat ``rope_parameters`` dict (a dict keyed by layer type has none of them).
_ROPE_KEYS = frozenset({"rope_type", "type", "rope_theta", "factor", "partial_rotary_factor",
                        "mrope_section", "original_max_position_embeddings"})
#: A layer type that ``layer_types`` lists and ``rope_parameters`` (keyed by layer type) lacks.
_MISSING = "missing"
#: The layer types of transformers' ``layer_types`` that have no attention, so no positional
#: encoding: LFM2's and LFM3's ``conv``, the recurrent layers of hybrid models
#: (``linear_attention``: Qwen3-Next, MiniMax, Jamba, ...; its older name ``mamba``;
#: ``recurrent``), Nemotron-H's ``moe`` and ``mlp`` layers. A type that ``rope_parameters``
#: (keyed by layer type) has an entry for is read as any other.
NO_ATTENTION_LAYER_TYPES = frozenset({"conv", "linear_attention", "mamba", "recurrent", "moe",
                                      "mlp"})


class NoPositionalEncodingError(ConfigError):
    """The layer asked for uses no positional encoding (NoPE): there is no encoder to give."""


def layer_types_of(text: Mapping[str, Any], where: str) -> list[str]:
    """The config's ``layer_types`` (one per layer), checked to be a list of strings."""
    value = text.get("layer_types")
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) \
            or not all(isinstance(t, str) for t in value):
        raise ConfigError(f"{where}: layer_types must be a list of layer type names, got "
                          f"{value!r:.80}")
    return list(value)


def layer_count(text: Mapping[str, Any], layer_types: list[str], where: str) -> int | None:
    """``len(layer_types)``, else ``num_hidden_layers`` (checked), else None."""
    if layer_types:
        return len(layer_types)
    value = text.get("num_hidden_layers")
    return None if value is None else integer(value, "num_hidden_layers", where, minimum=0)


def _by_type(text: Mapping[str, Any], model_type: str, layer_types: list[str],
             where: str) -> dict[str, Any] | None:
    """RoPE settings keyed by layer type (None: one flat setting for every layer). A layer type
    ``layer_types`` lists without an entry gets what the config class fills in for it (the
    table's ``layer_rope_defaults``: Gemma 3's sliding layers), else is marked missing."""
    params = mapping(text.get("rope_parameters"), "rope_parameters", where)
    if params:
        own_labels = text.get("_rope_type_labels")
        labels = set(own_labels or layer_types)
        nested = [k for k in params if k in labels]
        if not nested and not (set(params) & _ROPE_KEYS) and all(
                v is None or isinstance(v, Mapping) for v in params.values()):
            nested = list(params)  # keyed by layer type, the config not listing the types
        if not nested:
            return None
        types: dict[str, Any] = {k: (None if params[k] is None else
                                     dict(mapping(params[k], f"rope_parameters[{k!r}]", where)))
                                 for k in nested}
        if not own_labels:
            defaults = conventions_of(model_type).get("layer_rope_defaults", {})
            for t in dict.fromkeys(layer_types):
                if t not in types:
                    types[t] = _default_rope(text, defaults[t]) if t in defaults else _MISSING
        return types
    if text.get("rope_local_base_freq") is not None:  # Gemma 3, transformers 4.x
        full = {**mapping(text.get("rope_scaling"), "rope_scaling", where),
                "rope_theta": text.get("rope_theta")}
        return {"full_attention": full, "sliding_attention": {
            "rope_type": "default", "rope_theta": text["rope_local_base_freq"]}}
    return None


def _default_rope(text: Mapping[str, Any], rule: tuple[str, float]) -> dict[str, Any]:
    """What the config class fills in for a layer type ``rope_parameters`` lacks: the default
    rope type, with theta from the config key ``rule[0]`` or the class default ``rule[1]``."""
    key, theta = rule
    value = text.get(key)
    return {"rope_type": "default", "rope_theta": theta if value is None else value}


def _flat(text: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The RoPE settings as one flat dict: ``rope_parameters`` (5.x), else ``rope_scaling``
    (4.x, whose ``rope_theta`` sits beside it)."""
    params = mapping(text.get("rope_parameters"), "rope_parameters", where)
    if params:
        return dict(params)
    return dict(mapping(text.get("rope_scaling"), "rope_scaling", where))  # 4.x: rope_theta beside


class _NoPE:
    """The layers without RoPE, never listed one by one: the zeros of ``no_rope_layers`` (a
    mask, 1: RoPE, 0: NoPE, as Llama 4 and SmolLM3 define it), or, without a mask, every
    ``interval``-th of ``count`` layers (their ``no_rope_layer_interval``)."""

    def __init__(self, text: Mapping[str, Any], count: int | None, where: str) -> None:
        mask = text.get("no_rope_layers")
        if mask and (isinstance(mask, (str, bytes)) or not isinstance(mask, (list, tuple))):
            raise ConfigError(f"{where}: no_rope_layers must be a list of 0/1 per layer, got "
                              f"{mask!r:.80}")
        interval = text.get("no_rope_layer_interval")
        self.interval = (integer(interval, "no_rope_layer_interval", where)
                         if not mask and interval and count else None)
        self.count = count or 0
        self.mask = {i for i, v in enumerate(mask or ()) if not v}
        #: Whether some layer uses RoPE (the mask has a 1, or not every layer is an interval's).
        self.some_rope = any(mask) if mask else (self.interval != 1 and self.count > 0
                                                 if self.interval is not None else True)

    def __contains__(self, i: int) -> bool:
        """Whether layer ``i`` has no RoPE."""
        if self.interval is not None:
            return 0 <= i < self.count and (i + 1) % self.interval == 0
        return i in self.mask

    def __bool__(self) -> bool:
        """Whether some layer has no RoPE."""
        return bool(self.mask) or (self.interval is not None and self.count >= self.interval)

    def describe(self) -> str:
        """The NoPE layers, short: a list, or its first ones and a count for an interval."""
        if self.interval is None:
            return summary(sorted(self.mask))
        n = self.count // self.interval
        first = [self.interval * (k + 1) - 1 for k in range(min(n, 12))]
        if n <= 12:
            return str(first)
        return (f"[{', '.join(map(str, first[:3]))}, ..., {self.interval * n - 1}] (one in "
                f"{self.interval}: {n:,} of {self.count:,} layers)")


def _scaling_layers(text: Mapping[str, Any], count: int | None, where: str) -> set[int] | None:
    """Molmo2's ``rope_scaling_layers``: the layers whose rotary module applies the scaling
    (the others use the default rope type with the same theta); None when every layer does."""
    value = text.get("rope_scaling_layers")
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ConfigError(f"{where}: rope_scaling_layers must be a list of layer indices, got "
                          f"{value!r:.80}")
    layers = {integer(v, f"rope_scaling_layers[{i}]", where, minimum=0)
              for i, v in enumerate(value)}
    return None if count is not None and layers >= set(range(count)) else layers


def _unscaled(flat: Mapping[str, Any]) -> dict[str, Any]:
    """``flat`` without its scaling: ``rope_type: default`` with its base, partial rotary
    factor and M-RoPE sections."""
    keep = ("rope_theta", "partial_rotary_factor", "mrope_section", "mrope_interleaved")
    return {"rope_type": "default", **{k: flat[k] for k in keep if k in flat}}


def _describe(types: dict[str, Any], layer_types: list[str], nope: _NoPE | None) -> str:
    """The layer types of a model and the layers of each, for messages."""
    parts = []
    for t, params in types.items():
        idx = [i for i, lt in enumerate(layer_types) if lt == t]
        if params is None or (nope and idx and all(i in nope for i in idx)):
            parts.append(f"{t!r} (no positional encoding)")
        else:
            kind = params.get("rope_type") or params.get("type") or "default"
            theta = params.get("rope_theta")
            parts.append(f"{t!r} (RoPE, rope_type={kind!r}"
                         + (f", rope_theta={theta!r})" if theta is not None else ")"))
    return ", ".join(parts)


def _nope(where: str, what: str, why: str) -> NoPositionalEncodingError:
    """The error for a layer without positional encoding, saying why."""
    return NoPositionalEncodingError(f"{where}: {what} uses no positional encoding ({why}); "
                                     f"its attention needs no encoder")


def _missing(where: str, layer_types: list[str], loaded: bool) -> ConfigError:
    """The error for layer types whose RoPE settings the config lacks, with the fix (for a
    dict, load it through transformers, whose config class fills in defaults)."""
    advice = ("the config object has no entry either: add the entry (config.rope_parameters)"
              if loaded else "transformers' config class fills in its own defaults: pass the "
              "config loaded by transformers (AutoConfig), add the entry")
    return ConfigError(
        f"{where}: layer type{'s' if len(layer_types) > 1 else ''} "
        f"{', '.join(map(repr, layer_types))} {'are' if len(layer_types) > 1 else 'is'} listed "
        f"in layer_types but rope_parameters (keyed by layer type) has no entry for "
        f"{'them' if len(layer_types) > 1 else 'it'}; {advice}, or teach peregistry the "
        f"defaults with register_model_conventions(model_type, layer_rope_defaults=...)")


def _no_attention(where: str, what: str, attention: list[str]) -> NoPositionalEncodingError:
    """The error for a layer without attention (linear attention, Mamba, convolution, ...),
    naming the layer types that have one."""
    choose = (f"; the layer types with attention: {', '.join(map(repr, attention))}"
              if attention else "")
    return NoPositionalEncodingError(f"{where}: {what} has no attention, so no positional "
                                     f"encoding: there is no encoder for it{choose}")


def _derived(text: Mapping[str, Any], layer_type: str, nope: _NoPE, count: int | None,
             flat: dict[str, Any], labels: tuple[str, str], where: str) -> dict[str, Any]:
    """The settings of ``layer_type`` for a config without ``layer_types`` whose config class
    derives them from ``no_rope_layers`` (``labels``: the RoPE layers' type, the NoPE layers'
    type; Llama 4's ``chunked_attention`` and ``full_attention``). Never lists the layers."""
    rope_type, nope_type = labels
    if not text.get("no_rope_layers") and count is None:
        raise ConfigError(f"{where}: layer_type={layer_type!r} names a layer type, and the "
                          f"config has no layer_types; the config class derives them from "
                          f"no_rope_layers, else from num_hidden_layers and "
                          f"no_rope_layer_interval, and the config has neither no_rope_layers "
                          f"nor num_hidden_layers: add one of them (or layer_types), or pass a "
                          f"layer index")
    if layer_type == nope_type and nope:
        raise _nope(where, f"layer type {nope_type!r}", f"no_rope_layers marks layers "
                    f"{nope.describe()} NoPE, the layers the config class names {nope_type!r}")
    if layer_type == rope_type and nope.some_rope:
        return dict(flat)
    present = [t for t, there in ((rope_type, nope.some_rope), (nope_type, bool(nope))) if there]
    raise ConfigError(f"{where}: unknown layer_type {layer_type!r}; the config's layer types: "
                      f"{', '.join(map(repr, present)) or 'none'} (derived from no_rope_layers "
                      f"as the config class does: RoPE layers are {rope_type!r}, NoPE layers "
                      f"{nope_type!r})")


def _attention_types(by_type: dict[str, Any] | None, flat: dict[str, Any] | None,
                     layer_types: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The settings by layer type, and the listed types without attention (which have none);
    those are left out of the settings when some listed type has attention."""
    types: dict[str, Any] = by_type if by_type is not None else {
        t: flat for t in dict.fromkeys(layer_types)}
    free = [t for t in dict.fromkeys(layer_types) if t in NO_ATTENTION_LAYER_TYPES
            and (by_type is None or types.get(t, _MISSING) is _MISSING)]
    if any(t not in free for t in types):  # the attention layers' types are the choice
        types = {t: p for t, p in types.items() if t not in free}
    return types, free


def _every_layer(types: dict[str, Any], layer_types: list[str], nope: _NoPE | None,
                 flat: dict[str, Any] | None,
                 how: tuple[list[str], tuple[str, str] | None, bool],
                 where: str) -> dict[str, Any]:
    """The settings every layer shares (``layer_type=None``), else the error naming the layer
    types to choose from. ``how``: the types without attention, the derived layer types
    (``nope_layer_types``, for a config without ``layer_types``), and whether the config
    was a transformers object."""
    free, derived, loaded = how
    settings = [p for t, p in types.items()
                if not layer_types or t in layer_types] or list(types.values())
    if any(p is _MISSING for p in settings):
        raise _missing(where, [t for t, p in types.items() if p is _MISSING], loaded)
    if not nope and all(p == settings[0] for p in settings):
        if settings and settings[0] is None:
            raise _nope(where, "every layer", "rope_parameters is None")
        return dict(settings[0] if settings else flat or {})
    if derived is not None and nope:
        shown = {derived[0]: flat or {}} if nope.some_rope else {}
        listed = _describe({**shown, derived[1]: None}, [], None)
    else:
        listed = _describe(types, layer_types, nope) if types else "(no layer types)"
    without = (f" (the {', '.join(map(repr, free))} layers have no attention, so no "
               f"positional encoding)" if free else "")
    raise ConfigError(f"{where}: the layers use different positional encodings; pass "
                      f"layer_type= one of {listed}{without}"
                      + (f", or a layer index (layers {nope.describe()} use none)"
                         if nope else ""))


def layer_rope(text: Mapping[str, Any], layer_type: str | int | None, where: str,
               model_type: str = "", *, loaded: bool = False) -> dict[str, Any]:
    """The flat RoPE settings of ``layer_type`` (a layer type name, a layer index, or None for
    a model whose layers all agree). ``loaded``: the config came as a transformers object
    (whose class has filled in its defaults already). Layers of a type without attention
    (:data:`NO_ATTENTION_LAYER_TYPES`) have no settings; the others are compared."""
    if text.get("use_rope") is False:
        raise _nope(where, "every layer", "use_rope is false")
    if text.get("use_mem_rope") is False:  # Zamba2's shared attention blocks
        raise _nope(where, "every layer", "use_mem_rope is false")
    if isinstance(layer_type, bool) or not isinstance(layer_type, (str, int, type(None))):
        raise TypeError(f"{where}: layer_type must be a layer type name, a layer index or "
                        f"None, got {layer_type!r}")
    layer_types = layer_types_of(text, where)
    count = layer_count(text, layer_types, where)
    nope: _NoPE | None = _NoPE(text, count, where)
    by_type = _by_type(text, model_type, layer_types, where)
    flat = _flat(text, where) if by_type is None else None
    types, free = _attention_types(by_type, flat, layer_types)
    derived = conventions_of(model_type).get("nope_layer_types")
    if derived is not None and (layer_types or by_type is not None):
        derived = None  # the config lists its layer types: they are read as they are
    scaled = _scaling_layers(text, count, where) if by_type is None else None
    if scaled is not None:
        if isinstance(layer_type, int) and not (nope and layer_type in nope) and (
                count is None or 0 <= layer_type < count):
            return dict(flat or {}) if layer_type in scaled else _unscaled(flat or {})
        if layer_type is None:
            raise ConfigError(f"{where}: the layers use different positional encodings: "
                              f"rope_scaling_layers {summary(sorted(scaled))} apply the "
                              f"scaling, the others do not; pass a layer index")
    if isinstance(layer_type, int):
        if count is not None and not 0 <= layer_type < count:
            raise ConfigError(f"{where}: layer index {layer_type} is out of range: the model "
                              f"has {count:,} layers (0 to {count - 1:,})")
        if nope and layer_type in nope:
            raise _nope(where, f"layer {layer_type}", "no_rope_layers marks it NoPE")
        if not layer_types and by_type is None:
            return dict(flat or {})
        if not layer_types:
            raise ConfigError(f"{where}: the RoPE settings are keyed by layer type "
                              f"({', '.join(types)}) but the config has no 'layer_types'")
        if layer_types[layer_type] in free:
            raise _no_attention(where, f"layer {layer_type} (a {layer_types[layer_type]!r} "
                                f"layer)", list(types))
        layer_type, nope = layer_types[layer_type], None  # it uses RoPE: its type's settings
    if isinstance(layer_type, str) and derived is not None:
        return _derived(text, layer_type, nope or _NoPE({}, 0, where), count, flat or {},
                        derived, where)
    if layer_type is None:
        return _every_layer(types, layer_types, nope, flat, (free, derived, loaded), where)
    if layer_type in free:
        raise _no_attention(where, f"layer type {layer_type!r}",
                            [t for t in types if t not in free])
    if layer_type not in types:
        known = ", ".join(repr(t) for t in types) or "none (pass a layer index or None)"
        raise ConfigError(f"{where}: unknown layer_type {layer_type!r}; the config's layer "
                          f"types: {known}")
    if types[layer_type] is _MISSING:
        raise _missing(where, [layer_type], loaded)
    if types[layer_type] is None:
        raise _nope(where, f"layer type {layer_type!r}", "its rope_parameters entry is None")
    idx = [i for i, t in enumerate(layer_types) if t == layer_type]
    marked = [i for i in idx if nope and i in nope]
    if idx and len(marked) == len(idx):
        raise _nope(where, f"layer type {layer_type!r}", f"no_rope_layers marks layers "
                    f"{summary(marked)} NoPE")
    if marked:
        raise ConfigError(f"{where}: layers of type {layer_type!r} differ: {summary(marked)} "
                          f"use no positional encoding, the others RoPE; pass a layer index")
    return dict(types[layer_type])


#: The ``per_layer_config`` keys that change a layer's rotary embedding.
_ROPE_SHAPING = frozenset({"head_dim", "qk_rope_head_dim", "hidden_size", "num_attention_heads",
                           "partial_rotary_factor", "rope_parameters", "rotary_dim"})


def layer_overrides(text: Mapping[str, Any], layer_type: str | int | None,
                    where: str) -> dict[str, Any]:
    """The ``per_layer_config`` overrides of the layers ``layer_type`` selects (Gemma 4's
    full-attention layers have their own ``head_dim``, its ``global_head_dim``): a dict keyed by
    layer index (as a string in JSON). Layers of one type that disagree are an error. Only the
    listed layers are read (a config may count 10^12 layers)."""
    per_layer = text.get("per_layer_config")
    if not isinstance(per_layer, Mapping) or not per_layer:
        return {}
    layer_types = layer_types_of(text, where)
    count = layer_count(text, layer_types, where) or 0
    if isinstance(layer_type, int):
        selected: Any = {layer_type}
    elif layer_type is None:
        selected = range(count)
    else:
        selected = {i for i, t in enumerate(layer_types) if t == layer_type}
    by_index: dict[int, Any] = {}
    for key, value in per_layer.items():
        try:
            i = int(key)  # JSON keys are strings, zero-padded ("05")
        except (TypeError, ValueError):
            continue
        if i in selected:
            by_index[i] = {k: v for k, v in dict(mapping(value, f"per_layer_config[{key!r}]",
                                                         where)).items() if k in _ROPE_SHAPING}
    found = list(by_index.values())
    if len(by_index) < len(selected):
        found.append({})  # the selected layers the overrides do not list
    if any(f != found[0] for f in found):
        what = "the layers" if layer_type is None else f"the layers of type {layer_type!r}"
        raise ConfigError(f"{where}: {what} differ in per_layer_config ({found[0]} vs "
                          f"{next(f for f in found if f != found[0])}); pass a layer index")
    return found[0] if found else {}
