"""The rotary kind's declaration: what a rotary encoder is made of (its feature layout, its
attention factor, how its angles depend on the sequence length, the one hook that gives its
angles), apart from its methods. The methods (``rotate``, ``cos_sin``, ``tables``) are the
engine's: :class:`peregistry.RotaryEncoder` (:mod:`peregistry.rope.encoder`) derives from
:class:`RotaryKind` and implements them with the engine's store of tables, rotation kernels and
framework fast paths, which this package must not import (the engine imports the kinds)."""

from __future__ import annotations

from typing import Any

from ..backends._base import Ctx
from .base import Encoder

__all__ = ["RotaryKind"]


class RotaryKind(Encoder):
    """The declaration of the ``rotary`` kind. Derive :class:`peregistry.RotaryEncoder` (or
    :class:`peregistry.rope.ScaledRotary`), which gives these encoders their methods; the
    hooks below are what a subclass may override."""

    kind = "rotary"
    continuous = True
    __slots__ = ()

    # -- what a subclass may override ----------------------------------------------------------
    def _head_dim(self) -> int:
        """Length of the feature axis ``x.shape[-1]`` (the ``dim`` option)."""
        return int(self._values["dim"])

    def _rotary_dim(self) -> int:
        """How many leading features are rotated (``rotary_dim`` option, default ``dim``)."""
        rd = self._values.get("rotary_dim")
        return self._head_dim() if rd is None else int(rd)

    def _table_width(self) -> int:
        """Entries per position of the tables :meth:`_half_cos_sin` returns: one per pair,
        ``rotary_dim/2`` (an encoder whose pairs' two features turn by different angles, as
        ``mrope`` with ``feature_axes``, returns one per feature)."""
        return self._rotary_dim() // 2

    def _rotary_last(self) -> bool:
        """True if the last ``rotary_dim`` features rotate (``rotary_features="last"``), False
        for the first ones."""
        return bool(self._values.get("rotary_features", "first") == "last")

    def _interleaved(self) -> bool:
        """True if pairs are ``(2i, 2i+1)``, False for ``(i, i + rotary_dim/2)``."""
        return bool(self._values.get("layout", "half") == "interleaved")

    @property
    def attention_factor(self) -> float:
        """Factor on ``cos`` and ``sin`` (1.0 unless a scaling type sets one)."""
        return 1.0

    @property
    def softmax_scale_factor(self) -> float:
        """Factor on the attention softmax scale that a scaling asks of the model (1.0)."""
        return 1.0

    def _seq_len_dependence(self) -> tuple[str, tuple[int, ...]]:
        """How the angles depend on the sequence length: ``("none", ())``, ``("piecewise",
        breakpoints)`` or ``("continuous", ())`` (see :mod:`peregistry.rope.scalings`)."""
        return "none", ()

    def _position_batch_shape(self, positions: Any) -> tuple[int, ...]:
        """The shape positions contribute to the output's leading axes."""
        return tuple(positions.shape)

    def text_positions(self, positions: Any) -> Any:
        """Positions for tokens at the scalar ``positions`` (text): the positions themselves;
        multi-axis encoders (M-RoPE) put one copy per axis in front."""
        return positions

    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> tuple[Any, Any]:
        """``(cos θ_i, sin θ_i)`` times the attention factor, each ``(*batch_shape,
        rotary_dim/2)`` in ``ctx.wide``, for the sequence length ``seq_len`` (None: unknown)."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement _half_cos_sin")
