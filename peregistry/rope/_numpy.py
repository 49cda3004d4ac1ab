"""The NumPy fast path of the rotation, reached only through :mod:`._delegation`.

The generic rotation (:func:`._funcs.apply_rotation`) spells each product and sum as a new
array and stacks the two halves at the end: about eight passes over memory the size of ``x``
(docs/benchmarks.md, issue 43, has the measurements). Here the same products and
sums, in the same order and each rounded once, are NumPy ufuncs writing with ``out=`` into one
preallocated output, one scratch array for the second product, and (for large C-contiguous
inputs) in blocks of rows small enough that the passes over a block run in cache. Only NumPy's
own functions are used; the result is the generic rotation's bit for bit (tests/test_numpy_path.py).

Declined (None, the generic rotation runs): anything but exact ``numpy.ndarray`` objects
(a subclass such as a masked array has semantics of its own), tables of another dtype than the
computing one, non-float dtypes.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["BLOCK_ELEMENTS", "rotate"]

#: Elements of ``x`` per block: ``x``'s block, the output's block and the scratch block
#: (float32: 512 KiB each) stay in the last-level cache while the four passes over them run,
#: and blocks are few enough that the Python cost of a block (ufunc calls and
#: slicing) stays small next to the memory traffic it saves (2^15 to 2^18 were tried, see
#: docs/benchmarks.md).
BLOCK_ELEMENTS = 1 << 17


def rotate(x: Any, cos: Any, sin: Any, *, rotary_dim: int, interleaved: bool,
           cdt: Any) -> Any | None:
    """``x`` rotated by half-width tables, bit for bit :func:`._funcs.apply_rotation` with the
    same arguments, or None where this path does not apply (see the module)."""
    np = sys.modules["numpy"]  # (x is NumPy's: a dict read, not an import)
    ndarray = np.ndarray
    if type(x) is not ndarray or type(cos) is not ndarray or type(sin) is not ndarray:
        return None
    wide = cos.dtype
    if sin.dtype != wide or wide != cdt or wide.kind != "f" or x.dtype.kind != "f" \
            or x.ndim < 1 or cos.ndim < 1:
        return None
    try:
        lead = np.broadcast_shapes(x.shape[:-1], cos.shape[:-1], sin.shape[:-1])
    except ValueError:
        return None  # (the generic rotation raises its own error)
    dim = x.shape[-1]
    out = np.empty((*lead, dim), dtype=x.dtype)
    if rotary_dim < dim:
        # The generic rotation passes these through x's computing dtype: the same roundings.
        tail = x[..., rotary_dim:]
        np.copyto(out[..., rotary_dim:], tail if x.dtype == wide else tail.astype(wide),
                  casting="unsafe")
    big_c, big_s = wide_tables(np, cos, sin, interleaved)
    if (lead == x.shape[:-1] and x.ndim >= 2 and x.flags.c_contiguous
            and x.size >= 2 * BLOCK_ELEMENTS and cos.ndim >= 2
            and all(n == 1 for n in cos.shape[:-2]) and all(n == 1 for n in sin.shape[:-2])):
        _blocked(np, x, big_c, big_s, out, rotary_dim, interleaved)
        return out
    if x.dtype == wide:
        _rotate_into(np, x[..., :rotary_dim], big_c, big_s, out[..., :rotary_dim], interleaved)
    else:
        ow = np.empty((*lead, rotary_dim), dtype=wide)
        _rotate_into(np, x[..., :rotary_dim].astype(wide), big_c, big_s, ow, interleaved)
        np.copyto(out[..., :rotary_dim], ow, casting="unsafe")
    return out


def wide_tables(np: Any, cos: Any, sin: Any, interleaved: bool) -> tuple[Any, Any]:
    """Full-width tables ``(C, S)`` for :func:`_rotate_into`: ``C = [c, c]`` and ``S = [s, s]``
    (half layout), ``C = [c0, c0, c1, c1, ..]`` and ``S = [s0, -s0, s1, -s1, ..]``
    (interleaved), so that ``x·C`` and ``x·S`` are contiguous passes over whole rows."""
    if interleaved:
        n = cos.shape[-1]
        big_c = np.stack((cos, cos), axis=-1).reshape(*cos.shape[:-1], 2 * n)
        big_s = np.stack((sin, np.negative(sin)), axis=-1).reshape(*sin.shape[:-1], 2 * n)
        return big_c, big_s
    return np.concatenate((cos, cos), axis=-1), np.concatenate((sin, sin), axis=-1)


def _rotate_into(np: Any, x: Any, big_c: Any, big_s: Any, out: Any, interleaved: bool,
                 t: Any = None) -> None:
    """``out`` (of ``x``'s dtype, which is the tables') = the rotation of ``x`` ``(..., R)`` by
    the tables of :func:`wide_tables`.

    The generic rotation's products and sums, operand for operand, so that even the sign of a
    NaN is the same: half, ``a·c - b·s`` and ``b·c + a·s``; interleaved, ``a·c + b·(-s)`` and
    ``b·c + a·s`` (its ``x·C + flip(x)·S`` with ``S = (-s, s)``). The four products are two
    contiguous whole-row passes (``x·C`` into ``out``, ``x·S`` into scratch): NumPy runs a
    ufunc over half rows (strided) several times slower per element than over whole rows
    (measured), so only the two sums pair up the halves. ``t``: scratch of ``out``'s shape and
    dtype (made here if not given)."""
    h = x.shape[-1] // 2
    if t is None:
        t = np.empty(out.shape, dtype=out.dtype)
    np.multiply(x, big_c, out=out)  # [a·c, b·c]
    np.multiply(x, big_s, out=t)    # half: [a·s, b·s]; interleaved: [a·s, b·(-s)] per pair
    if interleaved:
        np.add(out[..., 0::2], t[..., 1::2], out=out[..., 0::2])
        np.add(out[..., 1::2], t[..., 0::2], out=out[..., 1::2])
    else:
        np.subtract(out[..., :h], t[..., h:], out=out[..., :h])
        np.add(out[..., h:], t[..., :h], out=out[..., h:])


def _rotate_half_swapped(np: Any, x: Any, big_c: Any, big_ns: Any, out: Any, t: Any,
                         u: Any) -> None:
    """The half layout as :func:`_rotate_into` computes it, with one pass that pairs the halves
    instead of two: ``u = [b, a]`` (a copy, the cheapest strided pass NumPy has), then ``out = x·C + u·S'``
    with ``S' = [-s, s]``, three contiguous passes. ``a·c + b·(-s)`` is ``a·c - b·s`` to the
    bit (IEEE subtraction is the addition of the negation; ``b·(-s) = -(b·s)`` exactly, and a
    NaN from ``a``, ``b`` or an invalid operation propagates alike), but for the sign of a NaN
    that comes from the table itself: the caller takes this form only for tables without NaN."""
    h = x.shape[-1] // 2
    pairs = x.reshape(*x.shape[:-1], 2, h)
    np.copyto(u.reshape(*u.shape[:-1], 2, h), pairs[..., ::-1, :])
    np.multiply(x, big_c, out=out)
    np.multiply(u, big_ns, out=t)
    np.add(out, t, out=out)


def _rotate_pairs_swapped(np: Any, x: Any, big_c: Any, big_s: Any, out: Any, t: Any,
                          w: Any) -> None:
    """The interleaved layout as :func:`_rotate_into` computes it, for float32, in contiguous
    passes only: ``t = x·S`` (``[a·s, b·(-s)]`` per pair), each pair of ``t`` swapped by
    rotating its 8 bytes as one 64-bit integer by 32 bits (a move of bits: exact), then ``out =
    x·C + t``. The same products and sums as the two strided adds of :func:`_rotate_into`
    (NumPy's slowest loops), so the same bits. ``w``: uint64 scratch of ``t``'s pairs."""
    np.multiply(x, big_c, out=out)  # [a·c, b·c]
    np.multiply(x, big_s, out=t)    # [a·s, b·(-s)]
    v = t.view(np.uint64)
    np.right_shift(v, 32, out=w)
    np.left_shift(v, 32, out=v)
    np.bitwise_or(v, w, out=v)      # [b·(-s), a·s]
    np.add(out, t, out=out)


def _blocked(np: Any, x: Any, big_c: Any, big_s: Any, out: Any, rotary_dim: int,
             interleaved: bool) -> None:
    """:func:`_rotate_into` over blocks of ``group`` leading slices by ``rows`` positions of a
    C-contiguous ``x`` ``(..., seq, dim)`` whose tables vary along ``seq`` only, so that main
    memory sees about one read of ``x`` and one write of ``out``, as a copy does, and the other
    passes run in cache. An ``x`` narrower or wider than the tables is converted block by block
    into scratch of the tables' dtype and the result rounded once into ``out`` (the generic
    rotation's two ``astype``)."""
    dim, seq = x.shape[-1], x.shape[-2]
    n_lead = x.size // (seq * dim)
    x3, o3 = x.reshape(n_lead, seq, dim), out.reshape(n_lead, seq, dim)
    c2 = big_c.reshape(big_c.shape[-2], rotary_dim)
    s2 = big_s.reshape(big_s.shape[-2], rotary_dim)
    rows = max(1, min(seq, BLOCK_ELEMENTS // dim))
    group = max(1, BLOCK_ELEMENTS // (seq * dim)) if rows == seq else 1
    wide = big_c.dtype
    same = x.dtype == wide
    tmp = np.empty((group, rows, rotary_dim), dtype=wide)  # (one scratch for every block)
    # The half layout pairs its halves in one pass (:func:`_rotate_half_swapped`) unless a
    # table holds a NaN (a table-sized check, 1/heads of x's size).
    swapped = None
    if not interleaved and not np.isnan(s2).any():
        h = rotary_dim // 2
        s2 = np.concatenate((np.negative(s2[:, h:]), s2[:, h:]), axis=-1)  # [-s, s]
        swapped = np.empty((group, rows, rotary_dim), dtype=wide)
    # The interleaved layout swaps its pairs as 64-bit integers where they are two float32.
    pairs = None
    if interleaved and wide == np.float32:
        pairs = np.empty((group, rows, rotary_dim // 2), dtype=np.uint64)
    xw = ow = None
    if not same:
        xw = np.empty((group, rows, rotary_dim), dtype=wide)
        ow = np.empty((group, rows, rotary_dim), dtype=wide)
    for g0 in range(0, n_lead, group):
        g1 = min(n_lead, g0 + group)
        for s0 in range(0, seq, rows):
            s1 = min(seq, s0 + rows)
            # (a table of one row serves every position: it broadcasts)
            c = c2 if c2.shape[0] == 1 else c2[s0:s1]
            s = s2 if s2.shape[0] == 1 else s2[s0:s1]
            xs, os_ = x3[g0:g1, s0:s1, :rotary_dim], o3[g0:g1, s0:s1, :rotary_dim]
            t = tmp[: g1 - g0, : s1 - s0]
            if xw is not None and ow is not None:
                xb, ob = xw[: g1 - g0, : s1 - s0], ow[: g1 - g0, : s1 - s0]
                np.copyto(xb, xs, casting="unsafe")
            else:
                xb, ob = xs, os_
            if swapped is not None:
                _rotate_half_swapped(np, xb, c, s, ob, t, swapped[: g1 - g0, : s1 - s0])
            elif pairs is not None:
                _rotate_pairs_swapped(np, xb, c, s, ob, t, pairs[: g1 - g0, : s1 - s0])
            else:
                _rotate_into(np, xb, c, s, ob, interleaved, t)
            if ob is not os_:
                np.copyto(os_, ob, casting="unsafe")
