"""Static layouts of a plain sequence: contiguous blocks and the zigzag (load-balanced) chunks.

Contiguous: when the sequence axis is split over ``num_shards`` devices or processes, shard ``i`` holds the
tokens ``[i*s, (i+1)*s)`` of a sequence of ``seq_len = num_shards * s`` tokens. Rotary encoders
then give exactly the unsharded result if each shard rotates its block with its own offset::

    start, stop = shard_bounds(seq_len, num_shards, rank)
    q_local = enc.rotate(q[..., start:stop, :], offset=shard_offset(stop - start, rank))

``shard_offset`` is plain arithmetic, so ``shard_index`` may be a traced array
(``jax.lax.axis_index("s")`` inside ``shard_map``). Contiguous blocks of equal size only: a
sequence that does not divide evenly is an error (pad it; peregistry does not guess a layout).
Nothing here imports a framework.

Zigzag (Megatron-core, ring-flash-attention, TransformerEngine ``cp_size``/``cp_rank``): the
sequence is cut into ``2 * cp_size`` equal chunks and rank ``r`` holds chunks ``r`` and
``2 * cp_size - 1 - r``, so that under a causal mask every rank does the same work.
"""

from __future__ import annotations

from typing import Any

from ._checks import count as _count
from ._checks import in_range, is_array, namespace, one_framework

__all__ = ["shard_bounds", "shard_ids", "shard_offset", "zigzag_bounds", "zigzag_shard"]


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
        raise TypeError("shard_offset: shard_index and offset must be ints or integer arrays, "
                        "not bool")
    one_framework("shard_offset", shard_index=shard_index, offset=offset)
    values = []
    for name, v in (("shard_index", shard_index), ("offset", offset)):
        if not is_array(v):  # Python and NumPy integer scalars are ints
            v = _count(name, v, 0)
        in_range("shard_offset", name, v, 0, None)  # traced arrays are not read
        values.append(v)
    shard_index, offset = values
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
    index = (*(slice(None),) * axis, slice(start, stop), ...)  # "...": the standard indexes all axes
    return ids[index]


def zigzag_bounds(seq_len: int, cp_size: int, cp_rank: int, *,
                  offset: int = 0) -> tuple[tuple[int, int], tuple[int, int]]:
    """``((start0, stop0), (start1, stop1))``: the two position ranges rank ``cp_rank`` holds in
    the zigzag layout of a ``seq_len``-token sequence starting at position ``offset``.

    With ``c = seq_len / (2 * cp_size)``: chunk ``cp_rank`` is ``[cp_rank * c, (cp_rank + 1) * c)``
    and chunk ``2 * cp_size - 1 - cp_rank`` is ``[(2 * cp_size - 1 - cp_rank) * c,
    (2 * cp_size - cp_rank) * c)`` (Megatron-core ``get_batch_on_this_cp_rank``;
    TransformerEngine's fused RoPE with ``cp_size``/``cp_rank``). The rank's local tokens are the
    two chunks concatenated, in this order. ``seq_len`` must be divisible by ``2 * cp_size``.
    """
    seq_len = _count("seq_len", seq_len, 0)
    cp_size = _count("cp_size", cp_size, 1)
    cp_rank = _count("cp_rank", cp_rank, 0)
    offset = _count("offset", offset, 0)
    if cp_rank >= cp_size:
        raise ValueError(f"cp_rank must be in [0, cp_size={cp_size}), got {cp_rank}")
    if seq_len % (2 * cp_size):
        raise ValueError(f"seq_len={seq_len} is not divisible into 2 * cp_size = {2 * cp_size} "
                         f"chunks; pad the sequence to a multiple of {2 * cp_size} (the zigzag "
                         f"layout splits it into equal chunks)")
    c = seq_len // (2 * cp_size)
    mirror = 2 * cp_size - 1 - cp_rank
    return ((offset + cp_rank * c, offset + (cp_rank + 1) * c),
            (offset + mirror * c, offset + (mirror + 1) * c))


def zigzag_shard(a: Any, cp_size: int, cp_rank: int, *, axis: int = -1) -> Any:
    """Rank ``cp_rank``'s tokens of ``a`` in the zigzag layout: along ``axis`` (default: last),
    the two chunks of :func:`zigzag_bounds` concatenated. Use it on ``x`` (``axis=-2``), on
    position ids (M-RoPE ids ``(3, seq)``: the default) or on a ``positions`` array. The
    result is in ``a``'s namespace and on its device."""
    ndim = len(a.shape)
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis={axis} is out of range for an array of shape {tuple(a.shape)}")
    axis %= ndim
    (s0, e0), (s1, e1) = zigzag_bounds(int(a.shape[axis]), cp_size, cp_rank)
    lead = (slice(None),) * axis
    parts = [a[(*lead, slice(s0, e0), ...)], a[(*lead, slice(s1, e1), ...)]]
    return namespace("zigzag_shard", "a", a).concat(parts, axis=axis)
