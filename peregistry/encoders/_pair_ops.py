"""The integer operations of the built-in relative encoders (``peregistry/encoders/relative.py``),
each written with as few framework calls as the namespace allows: a small call's cost is its
count of calls (issue 17); and, on the host, T5's bucket of one distance (``t5_bucket``) and
ALiBi's slopes (``alibi_slopes``), both exported by ``relative``.
:func:`peregistry.encoders.pairs.distance` is the plugin API's plain form of :func:`int_distance`.
"""

from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING, Any

from .. import _lazy

if TYPE_CHECKING:
    from ..rope import _delegation
else:  # the framework dispatch, imported by the first call (peregistry/_lazy.py)
    _delegation = _lazy.delegation(globals())

__all__ = ["alibi_slopes", "as_dtype", "clip_int", "int_distance", "pair_difference", "size_of",
           "t5_bucket"]


def as_dtype(a: Any, dtype: Any, *, xp: Any) -> Any:
    """``a`` as ``dtype`` (itself if it is already)."""
    return a if a.dtype == dtype else xp.astype(a, dtype)


def int_distance(q: Any, k: Any, idt: Any, *, xp: Any) -> Any:
    """``k - q`` as ``(*batch, Q, K)`` in the index dtype ``idt``: :func:`.pairs.distance`, with
    the dtype looked up once per call and the axes added by reshaping (indexing with ``None``
    costs torch twice as much; 1-D keys broadcast as they are)."""
    k, q = as_dtype(k, idt, xp=xp), as_dtype(q, idt, xp=xp)
    if k.ndim > 1:
        k = xp.reshape(k, (*k.shape[:-1], 1, k.shape[-1]))
    return k - xp.reshape(q, (*q.shape, 1))


def pair_difference(q: Any, k: Any, *, xp: Any, trailing: bool = True) -> Any:
    """``q - k`` as ``(*batch, Q, K, 1)``, or ``(*batch, Q, K)`` without ``trailing`` (the axes
    added by reshaping: one torch call each, where indexing with ``None`` costs two)."""
    one = (1,) if trailing else ()
    if trailing or k.ndim > 1:  # (1-D keys broadcast as they are against (*batch, Q, 1))
        k = xp.reshape(k, (*k.shape[:-1], 1, k.shape[-1], *one))
    return xp.reshape(q, (*q.shape, 1, *one)) - k


def clip_int(d: Any, m: int, *, xp: Any) -> Any:
    """``clip(d, -m, m)`` of an integer array: two ``where``s, or one kernel of the framework
    (the same integers; array-api-compat's general ``clip`` costs more than the arithmetic of a
    small call)."""
    return _delegation.clip_int(d, -m, m, xp=xp)


def size_of(a: Any) -> int:
    """The number of elements of ``a``."""
    n = 1
    for d in a.shape:
        n *= int(d)
    return n


def _f32(x: float) -> float:
    """``x`` rounded to the nearest float32 (as a Python float)."""
    return float(struct.unpack("f", struct.pack("f", x))[0])


def t5_bucket(relative_position: int, *, bidirectional: bool = True, num_buckets: int = 32,
              max_distance: int = 128) -> int:
    """The T5 bucket of one relative position ``k - q`` (memory minus query), on the host.

    Mirrors Hugging Face ``T5Attention._relative_position_bucket`` (from Mesh TensorFlow's
    ``_relative_position_bucket``) operation by operation, including its float32 logarithm::

        bidirectional: half the buckets for k - q > 0, half for k - q <= 0; n = |k - q|
        causal:        n = max(q - k, 0)   (every future key shares bucket 0 with k = q)
        n < max_exact (= buckets/2):  bucket n            (exact)
        else: max_exact + int(log(n / max_exact) / log(max_distance / max_exact)
                              · (buckets - max_exact)),  at most buckets - 1   (logarithmic)
    """
    nb = num_buckets
    ret = 0
    n = relative_position
    if bidirectional:
        nb //= 2
        ret += nb if n > 0 else 0
        n = abs(n)
    else:
        n = max(-n, 0)
    max_exact = nb // 2
    if n < max_exact:
        return ret + n
    # float32 throughout, as torch computes it: log(float32(n) / max_exact) / log(M / max_exact)
    r = _f32(_f32(float(n)) / _f32(float(max_exact)))
    v = _f32(_f32(_f32(math.log(r)) / _f32(math.log(max_distance / max_exact)))
             * _f32(float(nb - max_exact)))
    return ret + min(max_exact + int(v), nb - 1)


def alibi_slopes(num_heads: int, max_bias: float = 8.0) -> list[float]:
    """Head slopes of ALiBi (Press et al. 2022, §3), as the paper's reference ``get_slopes``.

    For ``n`` a power of two: the geometric sequence ``r, r², …, rⁿ`` with ``r = 2^(-B/n)``,
    ``B = max_bias`` (8 in the paper; ``n = 8``: ``1/2, 1/4, …, 1/256``). Otherwise, with ``p``
    the largest power of two below ``n``: the ``p`` slopes of ``p`` heads, then every other slope
    of ``2p`` heads (``2^(-B/2p)^(1, 3, 5, …)``) for the remaining ``n - p`` heads.
    """

    def power_of_2(n: int) -> list[float]:
        start = 2.0 ** -(max_bias / n)  # B/n and 8/n are exact: n is a power of two
        return [start * start**i for i in range(n)]

    if math.log2(num_heads).is_integer():
        return power_of_2(num_heads)
    p = 2 ** math.floor(math.log2(num_heads))
    return power_of_2(p) + alibi_slopes(2 * p, max_bias)[0::2][: num_heads - p]
