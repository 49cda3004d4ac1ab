"""Packed (varlen, ``thd``) sequences: positions restart at 0 in every sequence of a packed row.

Many sequences packed into one row of ``total`` tokens are described by ``cu_seqlens``, their
cumulative lengths ``[0, l0, l0 + l1, ..., total]`` (flash-attention's ``cu_seqlens_q``/
``cu_seqlens_k``, TransformerEngine's ``cu_seqlens`` with ``qkv_format="thd"``). Token ``t`` of
sequence ``j = max{i : cu_seqlens[i] <= t}`` has position ``t - cu_seqlens[j]``.

Every function here computes with ``searchsorted``, ``take`` and arithmetic in the namespace and
on the device of its array arguments, so it runs under ``jax.jit`` (a traced ``cu_seqlens``
with a static ``total``) and ``torch.compile``. Concrete ``cu_seqlens`` are checked (start at 0,
never decrease, end at ``total``; reading them is one device-to-host copy); traced ones are
not: tokens past a traced ``cu_seqlens[-1]`` form one more sequence, numbered on from 0.

Relative kinds (``bias``, ``embed``) pair every query with every key. Packed positions alone
would pair tokens of *different* sequences as if they were neighbours (token 3 of one sequence
and token 3 of the next are "at distance 0"): use :func:`packed_bias`, which masks those pairs
with ``-inf``, or apply :func:`packed_mask` to the attention scores yourself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ._checks import count, in_range, index_dtype, integer_array, is_array, namespace, one_framework
from ._checks import cu_seqlens as _checked_cu
from ._checks import device_of as _device

__all__ = ["pack_ids", "packed_bias", "packed_mask", "packed_positions",
           "positions_from_sequence_ids", "sequence_ids"]


def _wide(owner: str, cu: Any, total: Any, index: Any) -> tuple[Any, Any, Any, int]:
    """``(xp, cu, t, total)``: checked ``cu_seqlens`` and the token indices asked for (``index``, each
    in ``[0, total)``, or all of them), both in the namespace's index dtype (int64; int32 for
    JAX without x64): any integer ``cu_seqlens`` is accepted (int8/uint8 too, which torch cannot
    gather with, and whose arithmetic would wrap); results are cast back to its dtype."""
    one_framework(owner, cu_seqlens=cu, index=index)
    xp, n = _checked_cu(owner, cu, total)
    dt = index_dtype(xp, _device(cu))
    wide = xp.astype(cu, dt, copy=False)
    if index is None:
        return xp, wide, xp.arange(n, dtype=dt, device=_device(cu)), n
    integer_array(owner, "index", index)
    in_range(owner, "index", index, 0, n)
    return xp, wide, xp.astype(index, dt, copy=False), n


def _seq_of(xp: Any, cu: Any, t: Any) -> Any:
    # j = max{i : cu[i] <= t}: searchsorted on the right, minus one (empty sequences skipped).
    return xp.astype(xp.searchsorted(cu, t, side="right"), cu.dtype) - 1


def sequence_ids(cu_seqlens: Any, total: int | None = None, *, index: Any = None) -> Any:
    """The sequence each token belongs to: ``j`` with ``cu_seqlens[j] <= t < cu_seqlens[j+1]``.

    :param cu_seqlens: 1-D integer array ``[0, l0, l0 + l1, ..., total]``.
    :param total: the number of tokens (``x.shape[0]`` of a ``thd`` tensor); required when
        ``cu_seqlens`` is traced, checked against ``cu_seqlens[-1]`` when it is concrete.
    :param index: global token indices to report on (e.g. a rank's
        :func:`~peregistry.parallel.shard_tokens`); default: all ``total`` tokens.
    :returns: an array of ``cu_seqlens``'s dtype, namespace and device, shape ``(total,)`` or
        ``index.shape``.
    """
    xp, cu, t, _ = _wide("sequence_ids", cu_seqlens, total, index)
    return xp.astype(_seq_of(xp, cu, t), cu_seqlens.dtype, copy=False)


def packed_positions(cu_seqlens: Any, total: int | None = None, *, index: Any = None) -> Any:
    """The position of every token within its own packed sequence: ``t - cu_seqlens[j]`` for
    token ``t`` of sequence ``j`` (flash-attention varlen / TransformerEngine ``thd``).

    Pass the result as ``positions`` to any encoder: ``enc.rotate(x, pos)`` for ``x`` of shape
    ``(..., total, dim)``, ``enc.encode(pos)``. For ``enc.bias``/``enc.embed`` use
    :func:`packed_bias` or mask with :func:`packed_mask`: positions alone pair tokens of
    different sequences. ``cu_seqlens=[0, 3, 5]`` gives ``[0, 1, 2, 0, 1]``.

    :param cu_seqlens: 1-D integer array ``[0, l0, l0 + l1, ..., total]``.
    :param total: the number of tokens; required when ``cu_seqlens`` is traced (``jax.jit``),
        checked against ``cu_seqlens[-1]`` when concrete.
    :param index: only the tokens at these global indices (a context-parallel rank's
        :func:`~peregistry.parallel.shard_tokens`); default: all ``total`` tokens.
    :returns: ``cu_seqlens``'s dtype, namespace and device; shape ``(total,)`` or ``index.shape``.
    """
    xp, cu, t, _ = _wide("packed_positions", cu_seqlens, total, index)
    return xp.astype(t - xp.take(cu, _seq_of(xp, cu, t)), cu_seqlens.dtype, copy=False)


def positions_from_sequence_ids(seq_ids: Any) -> Any:
    """Positions within each run of equal ids in a 1-D array of per-token sequence ids
    (``[7, 7, 7, 2, 2, 9]`` → ``[0, 1, 2, 0, 1, 0]``): a sequence is a maximal run, so ids need
    not be sorted or start at 0, but a sequence must be contiguous.

    Run ``k`` of token ``t`` is ``cumsum(ids[s] != ids[s-1] for s <= t)``; its first token is
    ``searchsorted(runs, runs[t], side="left")`` (runs never decrease), and the position is ``t``
    minus that. Traceable: no data-dependent shapes. Output: default integer dtype of
    ``seq_ids``'s namespace, on its device.
    """
    xp = integer_array("positions_from_sequence_ids", "seq_ids", seq_ids)
    n = seq_ids.shape[0]
    dt = index_dtype(xp, _device(seq_ids))
    t = xp.arange(n, dtype=dt, device=_device(seq_ids))
    if n == 0:
        return t
    changed = xp.astype(seq_ids[1:] != seq_ids[:-1], dt)
    runs = xp.cumulative_sum(changed, include_initial=True)
    return t - xp.astype(xp.searchsorted(runs, runs, side="left"), dt)


def packed_mask(cu_seqlens: Any, total: int | None = None, *, index: Any = None,
                causal: bool = False) -> Any:
    """Boolean ``(Q, total)`` mask, True where query and key belong to the same packed sequence
    (the block-diagonal mask of varlen attention), and with ``causal=True`` also key ``<=``
    query. ``Q`` is ``total``, or ``len(index)`` for the queries at global indices ``index``
    (one context-parallel rank's queries against all keys).

    Use it as ``scores = where(mask, scores, -inf)``; an additive bias becomes
    ``where(mask, bias, -inf)`` (what :func:`packed_bias` returns).
    """
    if not isinstance(causal, bool):
        raise TypeError(f"packed_mask: causal must be a bool, got {causal!r}")
    xp, cu, q, n = _wide("packed_mask", cu_seqlens, total, index)
    k = q if index is None else xp.arange(n, dtype=cu.dtype, device=_device(cu))
    same = _seq_of(xp, cu, q)[:, None] == _seq_of(xp, cu, k)[None, :]
    return xp.logical_and(same, k[None, :] <= q[:, None]) if causal else same


def packed_bias(enc: Any, cu_seqlens: Any, total: int | None = None, *, index: Any = None,
                params: Any = None, dtype: Any = None, causal: bool = False) -> Any:
    """``enc.bias`` of a packed row, ``-inf`` between tokens of different sequences:
    ``where(packed_mask(...), enc.bias(q_pos, k_pos), -inf)`` with ``q_pos``/``k_pos`` the
    :func:`packed_positions` of the queries (``index``, default all) and of all keys.

    :param enc: a ``bias`` encoder (``alibi``, ``t5``, a plugin's).
    :returns: ``(..., num_heads, Q, total)``, as ``enc.bias`` (``params``, ``dtype`` passed on).
    """
    if getattr(enc, "kind", None) != "bias":
        raise TypeError(f"packed_bias: enc must be an encoder of kind 'bias', got "
                        f"{getattr(enc, 'kind', type(enc).__name__)!r} ({enc!r})")
    k_pos = packed_positions(cu_seqlens, total)
    q_pos = k_pos if index is None else packed_positions(cu_seqlens, total, index=index)
    bias = enc.bias(q_pos, k_pos, params=params, dtype=dtype)
    mask = packed_mask(cu_seqlens, total, index=index, causal=causal)
    xp = namespace("packed_bias", "enc.bias(...)", bias)
    return xp.where(mask, bias, xp.asarray(-math.inf, dtype=bias.dtype, device=_device(bias)))


def pack_ids(ids: Sequence[Any], *, axis: int = -1) -> tuple[Any, Any]:
    """Pack per-sequence position ids into one row: ``(concat(ids, axis), cu_seqlens)``.

    Each entry is one sequence's ids in the same namespace, e.g. the ``(3, l_j)`` M-RoPE ids of
    :func:`peregistry.multimodal.position_ids` (each starting at 0) or a ``(l_j,)`` positions
    array. ``cu_seqlens`` is int32 (as flash-attention and TransformerEngine want it), on the
    ids' device.
    """
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence) or not ids:
        raise TypeError(f"pack_ids: ids must be a non-empty list of arrays, got {ids!r}")
    if not all(is_array(a) for a in ids):
        raise TypeError("pack_ids: every entry of ids must be an array, got "
                        f"{[type(a).__name__ for a in ids]}")
    one_framework("pack_ids", **{f"ids[{i}]": a for i, a in enumerate(ids)})
    xp = namespace("pack_ids", "ids[0]", ids[0])
    lengths = [0]
    for a in ids:
        lengths.append(lengths[-1] + count("ids[i].shape[axis]", int(a.shape[axis]), 0))
    cu = xp.asarray(lengths, dtype=xp.int32, device=_device(ids[0]))
    return xp.concat(list(ids), axis=axis), cu
