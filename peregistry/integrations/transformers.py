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

#: The attribute marking a patched model (set by :func:`patch`).
_UNDO = "_peregistry_patched"
#: Positions the check of a rotary module runs (below every scaling's threshold: running a
#: dynamic module past it would change its state).
_PROBE = 16
#: The layers asked for their encoder when a module serves layers that differ.
_MAX_LAYERS = 1024


def _model_type(config: Any) -> str:
    """The text model's ``model_type`` (a multimodal config's text part), for messages."""
    return str(getattr(_text(config), "model_type", None)
               or getattr(config, "model_type", "unknown"))


def _text(config: Any) -> Any:
    """The text part of a config (``get_text_config()``), or the config itself."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _candidates(config: Any, layer_type: str | None) -> list[Any]:
    """The encoders ``from_hf_config`` gives for ``layer_type``; for a module that serves every
    layer (``None``), the distinct encoders of the model's layers: a model may hold one module
    per kind of layer (Molmo2's scaled and unscaled ones), whose tables say which it is."""
    if layer_type is not None:
        with contextlib.suppress(NoPositionalEncodingError):
            return [from_hf_config(config, layer_type=layer_type)]
        return []
    found: list[Any] = []
    with contextlib.suppress(ConfigError):  # the layers differ: ask each of them below
        found.append(from_hf_config(config))
    count = int(getattr(_text(config), "num_hidden_layers", 0) or 0)
    for i in range(min(count, _MAX_LAYERS)) if not found else ():
        with contextlib.suppress(NoPositionalEncodingError):
            enc = from_hf_config(config, layer_type=i)
            if enc not in found:
                found.append(enc)
    return found


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


def _as_built(module: Any, model_type: str) -> Any:
    """A copy of the rotary module in the state it was built in, for the probe to run: the
    module itself is never run (Hugging Face's dynamic rope types keep state from what the
    model ran: a dynamic-NTK module grows ``inv_freq`` past ``max_seq_len_cached`` and resets it
    below ``original_max_seq_len``; a LongRoPE module copies its long or short frequencies into
    ``inv_freq``). The copy shares the module's config (never written to) and is put back in
    its initial state: every ``<prefix>inv_freq`` equal to its ``<prefix>original_inv_freq``,
    ``max_seq_len_cached`` equal to ``original_max_seq_len``, and the attributes the updates
    add (``<prefix>long_inv_freq``, ``<layer type>_max_seq_len_cached``) removed."""
    import copy

    import torch

    config = module.__dict__.get("config")
    try:
        twin = copy.deepcopy(module, {} if config is None else {id(config): config})
    except Exception as exc:
        raise ValueError(f"peregistry.integrations.transformers.patch: model type "
                         f"{model_type!r}: its {type(module).__name__} cannot be copied to be "
                         f"checked ({type(exc).__name__}: {exc}); not patched") from exc
    names = [*twin._buffers, *twin.__dict__]
    for name in names:
        prefix = name.removesuffix("original_inv_freq")
        original = getattr(twin, name, None)
        if prefix != name and torch.is_tensor(original) and f"{prefix}inv_freq" in names:
            if f"{prefix}inv_freq" in twin._buffers:
                twin._buffers[f"{prefix}inv_freq"] = original.clone()
            else:
                twin.__dict__[f"{prefix}inv_freq"] = original.clone()
        elif name.endswith("long_inv_freq") or (name.endswith("_max_seq_len_cached")
                                                and name in twin.__dict__):
            twin.__dict__.pop(name, None)
    if "original_max_seq_len" in twin.__dict__ and "max_seq_len_cached" in twin.__dict__:
        twin.max_seq_len_cached = twin.original_max_seq_len
    return twin


def _probe(module: Any, takes_type: bool, kind: str | None, mrope: bool, model_type: str) -> Any:
    """The output on the probe positions of the module as it was built (run on a copy: the
    module keeps the state it has)."""
    import torch

    buffer = next(iter(module.buffers()), None)
    device = buffer.device if buffer is not None else torch.device("cpu")
    pos = torch.arange(_PROBE, device=device)[None]
    if mrope:
        pos = torch.stack([pos, pos // 2, pos % 4])  # distinct axes
    twin = _as_built(module, model_type)
    try:
        with torch.no_grad():
            out = twin(torch.zeros(1, device=device), pos, *([kind] if takes_type else []))
    except Exception as exc:
        raise ValueError(f"peregistry.integrations.transformers.patch: model type "
                         f"{model_type!r}: its {type(module).__name__} does not take "
                         f"(x, position_ids) as a text rotary module does ({type(exc).__name__}: "
                         f"{exc}); not patched") from exc
    return pos, out


def _format(enc: Any, pos: Any, out: Any) -> tuple[str, Any] | None:
    """Which of ``enc``'s table formats the module's output ``out`` is (None: none)."""
    import torch

    for fmt, candidate in _tables(enc).items():
        cos, sin = candidate.cos_sin(pos, dtype=torch.float32)
        if isinstance(out, tuple) and _matches(out[0], cos) and _matches(out[1], sin):
            return fmt, candidate
        half = cos.shape[-1] // 2
        if fmt == "half" and torch.is_tensor(out) and out.is_complex() and _matches(
                torch.view_as_real(out), torch.stack((cos[..., :half], sin[..., :half]), -1)):
            return "complex", candidate  # Llama 4's freqs_cis
    return None


def _mismatch(module: Any, model_type: str, kind: str | None, tried: list[Any]) -> ValueError:
    """The error of a rotary module whose tables no candidate encoder reproduces, naming the
    likely cause when its buffers are narrower than float32 (a cast ``inv_freq``)."""
    what = f" (layer type {kind!r})" if kind is not None else ""
    narrow = sorted({str(b.dtype) for b in module.buffers()
                     if b.is_floating_point() and b.element_size() < 4})
    why = (f"; its buffers are {', '.join(narrow)} (model.to(dtype) casts inv_freq, and the "
           f"module then rounds its frequencies): patch the model before casting it, or load "
           f"it with from_pretrained(..., dtype=...), which keeps inv_freq float32"
           if narrow else "")
    encoders = " or ".join(repr(e) for e in tried)
    return ValueError(f"peregistry.integrations.transformers.patch: model type "
                      f"{model_type!r}{what}: its {type(module).__name__} gives tables that "
                      f"{encoders} (from_hf_config) does not reproduce{why}; not patched")


def _rotary_forward(module: Any, config: Any, model_type: str,
                    candidates: dict[str | None, list[Any]]) -> Callable[..., Any]:
    """The replacement ``forward`` of one rotary module, after checking it against the
    module's own output on the probe positions, for every layer type it serves.
    ``candidates``: the model's encoders by layer type, filled here, shared by its modules."""
    import torch

    takes_type = "layer_type" in inspect.signature(module.forward).parameters
    kinds: list[str | None] = (sorted(set(getattr(_text(config), "layer_types", None) or ()))
                               if takes_type else [None]) or [None]
    chosen: dict[str | None, tuple[str, Any]] = {}
    for kind in kinds:
        if kind not in candidates:
            candidates[kind] = _candidates(config, kind)
        tried = candidates[kind]
        if not tried:
            continue  # NoPE: the module is never asked for this layer type
        pos, out = _probe(module, takes_type, kind, tried[0].name == "mrope", model_type)
        found = next((f for enc in tried if (f := _format(enc, pos, out)) is not None), None)
        if found is None:
            raise _mismatch(module, model_type, kind, tried)
        chosen[kind] = found

    def forward(self: Any, x: Any, position_ids: Any, layer_type: str | None = None) -> Any:
        """The module's ``(cos, sin)`` at ``position_ids`` from the encoder of
        ``layer_type``, in ``x``'s dtype; Llama 4's complex ``freqs_cis`` for that format."""
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
        """T5's ``(1, heads, Q, K)`` bias of queries from the cached length on and keys from 0,
        through the ``t5`` encoder with the layer's own ``relative_attention_bias`` table."""
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
        """Bloom's ``(batch·heads, 1, K)`` ALiBi: slope ``m_h`` times each key's position
        counted over the attention mask (Press et al. 2022; Bloom's layout)."""
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


#: The attribute of a patched module recording what ``unpatch`` restores: ``{method name:
#: the instance's own attribute before, or _ABSENT}``, and Bloom's hook id. Kept on the module
#: itself, so that a ``copy.deepcopy`` of a patched model carries its own.
_SAVED = "_peregistry_saved"
_ABSENT = "absent"


def _bind(module: Any, name: str, function: Callable[..., Any]) -> None:
    """Bind ``function`` as ``module.name`` on this instance, remembering what was there."""
    saved = module.__dict__.setdefault(_SAVED, {})
    saved[name] = module.__dict__.get(name, _ABSENT)
    setattr(module, name, types.MethodType(function, module))


def _restore(module: Any) -> None:
    """Undo :func:`_bind` on ``module``: its own attributes back, Bloom's hook removed."""
    saved = module.__dict__.pop(_SAVED)
    for name, before in saved.items():
        if name == "_hook":
            module._forward_pre_hooks.pop(before, None)
            module._forward_pre_hooks_with_kwargs.pop(before, None)
        elif isinstance(before, str) and before == _ABSENT:
            module.__dict__.pop(name, None)
        else:
            setattr(module, name, before)


def _is_text_rotary(name: str, module: Any) -> bool:
    """A text rotary module: a ``*RotaryEmbedding`` whose ``forward`` takes ``position_ids``
    (audio and vision ones take timestamps or grids), not named for another modality."""
    cls = type(module).__name__
    if not cls.endswith("RotaryEmbedding") or any(
            word in cls or word in name for word in ("Vision", "vision", "Audio", "audio",
                                                     "visual")):
        return False
    try:
        return "position_ids" in inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False


def patch(model: Any) -> Any:
    """Make the loaded transformers ``model`` compute its positional encoding with peregistry,
    in place, in every layer; return ``model``. Patching a patched model does nothing.

    :raises ValueError: the model has nothing this can take over (no text rotary module, T5
        relative bias or Bloom ALiBi), naming its ``model_type``; or a rotary module's tables
        differ from ``from_hf_config(model.config)``'s (nothing is patched then).

    A tiny random Llama (no download): patched, its logits stay those of its own code.

    >>> import torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> from peregistry.integrations.transformers import patch, unpatch
    >>> _ = torch.manual_seed(0)
    >>> config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
    ...                      num_attention_heads=2, num_key_value_heads=2, vocab_size=64)
    >>> model = LlamaForCausalLM(config).eval()
    >>> ids = torch.arange(6)[None]
    >>> with torch.no_grad():
    ...     before = model(ids).logits
    ...     after = patch(model)(ids).logits
    >>> after.shape
    torch.Size([1, 6, 64])
    >>> torch.allclose(before, after, atol=1e-5)
    True
    >>> unpatch(model) is model
    True
    """
    if getattr(model, _UNDO, False):
        return model
    config = model.config
    model_type = _model_type(config)
    patched_modules: list[Any] = []
    candidates: dict[str | None, list[Any]] = {}  # asked once per patch, not per module
    try:
        for name, module in model.named_modules():
            if _is_text_rotary(name, module):
                _bind(module, "forward", _rotary_forward(module, config, model_type, candidates))
            elif getattr(module, "has_relative_attention_bias", False) and hasattr(
                    module, "compute_bias"):
                _bind(module, "compute_bias", _t5_compute_bias(module, config))
            elif hasattr(module, "build_alibi_tensor") and model_type == "bloom":
                _bind(module, "build_alibi_tensor", _bloom_alibi(config))
                hook = module.register_forward_pre_hook(_with_mask, with_kwargs=True)
                module.__dict__[_SAVED]["_hook"] = hook.id
            else:
                continue
            patched_modules.append(module)
    except Exception:
        for module in patched_modules:
            _restore(module)
        raise
    if not patched_modules:
        raise ValueError(f"peregistry.integrations.transformers.patch: model type "
                         f"{model_type!r} has no positional encoding this can take over (a "
                         f"text *RotaryEmbedding module, T5's relative attention bias or "
                         f"Bloom's ALiBi)")
    object.__setattr__(model, _UNDO, True)
    return model


def unpatch(model: Any) -> Any:
    """Restore the model's own positional-encoding code; return ``model``. An unpatched model
    is returned as it is."""
    if not getattr(model, _UNDO, False):
        return model
    for module in model.modules():
        if _SAVED in module.__dict__:
            _restore(module)
    object.__delattr__(model, _UNDO)
    return model


@contextlib.contextmanager
def patched(model: Any) -> Iterator[Any]:
    """``with patched(model): ...``: the model patched inside the block, restored after it
    (on an error too). A model patched before the block stays patched."""
    was = bool(getattr(model, _UNDO, False))
    patch(model)
    try:
        yield model
    finally:
        if not was:
            unpatch(model)
