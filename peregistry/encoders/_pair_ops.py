"""The integer operations of the built-in relative encoders (``peregistry/encoders/relative.py``),
each written with as few framework calls as the namespace allows: a small call's cost is its
count of calls (issue 17). :func:`peregistry.encoders.pairs.distance` is the plugin API's plain
form of :func:`int_distance`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import _lazy

if TYPE_CHECKING:
    from ..rope import _delegation
else:  # the framework dispatch, imported by the first call (peregistry/_lazy.py)
    _delegation = _lazy.delegation(globals())

__all__ = ["as_dtype", "clip_int", "int_distance", "pair_difference", "size_of"]


def as_dtype(a: Any, dtype: Any, *, xp: Any) -> Any:
    """``a`` as ``dtype`` (itself if it is already)."""
    return a if a.dtype == dtype else xp.astype(a, dtype)


def int_distance(q: Any, k: Any, idt: Any, *, xp: Any) -> Any:
    """``k - q`` as ``(*batch, Q, K)`` in the index dtype ``idt``: :func:`.pairs.distance`, with
    the dtype looked up once per call and the axes added by reshaping (indexing with ``None``
    costs torch twice as much)."""
    k, q = as_dtype(k, idt, xp=xp), as_dtype(q, idt, xp=xp)
    return xp.reshape(k, (*k.shape[:-1], 1, k.shape[-1])) - xp.reshape(q, (*q.shape, 1))


def pair_difference(q: Any, k: Any, *, xp: Any) -> Any:
    """``q - k`` as ``(*batch, Q, K, 1)`` (the axes added by reshaping: one torch call each,
    where indexing with ``None`` costs two)."""
    return (xp.reshape(q, (*q.shape, 1, 1))
            - xp.reshape(k, (*k.shape[:-1], 1, k.shape[-1], 1)))


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
