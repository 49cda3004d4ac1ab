"""Multimodal rotary position embedding (M-RoPE) of Qwen2-VL (Wang et al. 2024, arXiv:2409.12191,
§2.1) and its interleaved variant of Qwen3-VL.

Every token has one position per axis — temporal, height, width for ``len(sections) == 3`` —
given as ``positions`` of shape ``(len(sections), ...)``. The ``dim/2`` frequency pairs of RoPE,
``ω_i = θ^(-2i/dim)``, are shared out among the axes: pair ``i`` rotates by ``p_{a(i)}·ω_i``
where ``a(i)`` is the axis the pair belongs to and ``sections[a]`` counts the pairs of axis
``a`` (so ``sum(sections) == dim/2``)::

    interleaved=False   # Qwen2-VL, Qwen2.5-VL: contiguous bands
    # sections (2, 1, 1), 4 pairs: a = [T T H W]
    interleaved=True    # Qwen3-VL: the axes cycle over the pairs, the rest is temporal
    # sections (2, 1, 1), 4 pairs: a = [T H W T]

In Hugging Face terms, ``sections`` is ``rope_scaling["mrope_section"]`` (Qwen2-VL: ``[16, 24,
24]`` for head dim 128) and ``interleaved=True`` is ``mrope_interleaved`` / Qwen3-VL's
``apply_interleaved_mrope``. The pairs then rotate as in :mod:`.rotary` (``layout="half"`` pairs
``(i, i + dim/2)`` as all Qwen models do). With all axes equal (text tokens) M-RoPE is exactly
RoPE: the conformance suite checks that ``mrope`` equals ``rotary`` bit for bit there.
"""

from __future__ import annotations

from typing import Any

from .._hooks import hookimpl
from .._options import Option
from ._angles import cos_sin
from .base import Ctx, RotaryEncoder
from .rotary import HEAD_DIM, PAIR_LAYOUT, SCALING, THETA, ScaledRotary

__all__ = ["MRope", "axis_of_pairs"]


def axis_of_pairs(sections: tuple[int, ...], *, interleaved: bool) -> tuple[int, ...]:
    """The axis each frequency pair belongs to.

    Contiguous (Qwen2-VL ``apply_multimodal_rotary_pos_emb``): ``sections[0]`` pairs of axis 0,
    then ``sections[1]`` of axis 1, ... Interleaved (Qwen3-VL ``apply_interleaved_mrope``):
    pair ``i`` belongs to axis ``a = i mod A`` if ``a > 0`` and ``i < A·sections[a]``, else to
    axis 0 (``A = len(sections)``).
    """
    n = sum(sections)
    if not interleaved:
        return tuple(a for a, s in enumerate(sections) for _ in range(s))
    count = len(sections)
    return tuple(
        i % count if i % count > 0 and i < count * sections[i % count] else 0 for i in range(n)
    )


class MRope(ScaledRotary):
    """Multimodal RoPE (Qwen2-VL, Qwen2.5-VL; Qwen3-VL with interleaved=True)."""

    name = "mrope"
    properties = frozenset({"rope-layouts", "multi-axis"})
    __slots__ = ()
    _offset_rows_are_positions = True  # text positions: one position per token, on every axis

    dim = HEAD_DIM
    theta = THETA
    sections = Option(tuple, allowed="a non-empty sequence of integers >= 0 summing to dim/2",
                      check=lambda s: len(s) > 0 and all(v >= 0 for v in s),
                      doc="frequency pairs per axis (HF mrope_section), e.g. 16,24,24",
                      example=(8, 12, 12))
    layout = PAIR_LAYOUT
    interleaved = Option(bool, False,
                         doc="False: contiguous bands (Qwen2-VL); True: axes cycle (Qwen3-VL)")
    scaling = SCALING

    def _validate(self) -> None:
        dim, sections = self._values["dim"], self._values["sections"]
        if sum(sections) != dim // 2:
            raise self._invalid("sections", sections,
                                f"integers summing to dim/2 = {dim // 2} (they sum to "
                                f"{sum(sections)})")
        if self._values["interleaved"]:
            axes = axis_of_pairs(sections, interleaved=True)
            counts = tuple(axes.count(a) for a in range(len(sections)))
            if counts != sections:
                raise self._invalid(
                    "sections", sections,
                    f"sections that can be interleaved over {dim // 2} pairs (axis a > 0 takes "
                    f"pairs a, a+A, ... below A·sections[a]; these give {counts})")
        super()._validate()

    @property
    def num_axes(self) -> int:
        return len(self._values["sections"])

    def text_equivalent(self) -> RotaryEncoder:
        """The ``rotary`` encoder this one equals on text tokens (all axes equal)."""
        from ..registry import default_registry

        v = self.options
        enc = default_registry.get_encoder("rotary", dim=v["dim"], theta=v["theta"],
                                           layout=v["layout"], scaling=v["scaling"])
        assert isinstance(enc, RotaryEncoder)
        return enc

    def _axis_groups(self) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...] | None]:
        """Pair indices of each axis, and the permutation that puts the pairs grouped by axis
        back in order (None when they already are: contiguous sections)."""
        axes = axis_of_pairs(self._values["sections"], interleaved=self._values["interleaved"])
        groups = tuple(tuple(i for i, a in enumerate(axes) if a == ax)
                       for ax in range(self.num_axes))
        order = [i for g in groups for i in g]
        if order == sorted(order):
            return groups, None
        inverse = [0] * len(order)
        for j, i in enumerate(order):
            inverse[i] = j
        return groups, tuple(inverse)

    # -- positions are (num_axes, ...) -----------------------------------------------------------
    def _position_batch_shape(self, positions: Any) -> tuple[int, ...]:
        shape = tuple(positions.shape)
        if len(shape) == 0 or shape[0] != self.num_axes:
            raise ValueError(
                f"{self.name}: positions.shape={shape}, but should be ({self.num_axes}, ...): "
                f"one row per axis of sections={self._values['sections']}"
            )
        return shape[1:]

    def text_positions(self, positions: Any) -> Any:
        """Text tokens: every axis at the same position, ``(num_axes, *positions.shape)``."""
        ctx, (p,) = self._context(positions)
        return ctx.xp.stack([p] * self.num_axes, axis=0)

    def _default_positions(self, seq: int, offset: Any, *, ctx: Ctx) -> Any:
        """Text only: every axis at ``offset + arange(seq)``."""
        pos = super()._default_positions(seq, offset, ctx=ctx)
        xp = ctx.xp
        return xp.stack([pos] * self.num_axes, axis=0)

    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> tuple[Any, Any]:
        xp = ctx.xp
        self._position_batch_shape(positions)
        freqs = self._frequencies(seq_len)
        groups, inverse = self._axis_groups()
        # Each axis's positions turn by that axis's own frequencies: exactly rotary's angles
        # p·ω_i pair by pair, computed once per pair.
        parts = [cos_sin(positions[ax, ...], freqs.subset(idx), ctx=ctx)
                 for ax, idx in enumerate(groups) if idx]
        cos = xp.concat([c for c, _ in parts], axis=-1) if len(parts) > 1 else parts[0][0]
        sin = xp.concat([s for _, s in parts], axis=-1) if len(parts) > 1 else parts[0][1]
        if inverse is not None:
            perm = xp.asarray(list(inverse), device=ctx.device)
            cos, sin = xp.take(cos, perm, axis=-1), xp.take(sin, perm, axis=-1)
        af = self.attention_factor
        if af != 1.0:
            cos, sin = cos * af, sin * af
        return cos, sin

    def example_positions(self, rng: Any, shape: tuple[int, ...]) -> Any:
        """Distinct positions per axis, as for an image patch grid after some text."""
        import numpy as np

        return np.asarray(rng.integers(0, 1024, size=(self.num_axes, *shape)), dtype=np.int64)


@hookimpl
def peregistry_encoders() -> list[type[RotaryEncoder]]:
    return [MRope]
