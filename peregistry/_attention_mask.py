"""Text position ids from an attention mask: left padding leaves each row's first real token at
position 0. Hugging Face's rule (``GenerationMixin._prepare_position_ids_for_generation``,
transformers 5.23)::

    position_ids = attention_mask.long().cumsum(-1) - 1
    position_ids = position_ids.masked_fill(attention_mask == 0, 0)
"""

from __future__ import annotations

from typing import Any

__all__ = ["positions_from_attention_mask"]


def positions_from_attention_mask(mask: Any, *, fill: int = 0) -> Any:
    """The position of every token of ``mask`` ``(..., seq)`` (1 or True: a token, 0 or False:
    padding): ``cumsum(mask, -1) - 1`` where the mask is set, ``fill`` at padding (its value
    never reaches attention; transformers 5.23 fills 0, older releases 1).

    For generation with a KV cache, the new tokens' positions are the last columns:
    ``positions_from_attention_mask(mask)[..., -n:]``. A concrete mask must hold only 0 and 1
    (a traced one, under ``jax.jit``/``torch.compile``, is not read).

    :returns: the namespace's index dtype (int64; int32 for JAX without x64), on ``mask``'s
        device, shape ``mask.shape``.
    """
    from .parallel._checks import device_of, host_ints, index_dtype, is_concrete, namespace

    owner = "positions_from_attention_mask"
    if isinstance(fill, bool) or not isinstance(fill, int):
        raise TypeError(f"{owner}: fill must be an int, got {fill!r}")
    if not (hasattr(mask, "shape") and hasattr(mask, "dtype")):
        raise TypeError(f"{owner}: mask must be an array of 0/1 or bool, got "
                        f"{type(mask).__name__}")
    xp = namespace(owner, "mask", mask)
    if not (xp.isdtype(mask.dtype, "bool") or xp.isdtype(mask.dtype, "integral")):
        raise TypeError(f"{owner}: mask must have a bool or integer dtype, got {mask.dtype}")
    if len(mask.shape) < 1:
        raise ValueError(f"{owner}: mask must have a sequence axis (shape (..., seq)), got a "
                         f"0-d array")
    if not xp.isdtype(mask.dtype, "bool") and is_concrete(mask):
        # one boolean read back, not the whole mask (a long batch is large)
        outside = xp.logical_and(mask != 0, mask != 1)
        if bool(xp.any(outside)):
            bad = sorted({v for v in host_ints(mask) if v not in (0, 1)})
            raise ValueError(f"{owner}: mask must hold only 0 and 1, got {bad[:5]}")
    dev = device_of(mask)
    dt = index_dtype(xp, dev)
    on = xp.astype(mask, dt)
    counted = xp.cumulative_sum(on, axis=-1) - 1
    return xp.where(on != 0, counted, xp.asarray(fill, dtype=dt, device=dev))
