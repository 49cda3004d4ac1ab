"""Base classes that rotary families are built from: :class:`ScaledRotary` (RoFormer frequencies
with a ``scaling`` option, the base of ``rotary`` and ``mrope``) and :class:`MultiAxisRotary`
(one position per axis, positions ``(num_axes, ...)``: M-RoPE, N-D axial RoPE).

A new rotary family is a subclass of one of them (or of :class:`RotaryEncoder` itself) in its own
module, plus an entry point; see ``docs/plugins.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from .._options import freeze, thaw
from ._angles import Frequencies, cos_sin
from ._delegation import read_ints, reads_cheaply, rows_pay_off, take_last
from ._funcs import inv_freq
from ._tables import STORE
from .encoder import RotaryEncoder

if TYPE_CHECKING:
    from ..backends._base import Ctx
    from ._tables import Tables
    from .scalings import RopeScaling

__all__ = ["MultiAxisRotary", "ScaledRotary", "ScalingState"]


@dataclass(slots=True)
class ScalingState:
    """The resolved ``scaling`` option of one encoder and its host constants (never part of its
    identity): the scaling type (None without scaling), its complete parameters, the attention
    factor, and the :class:`Frequencies` of the sequence-length keys a traced call may ask for
    without a ``seq_len`` (made at construction; others are computed when asked, and kept in
    the store of tables by eager calls)."""

    scaling: RopeScaling | None
    params: dict[str, Any]
    attention_factor: float
    frequencies: dict[Any, Frequencies] = field(default_factory=dict)
    softmax_scale_factor: float = 1.0


def _signed(enc: RotaryEncoder, sin: Any) -> Any:
    """``sin`` of the angle's sign: ``direction="negative"`` turns pairs by ``-p·ω`` (nanochat's
    ``rotate_half`` returns ``[x2, -x1]``), and ``sin(-a) = -sin(a)`` exactly."""
    return -sin if enc._values.get("direction") == "negative" else sin


class ScaledRotary(RotaryEncoder):
    """Base of rotary encoders with RoFormer frequencies ``ω_i = θ^(-2i/d)`` and a ``scaling``
    option (``rotary``, ``mrope``): resolves and validates the scaling type, computes the host
    frequencies per sequence length (cached), the attention factor, and ``_half_cos_sin``.

    Subclasses declare the options ``dim``, ``theta`` and ``scaling`` (and ``rotary_dim`` if
    they have partial rotary) and call ``super()._validate()`` from their ``_validate``.
    """

    __slots__ = ("_scaled",)
    _compile_hook_eagerly = True  # _half_cos_sin reads no values: see peregistry/_jax_eager.py
    _scaled: ScalingState

    #: The laws the conformance suite states for the first ``rotary_dim`` features, which
    #: ``rotary_features="last"`` rotates at the other end of the head instead.
    _LAST_FEATURES_EXEMPT: ClassVar[Mapping[str, str]] = MappingProxyType({
        check: "rotary_features='last' rotates the last rotary_dim features; the check reads "
               "the first (tests/test_rope_variants.py checks the law on the last)"
        for check in ("check_rotary_norm_preserved", "check_rotary_matches_cos_sin",
                      "check_rotary_layouts")})

    @property
    def exempt_checks(self) -> Mapping[str, str]:  # type: ignore[override]
        """None, except with ``rotary_features="last"`` and partial rotary (see
        :attr:`_LAST_FEATURES_EXEMPT`)."""
        if self._rotary_last() and self._rotary_dim() < self._head_dim():
            return self._LAST_FEATURES_EXEMPT
        return MappingProxyType({})

    def _validate(self) -> None:
        try:
            self._resolve_scaling()
        except OverflowError as exc:  # e.g. an integer parameter beyond float64's range
            raise ValueError(
                f"{self.name}: scaling={thaw(self._values['scaling'])!r} overflows float64 "
                f"when its frequencies are computed ({exc}); allowed: parameters whose values "
                f"fit in a float64 (below about 1.8e308)") from None

    def _resolve_scaling(self) -> None:
        from .scalings import resolve_scaling

        raw = self._values["scaling"]
        rd, theta = self._rotary_dim(), self._values["theta"]
        obj, normalised = resolve_scaling(self.name, thaw(raw) if raw is not None else None,
                                          rotary_dim=rd, theta=theta)
        self._values["scaling"] = freeze(normalised) if normalised is not None else None
        params = {k: v for k, v in (normalised or {}).items() if k != "type"}
        factor = 1.0 if obj is None else float(obj.attention_factor(rd, theta, params))
        soft = 1.0 if obj is None else float(obj.softmax_scale_factor(params))
        object.__setattr__(self, "_scaled",
                           ScalingState(obj, params, factor, softmax_scale_factor=soft))
        # Host constants for every seq_len the traced code may ask for without a seq_len,
        # computed now (eagerly): torch.compile would otherwise trace the NumPy code.
        state = self._scaled
        for t in (None, *(b + 1 for b in self._seq_len_dependence()[1])):
            key = None if obj is None else obj.seq_len_key(params, t)
            state.frequencies[key] = self._frequencies(t)

    # -- frequencies -----------------------------------------------------------------------------
    @property
    def _scaling(self) -> RopeScaling | None:
        return self._scaled.scaling

    def _scaling_params(self) -> dict[str, Any]:
        return self._scaled.params

    def inv_freq(self, seq_len: int | None = None) -> Any:
        """The ``rotary_dim/2`` angular frequencies ``ω_i`` (scaling applied) as a float64
        NumPy array, for sequence length ``seq_len`` where the scaling depends on it."""
        import numpy as np

        return np.asarray(self._frequencies(seq_len).omega, dtype=np.float64)

    def _frequencies(self, seq_len: int | None, *, keep: bool = False) -> Frequencies:
        """The host :class:`Frequencies` for ``seq_len``: made at construction for the keys a
        trace may ask for; others computed now and, with ``keep`` (an eager call), kept in the
        store of tables under the encoder and the scaling type's key."""
        state = self._scaled
        sc = state.scaling
        key = None if sc is None else sc.seq_len_key(state.params, seq_len)
        freqs = state.frequencies.get(key)
        if freqs is not None:
            return freqs
        kept_as = ("rope frequencies", type(self), self, type(sc), key)
        if keep:
            freqs = STORE.get(kept_as)
            if freqs is not None:
                return freqs  # type: ignore[no-any-return]
        import numpy as np

        rd, theta = self._rotary_dim(), float(self._values["theta"])
        if sc is None:
            omega = inv_freq(rd, theta)
        else:
            omega = np.asarray(sc.inv_freq(rd, theta, state.params, seq_len), dtype=np.float64)
            if omega.shape != (rd // 2,) or not np.all(np.isfinite(omega)):
                raise ValueError(
                    f"{self.name}: scaling {sc.name!r} returned inv_freq of shape "
                    f"{omega.shape}, but should be ({rd // 2},) finite values"
                )
        freqs = Frequencies.from_omega(omega)
        if keep:
            STORE.put(kept_as, freqs, 5 * 32 * len(freqs) + 512)  # five tuples of floats
        return freqs

    @property
    def attention_factor(self) -> float:
        """The factor Hugging Face calls ``attention_scaling``, applied to ``cos`` and ``sin``."""
        return float(self._scaled.attention_factor)

    @property
    def softmax_scale_factor(self) -> float:
        """Factor on the attention softmax scale that the scaling asks of the model, outside
        RoPE (DeepSeek's yarn: ``m(factor, mscale_all_dim)²``; 1.0 for the others)."""
        return float(self._scaled.softmax_scale_factor)

    def _seq_len_dependence(self) -> tuple[str, tuple[int, ...]]:
        sc = self._scaling
        if sc is None:
            return "none", ()
        dep = sc.seq_len_dependence
        return dep, (sc.seq_len_breakpoints(self._scaling_params()) if dep == "piecewise" else ())

    # -- the hook ----------------------------------------------------------------------------------
    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> tuple[Any, Any]:
        freqs = self._frequencies(seq_len, keep=not ctx.backend.is_tracing(positions))
        cos, sin = cos_sin(positions, freqs, ctx=ctx)
        af = self.attention_factor
        # (compared, not math.isfinite: under torch.compile(dynamic=True) af may be symbolic)
        if af != 1.0 and abs(af) < math.inf:
            cos, sin = cos * af, sin * af
        return cos, _signed(self, sin)


def pair_cos_sin(positions: Any, axis_of_pair: tuple[int, ...], freqs: Frequencies, *,
                 ctx: Ctx) -> tuple[Any, Any]:
    """``cos``/``sin`` of ``p_{a_i}·ω_i`` per pair ``i`` (``a_i = axis_of_pair[i]``) for
    positions ``(num_axes, *batch)``, each ``(*batch, len(freqs))``: each pair's axis position
    is gathered first, so that one ``cos`` and one ``sin`` serve every axis (each angle by the
    same operations as per axis: the same bits, in fewer operations and smaller compiled
    programs)."""
    xp = ctx.xp
    idx = xp.asarray(list(axis_of_pair), device=ctx.device)
    nd = positions.ndim
    if nd > 1:  # (*batch, num_axes), a view: the gather then writes (*batch, pairs) in order,
        # the layout the tables keep (a pair-major one would keep torch's kernel from them)
        positions = xp.permute_dims(positions, (*range(1, nd), 0))
    pair_pos = take_last(positions, idx, xp=xp)  # (*batch, pairs)
    return cos_sin(pair_pos, freqs, ctx=ctx, per_pair=True)


class MultiAxisRotary(RotaryEncoder):
    """Base of rotary encoders with one position per axis: ``positions`` is ``(num_axes, ...)``
    and each frequency pair turns with the position of the axis it belongs to (M-RoPE of
    Qwen2-VL, N-D axial RoPE of FLUX/EVA-02).

    A subclass says how many axes there are (:attr:`num_axes`) and, per axis, the frequencies of
    its pairs (:meth:`_axis_frequencies`); where the pairs of one axis are not contiguous it
    also gives :meth:`_pair_order`. ``positions=None`` (text tokens) puts every axis at
    ``offset + arange(seq)``, so decoding text reads rows of the table of positions.
    """

    __slots__ = ()
    _offset_rows_are_positions = True  # text positions: one position per token, on every axis
    _compile_hook_eagerly = True  # _half_cos_sin reads no values

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Keeping these default positions (every axis at the token's position) and batch
        # shape, a text token's ids (p, ..., p) are row p of the table of text positions.
        owner = next(c for c in cls.__mro__ if "_default_positions" in c.__dict__)
        cls._rows_at_tokens = (
            owner is MultiAxisRotary and cls._rows_at_offsets
            and cls._position_batch_shape is MultiAxisRotary._position_batch_shape)

    @property
    def num_axes(self) -> int:
        """How many position rows ``positions`` has."""
        raise NotImplementedError(f"{type(self).__qualname__} must define num_axes")

    def _axes_description(self) -> str:
        """What the axes are, for error messages (e.g. ``sections=(16, 24, 24)``)."""
        return f"{self.num_axes} axes"

    def _axis_frequencies(self, seq_len: int | None) -> tuple[Frequencies, ...]:
        """Per axis, the :class:`Frequencies` of its pairs (in feature order within the axis);
        an axis may have none."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement _axis_frequencies")

    def _pair_frequencies(self, seq_len: int | None) -> tuple[Frequencies, tuple[int, ...]]:
        """The frequencies of every pair in feature order, and the axis of each: by default
        :meth:`_axis_frequencies` concatenated (axis 0's first) and put in order by
        :meth:`_pair_order`. A subclass that knows them directly may override this."""
        axis_freqs = self._axis_frequencies(seq_len)
        grouped = [(ax, i) for ax, f in enumerate(axis_freqs) for i in range(len(f))]
        order = self._pair_order()
        pairs = grouped if order is None else [grouped[j] for j in order]
        freqs = Frequencies(*(tuple(getattr(axis_freqs[ax], f)[i] for ax, i in pairs)
                              for f in ("omega", "c1", "c2", "c3", "c")))
        return freqs, tuple(ax for ax, _ in pairs)

    def _pair_order(self) -> tuple[int, ...] | None:
        """The permutation that puts the pairs, grouped by axis (axis 0's first), in feature
        order: entry ``i`` is the grouped index of pair ``i``. None (the default) when the
        groups are already in order (contiguous bands)."""
        return None

    def _column_axes(self) -> tuple[int, ...] | None:
        """The axis whose position alone determines each column of the half-width tables,
        computed elementwise, so that column ``j`` of a token's row is column ``j`` of the text
        table's row at that axis's position (an image token's rows gathered from the table of
        text positions); None where that does not hold (a subclass computing its own
        :meth:`_half_cos_sin`, which then says so by overriding this)."""
        if type(self)._half_cos_sin is not MultiAxisRotary._half_cos_sin:
            return None
        return self._pair_frequencies(None)[1]

    def _token_rows(self, pos: Any, *, ctx: Ctx, cdt: Any) -> Tables | None:
        """Multi-axis ids ``(num_axes, 1, ..., 1)`` of one token, each axis at its own position:
        its row of the table of text positions (a view) when every axis is at one position ``p``
        (a text token while decoding), else each column from the row of its axis's position
        (:meth:`~.scaled.MultiAxisRotary._column_axes`), shaped as the token's batch axes; None for
        any other ids, or an encoder whose columns do not each follow one axis (the caller
        computes)."""
        xp = ctx.xp
        batch = tuple(pos.shape[1:])
        if (pos.dtype not in (xp.int32, xp.int64) or not batch or math.prod(batch) != 1
                or not rows_pay_off(xp) or not reads_cheaply(pos, xp=xp)):
            return None
        axes = read_ints(pos, ctx=ctx)
        if not axes or min(axes) < 0:
            return None
        text = min(axes) == max(axes)
        columns = None if text else self._column_axes()
        if not text and columns is None:
            return None
        table = self._position_table(max(axes) + 1, ctx=ctx, cdt=cdt)
        if table is None:
            return None
        width = table[0].shape[-1]
        shape = (*batch, width)
        if columns is None:  # a text token
            p = axes[0]
            return xp.reshape(table[0][p:p + 1, :], shape), xp.reshape(table[1][p:p + 1, :], shape)
        # column j of the token's row = column j of the row at its axis's position (flat index)
        idx = xp.reshape(xp.asarray([axes[a] * width + j for j, a in enumerate(columns)],
                                    device=ctx.device), shape)
        take = ctx.backend.take
        return (take(xp.reshape(table[0], (-1,)), idx, axis=0),
                take(xp.reshape(table[1], (-1,)), idx, axis=0))

    # -- positions are (num_axes, ...) -----------------------------------------------------------
    def _position_batch_shape(self, positions: Any) -> tuple[int, ...]:
        shape = tuple(positions.shape)
        if len(shape) == 0 or shape[0] != self.num_axes:
            raise ValueError(
                f"{self.name}: positions.shape={shape}, but should be ({self.num_axes}, ...): "
                f"one row per axis of {self._axes_description()}"
            )
        return shape[1:]

    def text_positions(self, positions: Any) -> Any:
        """Text tokens: every axis at the same position, ``(num_axes, *positions.shape)``."""
        ctx, (p,) = self._context(positions)
        return ctx.xp.stack([p] * self.num_axes, axis=0)

    def _default_positions(self, seq: int, offset: Any, *, ctx: Ctx) -> Any:
        """Text only: every axis at ``offset + arange(seq)``."""
        pos = super()._default_positions(seq, offset, ctx=ctx)
        return ctx.xp.stack([pos] * self.num_axes, axis=0)

    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> tuple[Any, Any]:
        """Each axis's positions turn by that axis's own frequencies: exactly RoPE's angles
        ``p·ω_i`` pair by pair (:func:`pair_cos_sin`)."""
        self._position_batch_shape(positions)
        freqs, axis_of_pair = self._pair_frequencies(seq_len)
        cos, sin = pair_cos_sin(positions, axis_of_pair, freqs, ctx=ctx)
        af = self.attention_factor
        if af != 1.0:
            cos, sin = cos * af, sin * af
        return cos, _signed(self, sin)

    def example_positions(self, rng: Any, shape: tuple[int, ...]) -> Any:
        """Distinct positions per axis, as for an image patch grid after some text."""
        import numpy as np

        return np.asarray(rng.integers(0, 1024, size=(self.num_axes, *shape)), dtype=np.int64)
