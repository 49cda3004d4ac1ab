"""Attention temperature tuning of Llama 4 (Nakanishi 2025, "Scalable-Softmax Is Superior for
Attention", arXiv:2501.19399, as Meta's Llama 4 applies it to the queries of its NoPE layers,
transformers 5.23 ``modeling_llama4.Llama4TextAttention.forward``)::

    query_scale(p) = log1p(floor((p + 1) / floor_scale)) · attn_scale + 1

1 for the first ``floor_scale - 1`` positions, then growing with ``log`` of the position, which
keeps the softmax of long contexts from flattening. A rotary encoder carries it as options
(``attn_temperature_tuning``, ``floor_scale``, ``attn_scale``) and gives the factors through
:meth:`~peregistry.rope.encoder.RotaryEncoder.query_scale`; like ``softmax_scale_factor`` it is a
factor the model applies, never part of ``rotate`` (and Llama 4 applies it to its NoPE layers,
not to the layers the encoder rotates).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..kinds.context import resolve_dtype
from ._delegation import wide_int

if TYPE_CHECKING:
    from ..kinds.rotary import RotaryKind as _Scaled  # what the mixin is mixed into
else:
    _Scaled = object

__all__ = ["QueryScale"]


class QueryScale(_Scaled):
    """:meth:`query_scale` (a mixin of :class:`~peregistry.RotaryEncoder`)."""

    __slots__ = ()

    def query_scale(self, positions: Any, *, dtype: Any = None) -> Any:
        """Factors ``(*positions.shape,)`` the model multiplies its queries by, of ``dtype``
        (default: the namespace's default float): 1 unless the encoder sets Llama 4's attention
        temperature (``attn_temperature_tuning``; :mod:`peregistry.rope._temperature`), which
        Llama 4 applies to the queries of its NoPE layers only, not to the layers this encoder
        rotates. Never part of :meth:`rotate`; positions must be >= 0 (cache positions)."""
        ctx, (pos,) = self._context(positions, names=("positions",))
        pos = self._positions(pos, ctx)
        xp = ctx.xp
        out_dtype = resolve_dtype(self.name, ctx.backend, dtype, ctx.device)
        values = self._values
        if not values.get("attn_temperature_tuning"):
            return xp.ones(self._position_batch_shape(pos), dtype=out_dtype, device=ctx.device)
        floor_scale, attn_scale = float(values["floor_scale"]), float(values["attn_scale"])
        if not ctx.backend.is_tracing(pos) and math.prod(pos.shape) and bool(xp.any(pos < 0)):
            # log1p(floor((p + 1)/s)) is -inf or NaN below -1: the formula is for cache positions
            low = xp.min(pos)
            shown = int(low) if xp.isdtype(pos.dtype, "integral") else float(low)
            raise ValueError(f"{self.name}: query_scale positions must be >= 0 (cache positions; "
                             f"log1p(floor((p + 1)/floor_scale)) is not finite below), got a "
                             f"minimum of {shown}")
        wide = wide_int(xp)
        if (xp.isdtype(pos.dtype, "integral") and floor_scale.is_integer()
                and floor_scale <= xp.iinfo(wide).max // 2):
            # floor((p + 1)/s) = p // s + (p % s + 1) // s: both terms in integers (neither can
            # overflow, also at the largest index, where p + 1 would: 2**31 - 1 in int32 and
            # s = 1), added in the wide float
            s = int(floor_scale)
            p = pos if pos.dtype == wide else xp.astype(pos, wide)
            count = xp.astype(p // s, ctx.wide) + xp.astype((p % s + 1) // s, ctx.wide)
        else:  # real positions, or a floor_scale past the integers (the count is 0 below it)
            p = pos if pos.dtype == ctx.wide else xp.astype(pos, ctx.wide)
            count = xp.floor((p + 1.0) / floor_scale)
        return xp.astype(xp.log1p(count) * attn_scale + 1.0, out_dtype)
