"""Broken absolute encoders: each a one-bug subclass of :class:`RefSin` or :class:`RefTable`."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from peregistry.plugin import Ctx, cos_sin

from .references import RefSin, RefTable, _cache, _namespace_of, _omega


class StaleSinCache(RefSin):
    """Caches its output on the instance keyed by shape (and dtype/device): new positions of a
    seen shape get the old answer."""

    name = "mut-stale-sin"

    def _encode(self, positions: Any, *, params: Any, ctx: Ctx) -> Any:
        key = ("out", tuple(positions.shape), str(ctx.wide), str(ctx.device), ctx.backend.name)
        if key not in _cache(self):
            _cache(self)[key] = super()._encode(positions, params=params, ctx=ctx)
        return _cache(self)[key]


class SinForCos(RefSin):
    """The cosine half is a second sine (a copy-paste slip), and no properties are declared."""

    name = "mut-sin-for-cos"

    def _encode(self, positions: Any, *, params: Any, ctx: Ctx) -> Any:
        _, sin = cos_sin(positions, _omega(self.dim), ctx=ctx)
        return ctx.xp.concat((sin, sin), axis=-1)


class Float32Angles(RefSin):
    """Computes ``p·ω`` in float32 whatever the backend offers."""

    name = "mut-f32-angles"

    def _encode(self, positions: Any, *, params: Any, ctx: Ctx) -> Any:
        xp = ctx.xp
        w = xp.asarray(list(_omega(self.dim).omega), dtype=xp.float32, device=ctx.device)
        a = xp.astype(positions, xp.float32)[..., None] * w
        return xp.astype(xp.concat((xp.sin(a), xp.cos(a)), axis=-1), ctx.wide)


class IgnoresDtype(RefSin):
    """Always returns float32, whatever dtype was asked for."""

    name = "mut-ignores-dtype"

    def encode(self, positions: Any, *, params: Any = None, dtype: Any = None) -> Any:
        out = super().encode(positions, params=params)
        xp = _namespace_of(self, out)
        return xp.astype(out, xp.float32)


class FlattensBatch(RefSin):
    """Returns ``(N, dim)`` for batched positions instead of ``(*positions.shape, dim)``."""

    name = "mut-flattens"

    def _encode(self, positions: Any, *, params: Any, ctx: Ctx) -> Any:
        out = super()._encode(positions, params=params, ctx=ctx)
        return ctx.xp.reshape(out, (-1, self.dim))


class NumpyLeak(RefSin):
    """Computes with ``np.*`` on whatever positions come (a NumPy habit)."""

    name = "mut-numpy-leak"

    def _encode(self, positions: Any, *, params: Any, ctx: Ctx) -> Any:
        p = np.asarray(positions, dtype=np.float64)[..., None]
        a = p * np.asarray(_omega(self.dim).omega)
        return np.concatenate((np.sin(a), np.cos(a)), axis=-1)


class DeviceLeak(RefSin):
    """Builds its frequencies without ``device=``: on the default device, not the input's."""

    name = "mut-device-leak"

    def _encode(self, positions: Any, *, params: Any, ctx: Ctx) -> Any:
        xp = ctx.xp
        w = xp.asarray(list(_omega(self.dim).omega), dtype=ctx.wide)
        a = xp.astype(positions, ctx.wide)[..., None] * w
        return xp.concat((xp.sin(a), xp.cos(a)), axis=-1)


class MutatesPositions(RefSin):
    """Shifts its positions in place (a "normalisation") after computing the right result."""

    name = "mut-mutates-positions"

    def encode(self, positions: Any, *, params: Any = None, dtype: Any = None) -> Any:
        out = super().encode(positions, params=params, dtype=dtype)
        positions[...] = positions + 1
        return out


_calls = itertools.count()


class Nondeterministic(RefSin):
    """Every other call is off by a few ulps (a racy reduction, a stray RNG)."""

    name = "mut-nondeterministic"

    def _encode(self, positions: Any, *, params: Any, ctx: Ctx) -> Any:
        out = super()._encode(positions, params=params, ctx=ctx)
        return out * (1.0 + 1e-6 * (next(_calls) % 2))


class ControlFlowOnValues(RefSin):
    """Validates positions with a Python ``if`` on an array value: breaks jit."""

    name = "mut-control-flow"

    def _encode(self, positions: Any, *, params: Any, ctx: Ctx) -> Any:
        if positions.ndim and float(ctx.xp.max(positions)) > 1e9:
            raise ValueError("positions too large")
        return super()._encode(positions, params=params, ctx=ctx)


# -- learned absolute tables -----------------------------------------------------------------------
class WrapsPositions(RefTable):
    """Wraps out-of-range positions (``p % n``) instead of raising."""

    name = "mut-wraps"

    def _index(self, positions: Any, ctx: Ctx) -> Any:
        return positions % self.num_positions


class ClampsPositions(RefTable):
    """Clamps out-of-range positions to the last row instead of raising."""

    name = "mut-clamps"

    def _index(self, positions: Any, ctx: Ctx) -> Any:
        return ctx.xp.clip(positions, 0, self.num_positions - 1)


class InitIgnoresSeed(RefTable):
    """``init`` draws with seed 0 whatever seed is asked for."""

    name = "mut-init-seed"

    def init(self, xp: Any, *, seed: int = 0, dtype: Any = None, device: Any = None) -> Any:
        return super().init(xp, seed=0, dtype=dtype, device=device)


class InitIgnoresDtype(RefTable):
    """``init`` returns float32 params whatever dtype is asked for."""

    name = "mut-init-dtype"

    def init(self, xp: Any, *, seed: int = 0, dtype: Any = None, device: Any = None) -> Any:
        return super().init(xp, seed=seed, dtype=None, device=device)


class InitIgnoresDevice(RefTable):
    """``init`` puts params on the default device whatever device is asked for."""

    name = "mut-init-device"

    def init(self, xp: Any, *, seed: int = 0, dtype: Any = None, device: Any = None) -> Any:
        return super().init(xp, seed=seed, dtype=dtype, device=None)


class InitIgnoresNamespace(RefTable):
    """``init`` returns NumPy params whatever namespace is asked for."""

    name = "mut-init-namespace"

    def init(self, xp: Any, *, seed: int = 0, dtype: Any = None, device: Any = None) -> Any:
        p = super().init(xp, seed=seed, dtype=dtype, device=device)
        backend = self.services.backend_of_namespace(xp)
        return {k: np.asarray(backend.to_numpy(v)) for k, v in p.items()}


class DetachedTable(RefTable):
    """Converts the table through NumPy: values right, gradients gone."""

    name = "mut-detached"

    def _encode(self, positions: Any, *, params: Any, ctx: Ctx) -> Any:
        table = params["table"]
        host = np.asarray(ctx.backend.to_numpy(table))
        table = ctx.backend.from_numpy(host, dtype=table.dtype, device=ctx.device)
        return super()._encode(positions, params={"table": table}, ctx=ctx)


class StaleTableCache(RefTable):
    """Keeps the first params it saw (keyed by shape): updated params are ignored."""

    name = "mut-stale-params"

    def _encode(self, positions: Any, *, params: Any, ctx: Ctx) -> Any:
        t = params["table"]
        key = ("table", tuple(t.shape), str(t.dtype), ctx.backend.name)
        table = _cache(self).setdefault(key, t)
        return super()._encode(positions, params={"table": table}, ctx=ctx)


class StaleTableOutput(RefTable):
    """Caches its output keyed by the positions' shape: new positions of a seen shape get the
    old rows."""

    name = "mut-stale-table-out"

    def _encode(self, positions: Any, *, params: Any, ctx: Ctx) -> Any:
        t = params["table"]
        key = ("out", tuple(positions.shape), str(t.dtype), ctx.backend.name)
        if key not in _cache(self):
            _cache(self)[key] = super()._encode(positions, params=params, ctx=ctx)
        return _cache(self)[key]
