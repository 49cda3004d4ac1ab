"""Which tokens a context-parallel rank holds, and their positions, as arrays (traceable).

Two layouts of a row of ``total`` tokens over ``cp_size`` ranks, with ``l = total / cp_size``:

* ``"contiguous"``: rank ``r`` holds tokens ``[r * l, (r + 1) * l)`` of the row (packed
  sequences may straddle ranks).
* ``"zigzag"``: each sequence (the whole row, or each packed sequence of ``cu_seqlens``) is cut
  into ``2 * cp_size`` equal chunks of ``c`` tokens; rank ``r`` holds chunks ``r`` and
  ``2 * cp_size - 1 - r`` of every sequence, in sequence order (Megatron-core
  ``get_batch_on_this_cp_rank``; TransformerEngine ``thd_get_partitioned_indices`` and its fused
  RoPE with ``cp_size``/``cp_rank``, which take the *global* ``cu_seqlens``).

Local token ``u`` of rank ``r`` (zigzag, packed): its sequence ``j`` is found in the local
``cu_seqlens / cp_size``, ``v = u - cu_seqlens[j] / cp_size``, ``c = len_j / (2 * cp_size)`` and
its global index is ``cu_seqlens[j] + v + c * (r if v < c else 2 * cp_size - 2 - r)``. This is
arithmetic on ``cp_rank``, so it may be traced (``jax.lax.axis_index`` in ``shard_map``).
"""

from __future__ import annotations

from typing import Any, Literal

from ._checks import (
    count,
    index_dtype,
    is_array,
    one_framework,
    rank,
    sequence_lengths,
    target,
)
from ._checks import cu_seqlens as _checked_cu
from ._checks import device_of as _device
from ._packed import packed_positions

__all__ = ["shard_positions", "shard_tokens"]

Layout = Literal["contiguous", "zigzag"]
LAYOUTS = ("contiguous", "zigzag")


def shard_tokens(total: int, cp_size: int, cp_rank: Any, *, layout: Layout = "contiguous",
                 cu_seqlens: Any = None, xp: Any = None, like: Any = None,
                 device: Any = None) -> Any:
    """The global indices of the ``total / cp_size`` tokens rank ``cp_rank`` holds, in its
    local order (``take(x, index, axis=-2)`` gives its block of ``x``).

    With ``l = total / cp_size`` and local token ``u`` in ``[0, l)``: contiguous gives
    ``r * l + u``; zigzag gives ``u + c * (r if u < c else 2 * cp_size - 2 - r)`` with
    ``c = l / 2`` (chunks ``r`` and ``2 * cp_size - 1 - r``), and for a packed row the same
    within each sequence ``j``, with ``u`` counted from ``cu_seqlens[j] / cp_size``,
    ``c = len_j / (2 * cp_size)`` and ``cu_seqlens[j]`` added (TransformerEngine's
    ``thd_partition_indices_kernel``; Megatron-core ``get_batch_on_this_cp_rank``).

    :param total: tokens in the (packed) row; a static int.
    :param cp_size: number of ranks (TransformerEngine ``cp_size``, ``num_shards``).
    :param cp_rank: this rank: an int or a 0-d integer array (traced ones too).
    :param layout: ``"contiguous"`` or ``"zigzag"`` (see the module docstring).
    :param cu_seqlens: for a packed row, its cumulative sequence lengths: zigzag then splits
        every sequence (each length must divide into ``2 * cp_size`` chunks). Contiguous
        ignores the sequences (it only checks ``cu_seqlens``).
    :param xp: output namespace when no array argument gives one (default NumPy).
    :param like: an array whose namespace and device the output takes.
    :param device: the output device.
    :returns: integer array of shape ``(total / cp_size,)``: ``cu_seqlens``'s dtype when given,
        else the namespace's default integer dtype.
    """
    owner = "shard_tokens"
    one_framework(owner, cu_seqlens=cu_seqlens, cp_rank=cp_rank, like=like)
    total, cp_size, cp_rank = _sizes(owner, total, cp_size, cp_rank, layout, cu_seqlens)
    ns, dev = target(owner, xp, like, device, cu_seqlens,
                     cp_rank if is_array(cp_rank) else None)
    # computed in the index dtype (torch gathers with int32/int64 only; int8 would wrap), given
    # back in cu_seqlens's
    dt = index_dtype(ns, dev)
    out = cu_seqlens.dtype if cu_seqlens is not None else dt
    local = total // cp_size
    u = ns.arange(local, dtype=dt, device=dev)
    r = ns.astype(cp_rank, dt) if is_array(cp_rank) else cp_rank
    if layout == "contiguous":
        return ns.astype(u + r * local, out, copy=False)
    if cu_seqlens is None:
        return u + (local // 2) * _chunk_of(ns, u < local // 2, r, cp_size, dt)
    cu = ns.astype(cu_seqlens, dt, copy=False)
    cu_local = cu // cp_size  # the rank's own cu_seqlens (TE divides likewise)
    j = ns.astype(ns.searchsorted(cu_local, u, side="right"), dt) - 1
    start = ns.take(cu_local, j)
    last = ns.asarray(cu.shape[0] - 1, dtype=dt, device=dev)
    c = (ns.take(cu_local, ns.minimum(j + 1, last)) - start) // 2
    v = u - start
    return ns.astype(ns.take(cu, j) + v + c * _chunk_of(ns, v < c, r, cp_size, dt), out,
                     copy=False)


def _chunk_of(ns: Any, first: Any, r: Any, cp_size: int, dt: Any) -> Any:
    """Chunk number minus the local half: ``r`` for a rank's first half, ``2cp - 2 - r`` after."""
    if not is_array(r):
        r = ns.asarray(r, dtype=dt, device=_device(first))
    return ns.where(first, r, 2 * cp_size - 2 - r)


def shard_positions(total: int, cp_size: int, cp_rank: Any, *, layout: Layout = "contiguous",
                    cu_seqlens: Any = None, offset: int = 0, xp: Any = None, like: Any = None,
                    device: Any = None) -> Any:
    """The positions of the tokens rank ``cp_rank`` holds (:func:`shard_tokens`), to pass as
    ``positions`` to ``enc.rotate``/``enc.encode`` on its local block: ``index + offset`` for a
    plain sequence, :func:`~peregistry.parallel.packed_positions` at ``index`` for a packed row
    (positions restart in every sequence; ``offset`` must then be 0). The rank's result equals
    the matching rows of the unsharded one exactly. Arguments as :func:`shard_tokens`.
    """
    offset = count("offset", offset, 0)
    if cu_seqlens is not None and offset:
        raise ValueError(f"shard_positions: offset={offset} with cu_seqlens: positions of packed "
                         f"sequences start at 0 in every sequence; offset must be 0")
    index = shard_tokens(total, cp_size, cp_rank, layout=layout, cu_seqlens=cu_seqlens, xp=xp,
                         like=like, device=device)
    if cu_seqlens is None:
        return index + offset if offset else index
    return packed_positions(cu_seqlens, total, index=index)


def _sizes(owner: str, total: Any, cp_size: Any, cp_rank: Any, layout: Any,
           cu: Any) -> tuple[int, int, Any]:
    """Check the arguments of :func:`shard_tokens`; concrete values only (see module doc)."""
    if layout not in LAYOUTS:
        raise ValueError(f"{owner}: layout must be one of {LAYOUTS}, got {layout!r}")
    total = count("total", total, 0)
    cp_size = count("cp_size", cp_size, 1)
    cp_rank = rank(owner, cp_rank, cp_size)
    if cu is not None:
        _checked_cu(owner, cu, total)
    parts = cp_size if layout == "contiguous" else 2 * cp_size
    if cu is None or layout == "contiguous":
        if total % parts:
            what = "blocks" if layout == "contiguous" else "chunks (2 * cp_size)"
            raise ValueError(f"{owner}: total={total} tokens do not divide into {parts} equal "
                             f"{what} for layout={layout!r}, cp_size={cp_size}; pad the row to "
                             f"a multiple of {parts}")
        return total, cp_size, cp_rank
    for j, n in enumerate(sequence_lengths(cu) or []):
        if n % parts:
            raise ValueError(f"{owner}: cu_seqlens: sequence {j} has length {n}, which does not "
                             f"divide into 2 * cp_size = {parts} zigzag chunks; pad every "
                             f"sequence to a multiple of {parts} (TransformerEngine's "
                             f"cu_seqlens_padded)")
    return total, cp_size, cp_rank
