"""Positions for sequence (context) parallelism: framework-free helpers.

When the sequence axis is split over ``num_shards`` devices or processes, shard ``i`` holds the
tokens ``[i*s, (i+1)*s)`` of a sequence of ``seq_len = num_shards * s`` tokens. Rotary encoders
then give exactly the unsharded result if each shard rotates its block with its own offset::

    start, stop = shard_bounds(seq_len, num_shards, rank)
    q_local = enc.rotate(q[..., start:stop, :], offset=shard_offset(stop - start, rank))

``shard_offset`` is plain arithmetic, so ``shard_index`` may be a traced array
(``jax.lax.axis_index("s")`` inside ``shard_map``). Contiguous blocks of equal size only: a
sequence that does not divide evenly is an error (pad it; peregistry does not guess a layout).
Nothing here imports a framework.
"""

from __future__ import annotations

import operator
from typing import Any

__all__ = ["shard_bounds", "shard_ids", "shard_offset"]


def _count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {value!r}")
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {value!r}") from None
    if n < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {n}")
    return n


def shard_bounds(seq_len: int, num_shards: int, shard_index: int, *,
                 offset: int = 0) -> tuple[int, int]:
    """``(start, stop)``: the positions held by shard ``shard_index`` of ``num_shards`` contiguous
    equal blocks of a ``seq_len``-token sequence whose first token is at position ``offset``
    (``offset`` cached tokens before it). ``seq_len`` must be divisible by ``num_shards``."""
    seq_len = _count("seq_len", seq_len, 0)
    num_shards = _count("num_shards", num_shards, 1)
    shard_index = _count("shard_index", shard_index, 0)
    offset = _count("offset", offset, 0)
    if shard_index >= num_shards:
        raise ValueError(f"shard_index must be < num_shards={num_shards}, got {shard_index}")
    if seq_len % num_shards:
        raise ValueError(f"seq_len={seq_len} is not divisible by num_shards={num_shards}; "
                         f"pad the sequence to a multiple of {num_shards} (context parallelism "
                         f"splits it into equal contiguous blocks)")
    s = seq_len // num_shards
    return offset + shard_index * s, offset + (shard_index + 1) * s


def shard_offset(local_len: int, shard_index: Any, *, offset: Any = 0) -> Any:
    """The ``offset`` to pass to ``enc.rotate`` on shard ``shard_index`` holding ``local_len``
    tokens: ``offset + shard_index * local_len``. ``shard_index`` (and ``offset``) may be Python
    ints or integer arrays of any framework (traced ones too); the result has their type."""
    local_len = _count("local_len", local_len, 0)
    if isinstance(shard_index, bool) or isinstance(offset, bool):
        raise TypeError("shard_index and offset must be ints or integer arrays, not bool")
    return offset + shard_index * local_len


def shard_ids(ids: Any, num_shards: int, shard_index: int, *, axis: int = -1) -> Any:
    """This shard's block of position ids (e.g. M-RoPE ids ``(3, seq)`` or ``(3, batch, seq)``
    from :mod:`peregistry.multimodal`): the ``axis`` (default: last, the sequence) sliced to
    :func:`shard_bounds`. Works on any array with basic slicing; the result is a view where the
    framework gives views."""
    ndim = len(ids.shape)
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis={axis} is out of range for ids of shape {tuple(ids.shape)}")
    axis %= ndim
    start, stop = shard_bounds(int(ids.shape[axis]), num_shards, shard_index)
    index = (slice(None),) * axis + (slice(start, stop),)
    return ids[index]
