"""A loaded Hugging Face transformers model computing its positional encoding with peregistry.

:func:`patch` takes over, in place and for that model only, what makes its positions: each text
rotary module (``*RotaryEmbedding``: its ``(cos, sin)`` tables, or Llama 4's complex
``freqs_cis``, come from ``from_hf_config(model.config)``, one encoder per layer type), T5's
relative attention bias (``compute_bias`` reads the layer's own bucket weights through the
``t5`` encoder) and Bloom's ALiBi (the ``alibi`` encoder's slopes at the positions of the
attention mask). The model's own attention code is unchanged. Before it replaces a rotary
module, :func:`patch` runs the module once on a few positions and checks that peregistry's
tables equal its own (in the pair layout they come in); a module they do not match is an error
naming the model type, never a silently different model. :func:`unpatch` restores the model's
own code; :func:`patched` is the context manager.

Liger-Kernel's ``apply_liger_kernel_to_llama`` rebinds a family's functions for every model;
here only the patched instance changes (its modules' bound methods), so two models of one
family can differ.
"""

from __future__ import annotations

import contextlib
import inspect
import types
from collections.abc import Callable, Iterator
from typing import Any

from ..hf_config import ConfigError, NoPositionalEncodingError, from_hf_config

__all__ = ["patch", "patched", "unpatch"]

#: The attribute holding a patched model's undo steps (set by :func:`patch`).
_UNDO = "_peregistry_undo"
#: Positions the check of a rotary module runs (below every scaling's threshold: running a
#: dynamic module past it would change its state).
_PROBE = 16


def _model_type(config: Any) -> str:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return str(getattr(text, "model_type", None) or getattr(config, "model_type", "unknown"))


def _encoder(config: Any, layer_type: str | None) -> Any:
    """``from_hf_config`` for a layer type; a model with NoPE layers but one rotary module takes
    the settings of its first RoPE layer (they all share the module)."""
    try:
        return from_hf_config(config, layer_type=layer_type)
    except NoPositionalEncodingError:
        raise
    except ConfigError as exc:
        if layer_type is not None or "pass layer_type" not in str(exc):
            raise
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for i in range(int(getattr(text, "num_hidden_layers", 0) or 0)):
        with contextlib.suppress(NoPositionalEncodingError):
            return from_hf_config(config, layer_type=i)
    raise ConfigError(f"model type {_model_type(config)!r}: no layer uses RoPE, yet the model "
                      f"has a rotary module")


def _tables(enc: Any) -> dict[str, Any]:
    """The encoders whose ``cos_sin`` may be the module's: its own tables in each pair layout
    (Hugging Face modules give half-layout tables even where attention rotates interleaved
    pairs), and for M-RoPE each axis's plain rotary tables (Qwen2-VL's ``(3, ..., d)``)."""
    from .. import get_encoder

    out = {layout: get_encoder(enc.name, **{**enc.options, "layout": layout})
           for layout in ("half", "interleaved")}
    if enc.name == "mrope":
        keep = ("dim", "theta", "scaling", "rotary_dim", "direction")
        out["axes"] = get_encoder("rotary", **{k: v for k, v in enc.options.items() if k in keep})
    return out


def _matches(theirs: Any, ours: Any) -> bool:
    """Equal within the float32 drift of the module's angles (about eps32 · position)."""
    if theirs.shape != ours.shape:
        return False
    scale = max(1.0, float(theirs.abs().max()))
    return bool((theirs.double() - ours.double()).abs().max() <= 64 * _PROBE * 2.0**-23 * scale)


def _rotary_forward(module: Any, config: Any, model_type: str) -> Callable[..., Any]:
    """The replacement ``forward`` of one rotary module, after checking it against the
    module's own output on the probe positions, for every layer type it serves."""
    import torch

    takes_type = "layer_type" in inspect.signature(module.forward).parameters
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    kinds: list[str | None] = (sorted(set(getattr(text, "layer_types", None) or ()))
                               if takes_type else [None]) or [None]
    chosen: dict[str | None, tuple[str, Any]] = {}
    buffer = next(iter(module.buffers()), None)
    device = buffer.device if buffer is not None else torch.device("cpu")
    for kind in kinds:
        try:
            enc = _encoder(config, kind)
        except NoPositionalEncodingError:
            continue  # the module is never asked for this layer type
        pos = torch.arange(_PROBE, device=device)[None]
        if enc.name == "mrope":
            pos = torch.stack([pos, pos // 2, pos % 4])  # distinct axes
        with torch.no_grad():
            out = module(torch.zeros(1, device=device), pos, *([kind] if takes_type else []))
        found = None
        for fmt, candidate in _tables(enc).items():
            cos, sin = candidate.cos_sin(pos, dtype=torch.float32)
            if isinstance(out, tuple) and _matches(out[0], cos) and _matches(out[1], sin):
                found = (fmt, candidate)
                break
            half = cos.shape[-1] // 2
            if fmt == "half" and torch.is_tensor(out) and out.is_complex() and _matches(
                    torch.view_as_real(out), torch.stack((cos[..., :half], sin[..., :half]), -1)):
                found = ("complex", candidate)  # Llama 4's freqs_cis
                break
        if found is None:
            what = f" (layer type {kind!r})" if kind is not None else ""
            raise ValueError(f"peregistry.integrations.transformers.patch: model type "
                             f"{model_type!r}{what}: its {type(module).__name__} gives tables "
                             f"that {enc!r} does not reproduce; not patched")
        chosen[kind] = found

    def forward(self: Any, x: Any, position_ids: Any, layer_type: str | None = None) -> Any:
        fmt, enc = chosen[layer_type]
        if fmt == "complex":
            cos, sin = enc.cos_sin(position_ids, dtype=torch.float32)
            half = cos.shape[-1] // 2
            return torch.complex(cos[..., :half], sin[..., :half])
        return enc.cos_sin(position_ids, dtype=x.dtype)

    return forward


def _t5_compute_bias(module: Any, config: Any) -> Callable[..., Any]:
    """``T5Attention.compute_bias`` through the ``t5`` encoder and the layer's own weights."""
    import torch

    params = list(inspect.signature(module.compute_bias).parameters)
    if params[:2] != ["query_length", "key_length"]:
        raise ValueError(f"peregistry.integrations.transformers.patch: {type(module).__name__}."
                         f"compute_bias{tuple(params)} is not the signature this patch knows")
    enc: Any = from_hf_config(config, layer_type="decoder" if module.is_decoder else "encoder")

    def compute_bias(self: Any, query_length: int, key_length: int, device: Any = None,
                     past_seen_tokens: Any = 0, cache_position: Any = None) -> Any:
        weight = self.relative_attention_bias.weight
        dev = weight.device if device is None else device
        q = torch.arange(query_length, device=dev)
        q = q + (cache_position[0] if cache_position is not None else past_seen_tokens)
        k = torch.arange(key_length, device=dev)
        return enc.bias(q, k, params={"table": weight})[None]  # (1, heads, Q, K)

    return compute_bias


def _bloom_alibi(config: Any) -> Callable[..., Any]:
    """``BloomModel.build_alibi_tensor``: ``m_h · position`` of every key, the positions those
    of the attention mask (Bloom's ``+m·k``, equal to ALiBi's ``-m·|q - k|`` under the causal
    softmax, a constant per query)."""
    import torch

    from .._attention_mask import positions_from_attention_mask

    enc: Any = from_hf_config(config)

    def build_alibi_tensor(self: Any, attention_mask: Any, num_heads: int, dtype: Any) -> Any:
        pos = positions_from_attention_mask(attention_mask)  # 0 at padding, as Bloom's
        slopes = torch.tensor(enc.slopes, dtype=torch.float32, device=attention_mask.device)
        alibi = slopes[None, :, None] * pos[:, None, :]
        return alibi.reshape(-1, 1, attention_mask.shape[-1]).to(dtype)

    return build_alibi_tensor


def _with_mask(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Bloom builds its ALiBi from the attention mask, and without one by its own code: give it
    the all-ones mask of its tokens (cached ones included)."""
    import torch

    if kwargs.get("attention_mask") is not None:
        return None
    ids = kwargs.get("input_ids", args[0] if args else None)
    tokens = ids if ids is not None else kwargs["inputs_embeds"]
    cache = kwargs.get("past_key_values")
    past = cache.get_seq_length() if cache is not None else 0
    mask = torch.ones(tokens.shape[0], past + tokens.shape[1], dtype=torch.long,
                      device=tokens.device)
    return args, {**kwargs, "attention_mask": mask}


def _bind(module: Any, name: str, function: Callable[..., Any]) -> Callable[[], None]:
    """Bind ``function`` as ``module.name`` on this instance; the step that restores it."""
    had = name in module.__dict__
    before = module.__dict__.get(name)
    setattr(module, name, types.MethodType(function, module))

    def undo() -> None:
        if had:
            setattr(module, name, before)
        else:
            delattr(module, name)

    return undo


def _is_text_rotary(name: str, module: Any) -> bool:
    cls = type(module).__name__
    return cls.endswith("RotaryEmbedding") and not any(
        word in cls or word in name for word in ("Vision", "vision", "Audio", "audio", "visual"))


def patch(model: Any) -> Any:
    """Make the loaded transformers ``model`` compute its positional encoding with peregistry,
    in place, in every layer; return ``model``. Patching a patched model does nothing.

    :raises ValueError: the model has nothing this can take over (no text rotary module, T5
        relative bias or Bloom ALiBi), naming its ``model_type``; or a rotary module's tables
        differ from ``from_hf_config(model.config)``'s (nothing is patched then).
    """
    if getattr(model, _UNDO, None) is not None:
        return model
    config = model.config
    model_type = _model_type(config)
    undo: list[Callable[[], None]] = []
    try:
        for name, module in model.named_modules():
            if _is_text_rotary(name, module):
                undo.append(_bind(module, "forward", _rotary_forward(module, config, model_type)))
            elif getattr(module, "has_relative_attention_bias", False) and hasattr(
                    module, "compute_bias"):
                undo.append(_bind(module, "compute_bias", _t5_compute_bias(module, config)))
            elif hasattr(module, "build_alibi_tensor") and model_type == "bloom":
                undo.append(_bind(module, "build_alibi_tensor", _bloom_alibi(config)))
                undo.append(module.register_forward_pre_hook(_with_mask, with_kwargs=True).remove)
    except Exception:
        for step in reversed(undo):
            step()
        raise
    if not undo:
        raise ValueError(f"peregistry.integrations.transformers.patch: model type "
                         f"{model_type!r} has no positional encoding this can take over (a "
                         f"text *RotaryEmbedding module, T5's relative attention bias or "
                         f"Bloom's ALiBi)")
    object.__setattr__(model, _UNDO, undo)
    return model


def unpatch(model: Any) -> Any:
    """Restore the model's own positional-encoding code; return ``model``. An unpatched model
    is returned as it is."""
    undo = getattr(model, _UNDO, None)
    if undo is None:
        return model
    for step in reversed(undo):
        step()
    object.__delattr__(model, _UNDO)
    return model


@contextlib.contextmanager
def patched(model: Any) -> Iterator[Any]:
    """``with patched(model): ...``: the model patched inside the block, restored after it
    (on an error too). A model patched before the block stays patched."""
    was = getattr(model, _UNDO, None) is not None
    patch(model)
    try:
        yield model
    finally:
        if not was:
            unpatch(model)
