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

Partial rotary (``rotary_dim < dim``; Qwen3.5, Qwen3.5-MoE and GLM-4V-MoE in transformers 5.23,
whose ``apply_rotary_pos_emb`` rotates ``q[..., :rotary_dim]``): M-RoPE of a head of
``rotary_dim`` features, ``ω_i = θ^(-2i/rotary_dim)`` with ``sum(sections) == rotary_dim/2``, and
the other features pass through. ``rotary_features`` and ``direction`` are as for ``rotary``.

``pair_axes`` gives a model's own axis of each pair instead (``interleaved=False``): Ernie-4.5-VL
(transformers 5.23 ``Ernie4_5_VLMoeTextRotaryEmbedding``) gives its first ``h + w`` pairs to
height and width alternately and the last ``t`` to time: ``sections=(t, h, w)``,
``pair_axes=(1, 2, 1, 2, ..., 0, 0, ...)``.
"""

from __future__ import annotations

from .._hooks import hookimpl
from .._options import Option
from ..rope import Frequencies, MultiAxisRotary, RotaryEncoder, ScaledRotary
from .rotary import (
    DIRECTION,
    HEAD_DIM,
    PAIR_LAYOUT,
    ROTARY_DIM,
    ROTARY_FEATURES,
    SCALING,
    THETA,
    check_rotary_dim,
)

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


class MRope(MultiAxisRotary, ScaledRotary):
    """Multimodal RoPE (Qwen2-VL, Qwen2.5-VL; Qwen3-VL with interleaved=True)."""

    name = "mrope"
    properties = frozenset({"rope-layouts", "multi-axis"})
    __slots__ = ()

    dim = HEAD_DIM
    theta = THETA
    sections = Option(tuple, allowed="a non-empty sequence of integers >= 0 summing to "
                      "rotary_dim/2",
                      check=lambda s: len(s) > 0 and all(v >= 0 for v in s),
                      doc="frequency pairs per axis (HF mrope_section), e.g. 16,24,24",
                      example=(8, 12, 12))
    layout = PAIR_LAYOUT
    interleaved = Option(bool, False,
                         doc="False: contiguous bands (Qwen2-VL); True: axes cycle (Qwen3-VL)")
    pair_axes = Option(tuple, None, nullable=True,
                       allowed="None or one axis index per frequency pair (rotary_dim/2 of "
                               "them), axis a appearing sections[a] times",
                       check=lambda t: all(v >= 0 for v in t),
                       doc="a model's own axis of each pair, instead of bands or cycles "
                           "(Ernie-4.5-VL: h, w alternating, then t)")
    scaling = SCALING
    rotary_dim = ROTARY_DIM
    rotary_features = ROTARY_FEATURES
    direction = DIRECTION

    def _validate(self) -> None:
        check_rotary_dim(self)
        sections, rd = self._values["sections"], self._rotary_dim()
        what = "dim/2" if self._values["rotary_dim"] is None else "rotary_dim/2"
        if sum(sections) != rd // 2:
            raise self._invalid("sections", sections,
                                f"integers summing to {what} = {rd // 2} (they sum to "
                                f"{sum(sections)})")
        pair_axes = self._values["pair_axes"]
        if pair_axes is not None:
            self._check_pair_axes(pair_axes, sections, rd)
        elif self._values["interleaved"]:
            axes = axis_of_pairs(sections, interleaved=True)
            counts = tuple(axes.count(a) for a in range(len(sections)))
            if counts != sections:
                raise self._invalid(
                    "sections", sections,
                    f"sections that can be interleaved over {rd // 2} pairs (axis a > 0 takes "
                    f"pairs a, a+A, ... below A·sections[a]; these give {counts})")
        super()._validate()

    def _check_pair_axes(self, pair_axes: tuple[int, ...], sections: tuple[int, ...],
                         rd: int) -> None:
        allowed = (f"None or {rd // 2} axis indices (one per frequency pair) in 0 .. "
                   f"{len(sections) - 1}, axis a appearing sections[a] times ({sections})")
        if self._values["interleaved"]:
            raise self._invalid("pair_axes", pair_axes, "None when interleaved=True (pair_axes "
                                "gives the whole map itself)")
        counts = tuple(pair_axes.count(a) for a in range(len(sections)))
        if len(pair_axes) != rd // 2 or any(a >= len(sections) for a in pair_axes) \
                or counts != sections:
            raise self._invalid("pair_axes", pair_axes, allowed)

    @property
    def num_axes(self) -> int:
        return len(self._values["sections"])

    def text_equivalent(self) -> RotaryEncoder:
        """The ``rotary`` encoder this one equals on text tokens (all axes equal)."""
        v = self.options
        enc = self.services.get_encoder("rotary", dim=v["dim"], theta=v["theta"],
                                         layout=v["layout"], scaling=v["scaling"],
                                         rotary_dim=v["rotary_dim"],
                                         rotary_features=v["rotary_features"],
                                         direction=v["direction"])
        assert isinstance(enc, RotaryEncoder)
        return enc

    def _axes_description(self) -> str:
        return f"sections={self._values['sections']}"

    def _axis_groups(self) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...] | None]:
        """Pair indices of each axis, and the permutation that puts the pairs grouped by axis
        back in order (None when they already are: contiguous sections)."""
        axes = self._values["pair_axes"] or axis_of_pairs(
            self._values["sections"], interleaved=self._values["interleaved"])
        groups = tuple(tuple(i for i, a in enumerate(axes) if a == ax)
                       for ax in range(self.num_axes))
        order = [i for g in groups for i in g]
        if order == sorted(order):
            return groups, None
        inverse = [0] * len(order)
        for j, i in enumerate(order):
            inverse[i] = j
        return groups, tuple(inverse)

    # -- hooks of MultiAxisRotary: RoPE's frequencies shared out among the axes ------------------
    def _axis_frequencies(self, seq_len: int | None) -> tuple[Frequencies, ...]:
        freqs = self._frequencies(seq_len)
        return tuple(freqs.subset(idx) for idx in self._axis_groups()[0])

    def _pair_order(self) -> tuple[int, ...] | None:
        return self._axis_groups()[1]

    def _pair_frequencies(self, seq_len: int | None) -> tuple[Frequencies, tuple[int, ...]]:
        # RoPE's own frequencies, already in feature order: each pair keeps its ω_i.
        axes = self._values["pair_axes"] or axis_of_pairs(
            self._values["sections"], interleaved=self._values["interleaved"])
        return self._frequencies(seq_len), axes


@hookimpl
def peregistry_encoders() -> list[type[RotaryEncoder]]:
    return [MRope]
