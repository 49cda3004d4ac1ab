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
import struct
from collections.abc import Mapping
from typing import Any

import peregistry.rope._delegation as _delegation

from .._markers import hookimpl
from .._options import MAX_DIM, Option
from ..backends._base import Ctx
from ..kinds.base import BiasEncoder, Encoder, RelativeEmbedding
from ..rope._angles import Frequencies, cos_sin
from .learned_params import LearnedParams
from .pairs import compute_dtype, distance, index_dtype
from .sinusoidal import sinusoidal_frequencies

__all__ = ["ALiBi", "Shaw", "T5Bias", "TransformerXL", "alibi_slopes", "t5_bucket"]


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


# -- T5 ------------------------------------------------------------------------------------------
class T5Bias(LearnedParams, BiasEncoder):
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
        idt = index_dtype(ctx)
        idx = self._lut_index(d if d.dtype == idt else ctx.xp.astype(d, idt), ctx=ctx)
        lut = ctx.constant(list(self._cache["lut"]), idt)
        return ctx.xp.reshape(ctx.xp.take(lut, ctx.xp.reshape(idx, (-1,))), tuple(d.shape))

    def _lut_index(self, d: Any, *, ctx: Ctx) -> Any:
        """The row of the lookup table of each ``k - q`` (integers in the index dtype):
        ``clip(d, -M, M) + M``."""
        m = self._values["max_distance"]
        return _delegation.clip_int(d, -m, m, xp=ctx.xp) + m

    def _bias(self, q: Any, k: Any, *, params: Mapping[str, Any], ctx: Ctx, dtype: Any) -> Any:
        # The adapter's take gathers by N-D indices: flattening them for the standard's 1-D take
        # makes jax.jit all-gather a sharded bias (tests/test_sharding_jax.py).
        xp, table, take = ctx.xp, params["table"], ctx.backend.take
        m = self._values["max_distance"]
        idx = self._lut_index(distance(q, k, ctx=ctx), ctx=ctx)  # (*batch, Q, K)
        lut = xp.asarray(self._cache["lut"], dtype=idx.dtype, device=ctx.device)
        if math.prod(idx.shape) <= 2 * m + 1:  # few pairs: each pair's bucket, then its bias
            out = take(table.T, take(lut, idx, axis=0), axis=1)
        else:  # many: the bias of each clipped distance (H, 2M+1), then each pair's
            out = take(take(table.T, lut, axis=1), idx, axis=1)
        nb = len(out.shape) - 3  # out is (H, *batch, Q, K); differentiable in the table
        if nb:
            out = xp.permute_dims(out, (*range(1, nb + 1), 0, nb + 1, nb + 2))
        return out


# -- ALiBi ---------------------------------------------------------------------------------------
class ALiBi(BiasEncoder):
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

    def _validate(self) -> None:  # host constants of the options, made once
        self._cache["slopes"] = tuple(alibi_slopes(self._values["num_heads"],
                                                   self._values["max_bias"]))

    @property
    def slopes(self) -> tuple[float, ...]:
        """The ``num_heads`` slopes ``m_h`` (float64, host)."""
        return self._cache["slopes"]  # type: ignore[no-any-return]

    def _bias(self, q: Any, k: Any, *, params: Mapping[str, Any], ctx: Ctx, dtype: Any) -> Any:
        xp = ctx.xp
        cdt = compute_dtype(dtype, ctx)  # float32 for float32 out: as fast as hand-written
        # -|k - q| as (*batch, 1, Q, K), exact below 2**24: negated as integers, so that the
        # diagonal is +0.0 (as 0.0 - x gives)
        neg = xp.astype(-xp.abs(distance(q, k, ctx=ctx)), cdt)[..., None, :, :]
        slopes = xp.asarray(self.slopes, dtype=cdt, device=ctx.device)
        return neg * xp.reshape(slopes, (-1, 1, 1))


# -- Shaw ----------------------------------------------------------------------------------------
class Shaw(LearnedParams, RelativeEmbedding):
    """Relative position representations: a learned vector per clipped distance (Shaw et al. 2018).

    Eq. 3–4: ``embed[..., i, j, :] = table[clip(k_j - q_i, -M, M) + M]``."""

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
        m = self._values["max_distance"]
        idx = _delegation.clip_int(distance(q, k, ctx=ctx), -m, m, xp=ctx.xp) + m
        return ctx.backend.take(params["table"], idx, axis=0)  # (*batch, Q, K, dim)


# -- Transformer-XL ------------------------------------------------------------------------------
#: From this many (query, key) pairs on, transformer-xl computes one angle per distance.
_BY_DISTANCE_MIN_PAIRS = 1024


class TransformerXL(RelativeEmbedding):
    """Transformer-XL sinusoid of the relative position ``q - k`` (Dai et al. 2019, §3.3).

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

    def _validate(self) -> None:  # host constants of the options, made once
        self._cache["freqs"] = sinusoidal_frequencies(self._values["dim"], self._values["base"])

    @property
    def frequencies(self) -> Frequencies:
        """The ``dim/2`` frequencies ``ω_m`` (host constants, made at construction)."""
        return self._cache["freqs"]  # type: ignore[no-any-return]

    def _embed(self, q: Any, k: Any, *, params: Mapping[str, Any], ctx: Ctx, dtype: Any) -> Any:
        xp = ctx.xp
        if xp.isdtype(q.dtype, "integral") and xp.isdtype(k.dtype, "integral"):
            idt = index_dtype(ctx)  # q - k, exact in integers
            q = q if q.dtype == idt else xp.astype(q, idt)
            k = k if k.dtype == idt else xp.astype(k, idt)
            rel = q[..., :, None] - k[..., None, :]  # (*batch, Q, K)
            by_distance = self._by_distance(q, k, rel, ctx=ctx, dtype=dtype)
            if by_distance is not None:
                return by_distance
        else:
            rel = xp.astype(q, ctx.wide)[..., :, None] - xp.astype(k, ctx.wide)[..., None, :]
        cos, sin = cos_sin(rel, self.frequencies, ctx=ctx)
        return xp.concat((sin, cos), axis=-1)

    def _by_distance(self, q: Any, k: Any, rel: Any, *, ctx: Ctx, dtype: Any) -> Any | None:
        """The embeddings as rows of a table with one row per distance ``d`` in
        ``[min q - max k, max q - min k]``, cast to ``dtype``, gathered at ``rel = q - k``: one
        angle per distance instead of one per (query, key) pair. The same bits (the angles,
        sines and cosines are elementwise, and the cast commutes with the gather). None where
        the range cannot be read now (inside a trace; on a device where reading synchronizes)
        or the table would not be smaller than the pairs."""
        if ctx.backend.is_tracing(rel):  # values unknown (and no generators under Dynamo)
            return None
        pairs = math.prod(rel.shape)
        if pairs < _BY_DISTANCE_MIN_PAIRS:  # reading the range would cost more than it saves
            return None
        qb, kb = _int_range(q, ctx=ctx), _int_range(k, ctx=ctx)
        if qb is None or kb is None:
            return None
        low, high = qb[0] - kb[1], qb[1] - kb[0]
        if high - low + 1 > pairs // 2:
            return None
        xp = ctx.xp
        d = xp.arange(low, high + 1, dtype=rel.dtype, device=ctx.device)
        cos, sin = cos_sin(d, self.frequencies, ctx=ctx)
        table = xp.astype(xp.concat((sin, cos), axis=-1), dtype)
        return ctx.backend.take(table, rel - low if low else rel, axis=0)

def _int_range(a: Any, *, ctx: Ctx) -> tuple[int, int] | None:
    """``(min, max)`` of a non-empty integer array as Python ints; None if it is empty, a
    tracer's, or on a device where reading values would synchronize it."""
    if ctx.backend.is_tracing(a) or math.prod(a.shape) == 0:
        return None
    if not _delegation.reads_cheaply(a, xp=ctx.xp):
        return None
    return _delegation.int_bounds(a, ctx=ctx)


@hookimpl
def peregistry_encoders() -> list[type[Encoder]]:
    """T5's bucketed bias, ALiBi, Shaw's embeddings and Transformer-XL's sinusoid (KERPLE and
    FIRE register through entry points of their own)."""
    return [T5Bias, ALiBi, Shaw, TransformerXL]
