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

``feature_axes`` gives the axis of every rotated *feature* instead, so that the two features of
a pair may turn with different axes: HunYuan-VL's XD-RoPE (transformers 5.23
``HunYuanVLRotaryEmbedding.recomposition_frequencies``) spreads the angle tables over the full
width, ``cat(freqs, freqs)``, and gives chunk ``k`` of ``2·sections[k]`` features to axis ``k``::

    feature_axes[f] = k  for  2·(s_0 + ... + s_{k-1}) <= f < 2·(s_0 + ... + s_k)
    a_i' = a_i·cos(p_{A(i)}·ω_i) - b_i·sin(p_{A(i)}·ω_i)          A(i) = feature_axes[i]
    b_i' = b_i·cos(p_{B(i)}·ω_i) + a_i·sin(p_{B(i)}·ω_i)          B(i) = feature_axes[h + i]

(``h = rotary_dim/2``; entry ``i`` and ``h + i`` are pair ``i``'s two features, the output's
feature order for ``layout="half"``). That is no rotation where ``A(i) != B(i)`` and the axes'
positions differ (norms change, and ``<R(P)q, R(P')k>`` is not a function of ``P - P'``), but
with every axis at one position (text tokens) it is RoPE, bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from .._markers import hookimpl
from .._options import Option
from ..backends._base import Ctx
from ..kinds.context import resolve_dtype
from ..rope import Frequencies, MultiAxisRotary, RotaryEncoder, ScaledRotary
from ..rope.scaled import pair_cos_sin
from ._split_pairs import SplitRotaryTables, feature_order, rotate_split
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

if TYPE_CHECKING:
    from ..rope import RotaryTables

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
    feature_axes = Option(tuple, None, nullable=True,
                          allowed="None or one axis index per rotated feature (rotary_dim of "
                                  "them, pair i's features at i and rotary_dim/2 + i), axis a "
                                  "appearing 2·sections[a] times",
                          check=lambda t: all(v >= 0 for v in t),
                          doc="a model's own axis of each feature: a pair's two features may "
                              "turn with different axes (HunYuan-VL XD-RoPE)")
    scaling = SCALING
    rotary_dim = ROTARY_DIM
    rotary_features = ROTARY_FEATURES
    direction = DIRECTION

    _compile_hook_eagerly = True  # _half_cos_sin reads no values: see peregistry/_jax_eager.py
    #: The laws a split pair (feature_axes) breaks, with the reason. (Norms change too where
    #: a pair's axes' positions differ, but check_rotary_norm_preserved rotates text tokens,
    #: where the encoder is RoPE, so it still applies.)
    _SPLIT_EXEMPT: ClassVar[Mapping[str, str]] = MappingProxyType({
        "check_mrope_relative_per_axis":
            "feature_axes turns a pair's two features by different axes' angles: <R(P)q, R(P')k> "
            "is no function of P - P' (tests/test_xdrope.py checks that it differs)",
    })

    def _validate(self) -> None:
        check_rotary_dim(self)
        sections, rd = self._values["sections"], self._rotary_dim()
        what = "dim/2" if self._values["rotary_dim"] is None else "rotary_dim/2"
        if sum(sections) != rd // 2:
            raise self._invalid("sections", sections,
                                f"integers summing to {what} = {rd // 2} (they sum to "
                                f"{sum(sections)})")
        if self._values["feature_axes"] is not None:
            self._check_feature_axes(self._values["feature_axes"], sections, rd)
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
        # computed once here, so that neither a call nor a trace sees the cache change
        self._cache["pair_axes"] = self._values["pair_axes"] or axis_of_pairs(
            sections, interleaved=self._values["interleaved"])

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

    def _check_feature_axes(self, axes: tuple[int, ...], sections: tuple[int, ...],
                            rd: int) -> None:
        """Valid and not with ``pair_axes``/``interleaved=True``; when each pair's two features
        share an axis it is ``pair_axes``, and becomes it (one encoder, one identity)."""
        for other, value in (("pair_axes", self._values["pair_axes"]),
                             ("interleaved", self._values["interleaved"] or None)):
            if value is not None:
                raise self._invalid("feature_axes", axes, f"None when {other}={value!r} "
                                    f"(feature_axes gives the whole map itself)")
        counts = tuple(axes.count(a) for a in range(len(sections)))
        if len(axes) != rd or any(a >= len(sections) for a in axes) \
                or counts != tuple(2 * s for s in sections):
            raise self._invalid(
                "feature_axes", axes,
                f"None or {rd} axis indices (one per rotated feature) in 0 .. "
                f"{len(sections) - 1}, axis a appearing 2·sections[a] times "
                f"({tuple(2 * s for s in sections)}; they appear {counts})")
        h = rd // 2
        if axes[:h] == axes[h:]:
            self._values["pair_axes"], self._values["feature_axes"] = axes[:h], None

    def _feature_split(self) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """The axes of each pair's first and second features (``feature_axes``), or None."""
        axes = self._values["feature_axes"]
        if axes is None:
            return None
        h = len(axes) // 2
        return axes[:h], axes[h:]

    @property
    def exempt_checks(self) -> Mapping[str, str]:  # type: ignore[override]
        """As ``rotary``'s, and the laws a split pair breaks (:attr:`_SPLIT_EXEMPT`)."""
        base = super().exempt_checks
        if self._feature_split() is None:
            return base
        return MappingProxyType({**base, **self._SPLIT_EXEMPT})

    def _table_width(self) -> int:
        return self._rotary_dim() if self._feature_split() is not None else super()._table_width()

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

    def _pair_axes(self) -> tuple[int, ...]:
        """The axis of each pair: ``pair_axes``, else Qwen2-VL's or Qwen3-VL's rule."""
        return self._cache["pair_axes"]  # type: ignore[no-any-return]

    def _axis_groups(self) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...] | None]:
        """Pair indices of each axis, and the permutation that puts the pairs grouped by axis
        back in order (None when they already are: contiguous sections)."""
        axes = self._pair_axes()
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
        return self._frequencies(seq_len), self._pair_axes()

    # -- feature_axes: tables [first | second], one entry per feature -----------------------------
    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> tuple[Any, Any]:
        """M-RoPE's tables; with ``feature_axes``, ``[first | second]`` (``rotary_dim`` wide):
        the tables of each pair's first features, then of its second features, each computed
        as M-RoPE's with that member's axes as the pair map."""
        split = self._feature_split()
        if split is None:
            return super()._half_cos_sin(positions, ctx=ctx, seq_len=seq_len)
        xp = ctx.xp
        self._position_batch_shape(positions)
        freqs = self._frequencies(seq_len)
        tables = [self._member_table(positions, axes, freqs, ctx=ctx) for axes in split]
        cos = xp.concat([c for c, _ in tables], axis=-1)
        sin = xp.concat([s for _, s in tables], axis=-1)
        af = self.attention_factor
        if af != 1.0:
            cos, sin = cos * af, sin * af
        # direction="negative": sin(-a) = -sin(a) exactly, as for rotary
        return cos, (-sin if self._values["direction"] == "negative" else sin)

    def _column_axes(self) -> tuple[int, ...] | None:
        """The axis of each pair (each table column), or with ``feature_axes`` the axes of the
        first features, then of the second (the columns of ``[first | second]``); None for
        a subclass computing its tables its own way."""
        cls = type(self)
        if cls._half_cos_sin is not MRope._half_cos_sin \
                or cls._member_table is not MRope._member_table:
            return None
        split = self._feature_split()
        return self._pair_frequencies(None)[1] if split is None else split[0] + split[1]

    def _member_table(self, positions: Any, axes: tuple[int, ...], freqs: Frequencies, *,
                      ctx: Ctx) -> tuple[Any, Any]:
        """``cos``/``sin`` of ``p_{axes[i]}·ω_i`` per pair: each axis's positions turn by its
        own pairs' frequencies, exactly as M-RoPE's (and so RoPE's) angles."""
        return pair_cos_sin(positions, axes, freqs, ctx=ctx)

    def cos_sin(self, positions: Any, *, dtype: Any = None,
                seq_len: int | None = None) -> tuple[Any, Any]:
        """As for every rotary encoder; with ``feature_axes`` each feature's own ``cos``/``sin``
        (Hugging Face's recomposed HunYuan-VL tables for ``layout="half"``)."""
        if self._feature_split() is None:
            return super().cos_sin(positions, dtype=dtype, seq_len=seq_len)
        ctx, (pos,) = self._context(positions)
        pos = self._positions(pos, ctx)
        out_dtype = resolve_dtype(self.name, ctx.backend, dtype, ctx.device)
        cos, sin = self._table(pos, ctx=ctx, seq_len=self._check_seq_len(seq_len),
                               tracing=ctx.backend.is_tracing(pos), static_len=None)
        xp, h, inter = ctx.xp, self._rotary_dim() // 2, self._interleaved()
        cos = feature_order(cos[..., :h], cos[..., h:], interleaved=inter, xp=xp)
        sin = feature_order(sin[..., :h], sin[..., h:], interleaved=inter, xp=xp)
        return xp.astype(cos, out_dtype), xp.astype(sin, out_dtype)

    def tables(self, positions: Any, *, seq_len: int | None = None) -> RotaryTables:
        """As for every rotary encoder; with ``feature_axes`` a
        :class:`~peregistry.encoders._split_pairs.SplitRotaryTables`."""
        if self._feature_split() is None:
            return super().tables(positions, seq_len=seq_len)
        ctx, (pos,) = self._context(positions)
        pos = self._positions(pos, ctx)
        cos, sin = self._table(pos, ctx=ctx, seq_len=self._check_seq_len(seq_len),
                               tracing=ctx.backend.is_tracing(pos), static_len=None)
        return SplitRotaryTables(cos, sin, layout=self._values["layout"],
                                 head_dim=self._head_dim(), owner=self.name, ctx=ctx,
                                 rotary_features=self._values["rotary_features"],
                                 constant=not ctx.backend.is_float_dtype(pos.dtype))

    def _rotate(self, x: Any, positions: Any, *, offset: Any, params: Mapping[str, Any] | None,
                seq_len: int | None, native: bool) -> Any:
        """The engine's rotation; with ``feature_axes`` two of them, by the first and second
        features' tables, merged (:func:`._split_pairs.rotate_split`)."""
        if self._feature_split() is None:
            return super()._rotate(x, positions, offset=offset, params=params, seq_len=seq_len,
                                   native=native)
        call = self._rotate_call(x, positions, offset, params, seq_len)
        cos, sin = self._rotation_tables(call)
        spec = self._rotation
        return rotate_split(call.x, cos, sin, rotary_dim=spec.rotary_dim,
                            interleaved=spec.interleaved, last=spec.last, cdt=call.cdt,
                            xp=call.ctx.xp, native=native, text=positions is None)


@hookimpl
def peregistry_encoders() -> list[type[RotaryEncoder]]:
    """This family's encoders, ``mrope`` (hook ``peregistry_encoders``)."""
    return [MRope]
