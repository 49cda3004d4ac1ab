"""The arguments of a rotary call, checked: :class:`CallChecks`, the part of
:class:`~peregistry.RotaryEncoder` that turns ``rotate(x, positions, offset=, seq_len=)`` into one
validated :class:`Call` (namespace, device, dtypes, ``x``'s shape, ``offset`` or
``positions``, the dtype to rotate in), each error naming the argument, its value and what is
allowed."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ..backends._base import Ctx
from ..kinds.context import compute_float
from ._offsets import check_offset_range, concrete_len

if TYPE_CHECKING:
    from ..kinds.base import Encoder as _Checked  # what the mixin is mixed into
else:
    _Checked = object

__all__ = ["Call", "CallChecks", "Rotation"]


class Rotation(NamedTuple):
    """What the options of a rotary encoder say about its rotation (made at construction)."""

    head_dim: int
    rotary_dim: int
    interleaved: bool
    last: bool  # the last rotary_dim features rotate (else the first)


class Call(NamedTuple):
    """One validated :meth:`RotaryEncoder.rotate` call."""

    ctx: Ctx
    x: Any
    positions: Any  # validated positions, or None for ``offset + arange(seq)``
    offset: Any  # a Python int or an array
    seq_len: int | None
    tracing: bool
    cdt: Any  # the dtype the rotation runs in


class CallChecks(_Checked):
    """The argument checks of :meth:`~peregistry.RotaryEncoder.rotate` (a mixin of
    :class:`~peregistry.RotaryEncoder`, an :class:`~peregistry.Encoder` with a
    :class:`Rotation`)."""

    __slots__ = ()
    _rotation: Rotation

    def _rotate_call(self, x: Any, positions: Any, offset: Any,
                     params: Mapping[str, Any] | None, seq_len: int | None) -> Call:
        """Validate the arguments of :meth:`rotate` (the errors name what is wrong)."""
        services = self._services
        backend = services.backend_of(x)
        if backend is not None and type(offset) is int and (
                positions is None or services.backend_of(positions) is backend):
            ctx, offset_arr = backend.context(x), None  # arrays of one backend: the usual call
        else:
            if offset is None or isinstance(offset, bool | str | bytes):
                raise TypeError(f"{self.name}: offset must be an int, a real number or an "
                                f"integer/real array, got {offset!r}")
            offset_arr = None if isinstance(offset, int) else offset
            ctx, (x, positions, offset_arr) = self._context(x, positions, offset_arr)
        if params is not None:
            self._check_params(params, ctx)
        xp = ctx.xp
        if not ctx.backend.is_float_dtype(x.dtype):
            raise TypeError(f"{self.name}: x must have a real floating dtype of "
                            f"{ctx.backend.name} ({', '.join(ctx.backend.float_dtypes())}), "
                            f"got {x.dtype}")
        xshape = tuple(x.shape)
        if not xshape or xshape[-1] != self._rotation.head_dim:
            raise ValueError(f"{self.name}: x.shape={xshape}, but x.shape[-1] should be dim="
                             f"{self._rotation.head_dim} (x is (..., seq, dim))")
        if seq_len is not None:
            seq_len = self._check_seq_len(seq_len)
        tracing = ctx.backend.is_tracing(x)
        for a in (positions, offset_arr):
            if a is not None and not tracing:
                tracing = ctx.backend.is_tracing(a)
        # Compute in x's dtype if it is float32 or wider, else in float32; cast once at the end
        # (a float64 of another byte order, NumPy's >f8, in the native float64: compute_float).
        cdt = x.dtype if x.dtype in (xp.float32, xp.float64) else compute_float(x.dtype, xp)
        if positions is None:
            if len(xshape) < 2:
                raise ValueError(f"{self.name}: x.shape={xshape} has no sequence axis; x is "
                                 f"(..., seq, dim), or pass positions")
            if offset_arr is not None:
                offset = self._positions(offset_arr, ctx, what="offset")
            n = concrete_len(xshape[-2])
            if not (type(offset) is int and n is not None
                    and -(2**31) <= offset <= 2**31 - 1 - n):
                check_offset_range(self.name, offset, xshape[-2], ctx, tracing=tracing)
        else:
            if offset_arr is not None or offset != 0:
                raise ValueError(f"{self.name}: offset={offset!r} is only used with "
                                 f"positions=None; add it to the positions instead")
            positions = self._positions(positions, ctx)
        return Call(ctx, x, positions, offset, seq_len, tracing, cdt)

    def _check_seq_len(self, seq_len: Any) -> int | None:
        if seq_len is None:
            return None
        if not isinstance(seq_len, int) or isinstance(seq_len, bool):
            try:
                if isinstance(seq_len, bool):
                    raise TypeError
                seq_len = operator.index(seq_len)
            except TypeError:
                raise TypeError(f"{self.name}: seq_len must be None or a Python int (the "
                                f"sequence length, static under jit), got {seq_len!r}") from None
        if seq_len < 0:
            raise ValueError(f"{self.name}: seq_len must be >= 0, got {seq_len}")
        return int(seq_len)
