"""Broken bias and relative-embedding encoders: one-bug subclasses of :class:`RefBias`,
:class:`RefRelEmb` and :class:`RefLearnedBias`."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from peregistry.plugin import Ctx, cos_sin, distance

from .references import RefBias, RefLearnedBias, RefRelEmb, _cache, _namespace_of, _omega


class Float16Bias(RefBias):
    """Computes the bias in float16 (to save memory): exact for small distances only."""

    name = "mut-f16-bias"

    def _bias(self, q: Any, k: Any, *, params: Any, ctx: Ctx, dtype: Any) -> Any:
        xp = ctx.xp
        d = xp.astype(xp.abs(distance(q, k, ctx=ctx)), xp.float16)
        return -self._slopes(ctx, xp.float16)[:, None, None] * d[..., None, :, :]


class StaleBias(RefBias):
    """Caches the bias keyed by the shapes of q and k."""

    name = "mut-stale-bias"

    def _bias(self, q: Any, k: Any, *, params: Any, ctx: Ctx, dtype: Any) -> Any:
        key = ("bias", tuple(q.shape), tuple(k.shape), str(dtype), str(ctx.device),
               ctx.backend.name)
        if key not in _cache(self):
            _cache(self)[key] = super()._bias(q, k, params=params, ctx=ctx, dtype=dtype)
        return _cache(self)[key]


class QueryDependentBias(RefBias):
    """Adds a small term in the query position: not a function of k - q alone."""

    name = "mut-query-dependent"

    def _bias(self, q: Any, k: Any, *, params: Any, ctx: Ctx, dtype: Any) -> Any:
        out = super()._bias(q, k, params=params, ctx=ctx, dtype=dtype)
        xp = ctx.xp
        return out - 1e-3 * xp.astype(q, out.dtype)[..., None, :, None]


class SinkAtOrigin(RefBias):
    """Gives the key at position 0 (the BOS "attention sink") a zero bias: shift-variant only
    near the origin."""

    name = "mut-sink-origin"

    def _bias(self, q: Any, k: Any, *, params: Any, ctx: Ctx, dtype: Any) -> Any:
        out = super()._bias(q, k, params=params, ctx=ctx, dtype=dtype)
        xp = ctx.xp
        return xp.where((k == 0)[..., None, None, :], xp.zeros_like(out), out)


class BiasIgnoresDtype(RefBias):
    """Returns float32 whatever dtype was asked for."""

    name = "mut-bias-dtype"

    def bias(self, q_positions: Any, k_positions: Any, *, params: Any = None,
             dtype: Any = None) -> Any:
        out = super().bias(q_positions, k_positions, params=params)
        xp = _namespace_of(self, out)
        return xp.astype(out, xp.float32)


class HeadsLast(RefBias):
    """Puts the head axis last: ``(..., Q, K, H)`` instead of ``(..., H, Q, K)``."""

    name = "mut-heads-last"

    def _bias(self, q: Any, k: Any, *, params: Any, ctx: Ctx, dtype: Any) -> Any:
        out = super()._bias(q, k, params=params, ctx=ctx, dtype=dtype)
        return ctx.xp.moveaxis(out, -3, -1)


class BiasNumpyLeak(RefBias):
    """Computes ``|k - q|`` with ``np.abs`` (a NumPy habit)."""

    name = "mut-bias-numpy"

    def _bias(self, q: Any, k: Any, *, params: Any, ctx: Ctx, dtype: Any) -> Any:
        d = np.abs(np.asarray(k)[..., None, :] - np.asarray(q)[..., :, None]).astype(np.float64)
        return -np.asarray(self._slopes_np())[:, None, None] * d[..., None, :, :]

    def _slopes_np(self) -> Any:
        from .references import alibi_slopes

        return np.asarray(alibi_slopes(self.num_heads))


# -- relative embeddings ---------------------------------------------------------------------------
class ClipsPositions(RefRelEmb):
    """Clips each position to ``[0, 2048)`` before subtracting (a table-size habit)."""

    name = "mut-clips-positions"

    def _embed(self, q: Any, k: Any, *, params: Any, ctx: Ctx, dtype: Any) -> Any:
        xp = ctx.xp
        return super()._embed(xp.clip(q, 0, 2047), xp.clip(k, 0, 2047), params=params, ctx=ctx,
                              dtype=dtype)


class ClipsLow(RefRelEmb):
    """Clips each position below at 16 before subtracting (positions "start at 16")."""

    name = "mut-clips-low"

    def _embed(self, q: Any, k: Any, *, params: Any, ctx: Ctx, dtype: Any) -> Any:
        xp = ctx.xp
        return super()._embed(xp.clip(q, 16, None), xp.clip(k, 16, None), params=params,
                              ctx=ctx, dtype=dtype)


class StaleEmbedding(RefRelEmb):
    """Caches the embedding keyed by the shapes of q and k."""

    name = "mut-stale-embed"

    def _embed(self, q: Any, k: Any, *, params: Any, ctx: Ctx, dtype: Any) -> Any:
        key = ("embed", tuple(q.shape), tuple(k.shape), str(ctx.device), ctx.backend.name)
        if key not in _cache(self):
            _cache(self)[key] = super()._embed(q, k, params=params, ctx=ctx, dtype=dtype)
        return _cache(self)[key]


class MutatesQueries(RefRelEmb):
    """Normalises its query positions in place after computing the right result."""

    name = "mut-mutates-q"

    def embed(self, q_positions: Any, k_positions: Any, *, params: Any = None,
              dtype: Any = None) -> Any:
        out = super().embed(q_positions, k_positions, params=params, dtype=dtype)
        q_positions[...] = q_positions * 0
        return out


_calls = itertools.count()


class FlakyEmbedding(RefRelEmb):
    """Every other call is off by a few ulps."""

    name = "mut-flaky-embed"

    def _embed(self, q: Any, k: Any, *, params: Any, ctx: Ctx, dtype: Any) -> Any:
        out = super()._embed(q, k, params=params, ctx=ctx, dtype=dtype)
        return out * (1.0 + 1e-6 * (next(_calls) % 2))


class EmbedControlFlow(RefRelEmb):
    """Checks the largest distance with a Python ``if``: breaks jit."""

    name = "mut-embed-control-flow"

    def _embed(self, q: Any, k: Any, *, params: Any, ctx: Ctx, dtype: Any) -> Any:
        if int(ctx.xp.max(ctx.xp.abs(distance(q, k, ctx=ctx)))) > 10**9:
            raise ValueError("distance too large")
        return super()._embed(q, k, params=params, ctx=ctx, dtype=dtype)


class WrongConcatAxis(RefRelEmb):
    """Concatenates sines and cosines along the key axis: ``(..., Q, 2K, dim/2)``."""

    name = "mut-concat-axis"

    def _embed(self, q: Any, k: Any, *, params: Any, ctx: Ctx, dtype: Any) -> Any:
        cos, _ = cos_sin(distance(q, k, ctx=ctx), _omega(self.dim), ctx=ctx)
        return ctx.xp.concat((cos, cos), axis=-2)


# -- learned bias ------------------------------------------------------------------------------------
class LearnedBiasDetached(RefLearnedBias):
    """Round-trips its table through NumPy: values right, gradients gone."""

    name = "mut-lbias-detached"

    def _bias(self, q: Any, k: Any, *, params: Any, ctx: Ctx, dtype: Any) -> Any:
        t = params["table"]
        host = ctx.backend.from_numpy(np.asarray(ctx.backend.to_numpy(t)), dtype=t.dtype,
                                      device=ctx.device)
        return super()._bias(q, k, params={"table": host}, ctx=ctx, dtype=dtype)


class LearnedBiasInitSeed(RefLearnedBias):
    """``init`` ignores its seed."""

    name = "mut-lbias-seed"

    def init(self, xp: Any, *, seed: int = 0, dtype: Any = None, device: Any = None) -> Any:
        return super().init(xp, seed=0, dtype=dtype, device=device)


class LearnedBiasStaleTable(RefLearnedBias):
    """Keeps the first table it saw (keyed by shape)."""

    name = "mut-lbias-stale"

    def _bias(self, q: Any, k: Any, *, params: Any, ctx: Ctx, dtype: Any) -> Any:
        t = params["table"]
        t = _cache(self).setdefault(("t", tuple(t.shape), str(t.dtype), ctx.backend.name), t)
        return super()._bias(q, k, params={"table": t}, ctx=ctx, dtype=dtype)


class LearnedBiasQueryIndex(RefLearnedBias):
    """Indexes its table by the clipped key position, not by k - q."""

    name = "mut-lbias-key-index"

    def _index(self, q: Any, k: Any, ctx: Ctx) -> Any:
        xp = ctx.xp
        d = distance(q, k, ctx=ctx)
        kk = xp.broadcast_to(xp.astype(k, d.dtype)[..., None, :], d.shape)
        return xp.clip(kk, 0, 2 * self.max_distance)
