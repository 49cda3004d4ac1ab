"""Relative position encoders: T5 and ALiBi attention biases, Shaw and Transformer-XL embeddings.

All four depend on the positions only through the distance ``k - q`` (key minus query), so
``bias(q + s, k + s) = bias(q, k)`` for any shift ``s`` and, for ``q = k = arange(n)``, the
``(Q, K)`` matrix is Toeplitz (constant along diagonals); the conformance suite checks this law
(property ``"relative"``).

Positions are ``(..., Q)`` and ``(..., K)``; their leading axes broadcast, and the outputs are
``(*batch, num_heads, Q, K)`` (bias kind) or ``(*batch, Q, K, dim)`` (relative-embedding kind).

===================  ==========================================================================
``t5``               ``table[bucket(k - q), h]``; buckets of Raffel et al. 2020 (T5, §2.1) as in
                     Mesh TensorFlow and Hugging Face ``T5Attention._relative_position_bucket``
                     (bit for bit). Params ``{"table": (num_buckets, num_heads)}``.
``alibi``            ``-m_h · |q - k|``; slopes ``m_h`` of Press et al. 2022 (ALiBi, §3), the
                     paper's rule for head counts that are not powers of two. No params.
``shaw``             ``table[clip(k - q, -max_distance, max_distance) + max_distance]``; Shaw et
                     al. 2018, eq. 3–4. Params ``{"table": (2·max_distance + 1, dim)}``.
``transformer-xl``   ``[sin((q - k)·ω), cos((q - k)·ω)]``, ``ω_i = base^(-2i/dim)``; Dai et al.
                     2019, §3.3 (``R_{i-j}``, sines then cosines as in the reference code).
===================  ==========================================================================

This module is a plugin like any other: it is the ``relative`` entry point of the
``peregistry`` distribution.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .. import _lazy
from .._hooks import hookimpl
from .._options import MAX_DIM, Option
from ._angles import Frequencies, cos_sin
from ._constants import eager_constant
from ._pair_ops import (
    alibi_slopes,
    as_dtype,
    clip_int,
    int_distance,
    pair_difference,
    size_of,
    t5_bucket,
)
from ._row_tables import (
    PairValues,
    index_bounds,
    int_range,
    kept_pairs,
    kept_rows,
    pair_bounds,
    pair_operand,
    pair_reach,
    pair_values,
    step_entries,
    step_magnitudes,
    step_rows,
)
from .base import Ctx, Encoder
from .learned_params import LearnedParams
from .pairs import compute_dtype, gather, index_dtype
from .relative_calls import RememberedBias, RememberedEmbedding
from .sinusoidal import sinusoidal_frequencies

if TYPE_CHECKING:
    from ..rope import _delegation
else:  # the framework dispatch, imported by the first call (peregistry/_lazy.py)
    _delegation = _lazy.delegation(globals())

__all__ = ["ALiBi", "Shaw", "T5Bias", "TransformerXL", "alibi_slopes", "t5_bucket"]


# -- T5 ------------------------------------------------------------------------------------------
class T5Bias(LearnedParams, RememberedBias):
    """T5 relative attention bias: a learned scalar per head for each bucket of ``k - q``.

    ``bias[..., h, i, j] = table[bucket(k_j - q_i), h]`` with the buckets of
    :func:`t5_bucket` (Raffel et al. 2020, "Exploring the Limits of Transfer Learning", §2.1;
    Hugging Face ``T5Attention.compute_bias``). ``bidirectional=True`` is the T5 encoder,
    ``False`` the decoder (causal: every future key falls in bucket 0, with ``k = q``).

    The bucket of every distance in ``[-max_distance, max_distance]`` is computed once on the
    host into a lookup table; beyond that range the bucket no longer changes, so on the device
    ``k - q`` is clipped and looked up (no logarithm per element, and the float32 rounding of
    Hugging Face is reproduced exactly).
    """

    name = "t5"
    __slots__ = ()
    _compile_hook_eagerly = True  # the hook reads no values: one program per shape on eager JAX

    num_heads = Option(int, allowed="a positive integer", check=lambda n: n > 0,
                       doc="attention heads (columns of the table)", example=8)
    num_buckets = Option(int, 32, allowed="an integer >= 2 (>= 4 if bidirectional)",
                         check=lambda n: n >= 2, doc="relative_attention_num_buckets")
    # The bucket of every distance up to max_distance is tabulated at construction.
    max_distance = Option(int, 128, allowed=f"an integer in 1..{MAX_DIM}",
                          check=lambda n: 0 < n <= MAX_DIM,
                          doc="relative_attention_max_distance: distances beyond share a bucket")
    bidirectional = Option(bool, True, doc="True: encoder (both directions); False: causal "
                                           "decoder (future keys share bucket 0)")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        m = int(self._values["max_distance"])
        bidirectional, nb = bool(self._values["bidirectional"]), int(self._values["num_buckets"])
        # bucket of k - q = d for d in [-M, M], index d + M (built once: tracing sees a constant)
        self._cache["lut"] = tuple(
            t5_bucket(d, bidirectional=bidirectional, num_buckets=nb, max_distance=m)
            for d in range(-m, m + 1))

    def _validate(self) -> None:
        nb, m = int(self._values["num_buckets"]), int(self._values["max_distance"])
        bidirectional = bool(self._values["bidirectional"])
        half = nb // 2 if bidirectional else nb
        if half < 2:
            raise self._invalid("num_buckets", nb, ">= 4 with bidirectional=True (half the "
                                "buckets per direction, half of those exact)")
        max_exact = half // 2
        if m <= max_exact:
            raise self._invalid("max_distance", m, f"> {max_exact} (the exact buckets cover "
                                f"distances below {max_exact} with num_buckets={nb})")

    @property
    def properties(self) -> frozenset[str]:  # type: ignore[override]
        """``relative`` always; ``causal-future-alike`` for the causal (decoder) variant."""
        if self._values["bidirectional"]:
            return frozenset({"relative"})
        return frozenset({"relative", "causal-future-alike"})

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"table": (int(self._values["num_buckets"]), int(self._values["num_heads"]))}

    def buckets(self, relative_positions: Any) -> Any:
        """The bucket of each ``k - q`` (an integer array of any shape), as an integer array of
        the same namespace: ``T5Attention._relative_position_bucket`` for this encoder."""
        ctx, (d,) = self._context(relative_positions, names=("relative_positions",))
        d = self._positions(d, ctx, what="relative_positions")
        idx = self._lut_index(d, ctx=ctx)
        lut = ctx.constant(list(self._cache["lut"]), index_dtype(ctx))
        return ctx.xp.reshape(ctx.xp.take(lut, ctx.xp.reshape(idx, (-1,))), tuple(d.shape))

    def _lut_index(self, d: Any, *, ctx: Ctx) -> Any:
        m = int(self._values["max_distance"])
        return clip_int(as_dtype(d, index_dtype(ctx), xp=ctx.xp), m, xp=ctx.xp) + m

    def _bias(self, q: Any, k: Any, *, params: Mapping[str, Any], ctx: Ctx, dtype: Any) -> Any:
        xp, table = ctx.xp, params["table"]
        m = int(self._values["max_distance"])
        # Few pairs: each pair's bias at its bucket of the transposed table or (torch: one flat
        # take) at its row offset (bucket x heads) plus each head. Many: the bias of each clipped
        # distance (H, 2M+1), then one gather per pair. (Each path gathers alike, kept or not.)
        flat = _delegation.gathers_flat(table, xp=xp)
        scale = int(self._values["num_heads"]) if flat else 1
        entries: Any = None
        idx: Any = None
        values = pair_values(q, k, ctx=ctx)  # short eager positions: what they decide is kept
        if values is None:
            idx = self._lut_indices(q, k, ctx=ctx)  # (*batch, Q, K)
            if size_of(idx) <= 2 * m + 1:
                entries = self._entries_at(idx, scale, ctx=ctx, like=idx)
        elif len(values[0]) * len(values[1]) <= 2 * m + 1:
            entries = pair_operand(  # (one query: a decode step's slice, if it is one)
                self, "row offsets" if flat else "buckets", values,
                build=lambda: self._pair_entries(q, k, values, scale, ctx=ctx),
                step=self._entry_vector(scale) if len(values[0]) == 1 else None,
                dtype=index_dtype(ctx), ctx=ctx)
        else:
            idx = kept_pairs(self, "lookup", values, ctx=ctx,
                             build=lambda: self._lut_indices(q, k, ctx=ctx))
        if entries is None:
            lut = eager_constant(self, ("lut_arrays", 1), self._entries(1), idx.dtype, ctx=ctx,
                                 like=idx)
            out = gather(gather(table.T, lut, axis=1, ctx=ctx), idx, axis=1, ctx=ctx)
        elif flat:
            heads = eager_constant(self, "head_arrays", range(scale), entries.dtype, ctx=ctx,
                                   like=None if values else entries, shape=(scale, 1, 1))
            if entries.ndim != 2:
                heads = xp.reshape(heads, (scale, *(1,) * entries.ndim))
            out = _delegation.take_flat(table, entries + heads, xp=xp)
        else:
            out = gather(table.T, entries, axis=1, ctx=ctx)
        nb = len(out.shape) - 3  # out is (H, *batch, Q, K); differentiable in the table
        if nb:
            out = xp.permute_dims(out, (*range(1, nb + 1), 0, nb + 1, nb + 2))
        return out

    def _entries(self, scale: int) -> tuple[int, ...]:
        """The bucket of each clipped distance (the lookup table made at construction, or set
        by a subclass after ``__init__``) times ``scale``: 1, or the heads (row offsets)."""
        lut: tuple[int, ...] = self._cache["lut"]
        if scale == 1:
            return lut
        kept: tuple[int, ...] | None = self._cache.get("row_offsets")
        if kept is None:
            kept = self._cache["row_offsets"] = tuple(b * scale for b in lut)
        return kept

    def _entries_at(self, idx: Any, scale: int, *, ctx: Ctx, like: Any) -> Any:
        """The entry (:meth:`_entries`) at each lookup index ``idx``."""
        lut = eager_constant(self, ("lut_arrays", scale), self._entries(scale), idx.dtype,
                             ctx=ctx, like=like)
        return gather(lut, idx, axis=0, ctx=ctx)

    def _entry_vector(self, scale: int) -> Callable[[], tuple[int, ...]] | None:
        """The entry of each clipped distance in ``[-STEP_REACH, STEP_REACH]`` (a decode step's
        slice), made on first need, with this class's :meth:`_lut_index` only."""
        if type(self)._lut_index is not T5Bias._lut_index:
            return None
        m = int(self._values["max_distance"])
        return lambda: step_entries(self, ("step_entries", scale),
                                    lambda d: self._entries(scale)[min(max(d, -m), m) + m])

    def _pair_entries(self, q: Any, k: Any, values: PairValues, scale: int, *, ctx: Ctx) -> Any:
        """The entry of each pair of short eager positions (``values`` read from them),
        ``(Q, K)``: where no distance reaches ``max_distance`` (nothing to clip) and
        :meth:`_lut_index` is this class's, each distance's entry read from a vector laid out
        so that a negative distance counts from the end (two operations fewer)."""
        m = int(self._values["max_distance"])
        if type(self)._lut_index is T5Bias._lut_index and pair_reach(values) <= m:
            wrapped = self._cache.get(("wrapped", scale))
            if wrapped is None:
                entries = self._entries(scale)
                wrapped = self._cache[("wrapped", scale)] = entries[m:] + entries[:m]
            vector = eager_constant(self, ("wrapped_arrays", scale), wrapped, index_dtype(ctx),
                                    ctx=ctx, like=None)  # (values read: no trace)
            return _delegation.take_differences(vector, q, k, ctx=ctx)
        return self._entries_at(self._lut_indices(q, k, ctx=ctx), scale, ctx=ctx, like=None)

    def _lut_indices(self, q: Any, k: Any, *, ctx: Ctx) -> Any:
        """``clip(k_j - q_i, -M, M) + M`` of each pair, ``(*batch, Q, K)``, in the index dtype."""
        return self._lut_index(int_distance(q, k, index_dtype(ctx), xp=ctx.xp), ctx=ctx)


# -- ALiBi ---------------------------------------------------------------------------------------
class ALiBi(RememberedBias):
    """ALiBi linear biases: ``bias[..., h, i, j] = -m_h · |q_i - k_j|`` (Press et al. 2022).

    The symmetric form (``|q - k|``) serves encoders and, under a causal mask, equals the paper's
    ``-m·(q - k)`` for the keys a query sees. Hugging Face Bloom's ``build_alibi_tensor`` instead
    returns ``+m_h · k`` of shape ``(batch·heads, 1, K)`` and relies on softmax being invariant
    to a per-row constant: it equals this bias plus ``m_h·q`` per query row for ``k <= q``.
    """

    name = "alibi"
    properties = frozenset({"relative", "alibi-slopes"})
    __slots__ = ()
    _compile_hook_eagerly = True  # the hook reads no values: one program per shape on eager JAX

    # The slopes are computed at construction, one per head.
    num_heads = Option(int, allowed=f"an integer in 1..{MAX_DIM}",
                       check=lambda n: 0 < n <= MAX_DIM,
                       doc="attention heads; slopes follow the paper's rule", example=8)
    max_bias = Option(float, 8.0, allowed="a finite number > 0",
                      check=lambda b: 0 < b < math.inf,
                      doc="B in the slopes 2^(-B·h/n): 8 in the paper; MPT's and keras-hub's "
                          "alibi_bias_max")

    @property
    def slopes(self) -> tuple[float, ...]:
        """The ``num_heads`` slopes ``m_h`` (float64, host)."""
        s = self._cache.get("slopes")
        if s is None:
            s = self._cache["slopes"] = tuple(alibi_slopes(int(self._values["num_heads"]),
                                                           float(self._values["max_bias"])))
        return tuple(s)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        _ = self.slopes  # computed once here, so tracing never sees the cache change

    def _bias(self, q: Any, k: Any, *, params: Mapping[str, Any], ctx: Ctx, dtype: Any) -> Any:
        xp = ctx.xp
        cdt = compute_dtype(dtype, ctx)  # float32 for float32 out: as fast as hand-written

        def negated() -> Any:
            # -|k - q| as (*batch, 1, Q, K), exact below 2**24: negated as integers, so that the
            # diagonal is +0.0 (as 0.0 - x gives; torch's float scalar minus a tensor costs more)
            d = int_distance(q, k, index_dtype(ctx), xp=xp)
            return xp.expand_dims(xp.astype(-xp.abs(d), cdt), axis=-3)

        neg = pair_operand(self, "negated distances", pair_values(q, k, ctx=ctx), build=negated,
                           step=step_magnitudes, dtype=cdt, extra=cdt, ctx=ctx)
        m = eager_constant(self, "slopes_arrays", self.slopes, cdt, ctx=ctx, like=neg,
                            shape=(-1, 1, 1))
        return neg * m


# -- Shaw ----------------------------------------------------------------------------------------
class Shaw(LearnedParams, RememberedEmbedding):
    """Shaw et al. 2018 relative position representations (eq. 3–4): one learned vector per
    clipped distance, ``embed[..., i, j, :] = table[clip(k_j - q_i, -M, M) + M]``."""

    name = "shaw"
    properties = frozenset({"relative"})
    __slots__ = ()
    _compile_hook_eagerly = True  # the hook reads no values: one program per shape on eager JAX

    max_distance = Option(int, allowed="a positive integer", check=lambda n: n > 0,
                          doc="clipping distance k (the paper's k)", example=16)
    dim = Option(int, allowed="a positive integer", check=lambda n: n > 0,
                 doc="length of each relative embedding")

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        m = int(self._values["max_distance"])
        return {"table": (2 * m + 1, int(self._values["dim"]))}

    def _embed(self, q: Any, k: Any, *, params: Mapping[str, Any], ctx: Ctx, dtype: Any) -> Any:
        m = int(self._values["max_distance"])

        def rows() -> Any:  # the table row of each pair, (*batch, Q, K)
            d = int_distance(q, k, index_dtype(ctx), xp=ctx.xp)
            return (d if values is not None and pair_reach(values) <= m  # (none clipped)
                    else clip_int(d, m, xp=ctx.xp)) + m

        values = pair_values(q, k, ctx=ctx)  # short eager positions: their rows are kept
        idx = pair_operand(self, "rows", values, build=rows, step=lambda: step_entries(
            self, "step_rows", lambda d: min(max(d, -m), m) + m), dtype=index_dtype(ctx), ctx=ctx)
        return gather(params["table"], idx, axis=0, ctx=ctx)


# -- Transformer-XL ------------------------------------------------------------------------------
#: From this many (query, key) pairs on, transformer-xl computes one angle per distance.
_BY_DISTANCE_MIN_PAIRS = 1024


class TransformerXL(RememberedEmbedding):
    """Transformer-XL sinusoid of the relative position ``q - k`` (Dai et al. 2019, §3.3):
    ``R[..., i, j, :] = [sin((q_i - k_j)·ω), cos((q_i - k_j)·ω)]``, ``ω_m = base^(-2m/dim)``
    (sines then cosines, as ``PositionalEmbedding`` of the reference code)."""

    name = "transformer-xl"
    properties = frozenset({"relative"})
    continuous = True
    __slots__ = ()
    _compile_hook_eagerly = True  # the hook reads no values: one program per shape on eager JAX

    dim = Option(int, allowed=f"a positive even integer <= {MAX_DIM}",
                 check=lambda d: 0 < d <= MAX_DIM and d % 2 == 0,
                 doc="length of each relative embedding")
    base = Option(float, 10000.0, allowed="a finite number > 0 (and != 1)",
                  check=lambda b: b > 0 and b != 1.0, doc="wavelength base (10000 in the paper)")

    @property
    def frequencies(self) -> Frequencies:
        """The ``dim/2`` frequencies ``ω_m`` (host constants, computed once)."""
        return self._cache["freqs"]  # type: ignore[no-any-return]

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._cache["freqs"] = sinusoidal_frequencies(int(self._values["dim"]),
                                                      float(self._values["base"]))

    def _embed(self, q: Any, k: Any, *, params: Mapping[str, Any], ctx: Ctx, dtype: Any) -> Any:
        xp, f64 = ctx.xp, ctx.has_float64
        if xp.isdtype(q.dtype, "integral") and (k.dtype == q.dtype
                                                or xp.isdtype(k.dtype, "integral")):
            idt = index_dtype(ctx)  # q - k, exact in integers
            q, k = as_dtype(q, idt, xp=xp), as_dtype(k, idt, xp=xp)
            kept = self._kept_distances(q, k, ctx=ctx, dtype=dtype)
            if kept is not None:
                return kept
            if f64 and math.prod(q.shape) * math.prod(k.shape) < _BY_DISTANCE_MIN_PAIRS:
                return self._sin_cos(pair_difference(q, k, xp=xp), ctx=ctx)  # (.., Q, K, 1)
            rel = pair_difference(q, k, xp=xp, trailing=False)
            by_distance = self._by_distance(q, k, rel, ctx=ctx, dtype=dtype)
            if by_distance is not None:
                return by_distance
        elif f64:
            return self._sin_cos(pair_difference(as_dtype(q, ctx.wide, xp=xp),
                                                  as_dtype(k, ctx.wide, xp=xp), xp=xp), ctx=ctx)
        else:
            rel = (xp.expand_dims(xp.astype(q, ctx.wide), axis=-1)
                   - xp.expand_dims(xp.astype(k, ctx.wide), axis=-2))
        if f64:
            return self._sin_cos(rel[..., None], ctx=ctx)
        cos, sin = cos_sin(rel, self.frequencies, ctx=ctx)
        return xp.concat((sin, cos), axis=-1)

    def _sin_cos(self, rel: Any, *, ctx: Ctx) -> Any:
        """``[sin(rel·ω), cos(rel·ω)]`` for ``rel`` ``(..., 1)`` (integer, or float64): the
        float64 angles of :func:`~peregistry.rope._angles.cos_sin`, with ``ω`` kept as an array
        per backend, device and dtype."""
        freqs = self.frequencies
        omega = eager_constant(self, "omega_arrays", freqs.omega, ctx.wide, ctx=ctx, like=rel)
        # rel (..., 1) broadcasts against ω as one position per pair would
        cos, sin = cos_sin(rel, freqs, ctx=ctx, per_pair=True, omega=omega)
        return ctx.xp.concat((sin, cos), axis=-1)

    def _kept_distances(self, q: Any, k: Any, *, ctx: Ctx, dtype: Any) -> Any | None:
        """Eager integer ``q``, ``k``: the rows at ``q - k`` of a table of the distances
        ``-n/2 .. n/2 - 1`` kept across calls (:mod:`._row_tables`), of ``dtype``, or a decode
        step's slice of a table of rows by distance; None where no table serves them."""
        xp, width = ctx.xp, int(self._values["dim"])

        def build(d: Any) -> Any:  # one angle per distance, as _embed computes each pair's
            if ctx.has_float64:
                return self._sin_cos(xp.reshape(d, (-1, 1)), ctx=ctx)
            cos, sin = cos_sin(d, self.frequencies, ctx=ctx)
            return xp.concat((sin, cos), axis=-1)

        values = pair_values(q, k, ctx=ctx)
        if values is not None:  # short eager positions: a decode step's rows, or kept distances
            rows = step_rows(self, "distances", values, width=width, ctx=ctx, dtype=dtype,
                             build=lambda d: build(-d), like=q)  # (q - k = -d)
            if rows is not None:
                return rows
            rel = kept_pairs(self, "distances", values, ctx=ctx,
                             build=lambda: pair_difference(q, k, xp=xp, trailing=False))
            bounds = pair_bounds(values)
        else:
            qb = index_bounds(q, ctx=ctx)
            kb = qb if k is q or qb is None else index_bounds(k, ctx=ctx)  # (self-attention)
            if qb is None or kb is None:
                return None
            rel = pair_difference(q, k, xp=xp, trailing=False)  # q - k
            bounds = (qb[0] - kb[1], qb[1] - kb[0])
        return kept_rows(self, "distances", rel, bounds=bounds, width=width, ctx=ctx,
                         dtype=dtype, build=build, centered=True)

    def _by_distance(self, q: Any, k: Any, rel: Any, *, ctx: Ctx, dtype: Any) -> Any | None:
        """The embeddings as rows of a table with one row per distance ``d`` in
        ``[min q - max k, max q - min k]``, cast to ``dtype``, gathered at ``rel = q - k``: one
        angle per distance instead of one per (query, key) pair. The same bits (the angles,
        sines and cosines are elementwise, and the cast commutes with the gather). None where
        the range cannot be read now (inside a trace; on a device where reading synchronizes)
        or the table would not be smaller than the pairs."""
        if ctx.backend.is_tracing(rel):  # values unknown (and no generators under Dynamo)
            return None
        pairs = size_of(rel)
        if pairs < _BY_DISTANCE_MIN_PAIRS:  # reading the range would cost more than it saves
            return None
        qb, kb = int_range(q, ctx=ctx), int_range(k, ctx=ctx)
        if qb is None or kb is None:
            return None
        low, high = qb[0] - kb[1], qb[1] - kb[0]
        if high - low + 1 > pairs // 2:
            return None
        xp = ctx.xp
        d = xp.arange(low, high + 1, dtype=rel.dtype, device=ctx.device)
        cos, sin = cos_sin(d, self.frequencies, ctx=ctx)
        table = xp.astype(xp.concat((sin, cos), axis=-1), dtype)
        return gather(table, rel - low if low else rel, axis=0, ctx=ctx)


@hookimpl
def peregistry_encoders() -> list[type[Encoder]]:
    return [T5Bias, ALiBi, Shaw, TransformerXL]
