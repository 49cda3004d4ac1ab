"""Broken rotary encoders: one-bug subclasses of :class:`RefRope` and :class:`RefMRope`."""

from __future__ import annotations

from typing import Any

import numpy as np

from peregistry.plugin import Ctx, Frequencies
from peregistry.rope import inv_freq, rotate_every_two, rotate_half

from .references import RefMRope, RefRope, _cache, _namespace_of, _omega


class _OwnApply(RefRope):
    """Base of mutants that apply the rotation themselves: ``x·cos + rot(x)·sin``."""

    def _rot(self, x: Any, xp: Any) -> Any:
        return rotate_half(x, xp=xp)

    def rotate(self, x: Any, positions: Any = None, *, offset: Any = 0, params: Any = None,
               seq_len: int | None = None) -> Any:
        ns = _namespace_of(self, x)
        if positions is None:
            positions = offset + ns.arange(x.shape[-2], device=x.device)
        cos, sin = self.cos_sin(positions, dtype=x.dtype)
        return x * cos + self._rot(x, ns) * sin


class MinusAngle(_OwnApply):
    """Rotates by −angle: ``rotate_half`` written as ``[x2, -x1]`` (sign error)."""

    name = "mut-minus-angle"

    def _rot(self, x: Any, xp: Any) -> Any:
        return -rotate_half(x, xp=xp)


class InterleavedApply(_OwnApply):
    """Tables in the half layout, rotation of the interleaved layout (layout mix-up)."""

    name = "mut-layout-mixup"

    def _rot(self, x: Any, xp: Any) -> Any:
        return rotate_every_two(x, xp=xp)


class MinusAngleOnePair(_OwnApply):
    """Its own ``rotate_half`` has a sign slip in the last pair: that pair turns by −angle."""

    name = "mut-minus-one-pair"

    def _rot(self, x: Any, xp: Any) -> Any:
        r = rotate_half(x, xp=xp)
        h = self.dim // 2
        sign = np.ones(self.dim)
        sign[[h - 1, self.dim - 1]] = -1.0
        return r * xp.asarray(sign, dtype=x.dtype, device=x.device)


class QuadraticPair(RefRope):
    """The last pair's angle is 1e-6·p² instead of p·ω: still a rotation, not relative."""

    name = "mut-quadratic-pair"

    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> tuple[Any, Any]:
        cos, sin = super()._half_cos_sin(positions, ctx=ctx, seq_len=seq_len)
        xp = ctx.xp
        p = xp.astype(positions, ctx.wide)
        bad = 1e-6 * p * p
        return (xp.concat((cos[..., :-1], xp.cos(bad)[..., None]), axis=-1),
                xp.concat((sin[..., :-1], xp.sin(bad)[..., None]), axis=-1))


class GrownTableDrift(RefRope):
    """Its own table is right for the first 1024 positions only: a table grown past them (or a
    scaling whose threshold is there) computes angles 1% too large."""

    name = "mut-grown-table-drift"

    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> tuple[Any, Any]:
        xp = ctx.xp
        p = xp.astype(positions, ctx.wide)
        return super()._half_cos_sin(xp.where(p >= 1024, p * 1.01, p), ctx=ctx, seq_len=seq_len)


class Float32RopeAngles(RefRope):
    """Computes ``p·ω`` in float32 (as many reference implementations do)."""

    name = "mut-rope-f32-angles"

    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> tuple[Any, Any]:
        xp = ctx.xp
        w = xp.asarray(list(_omega(self.dim).omega), dtype=xp.float32, device=ctx.device)
        a = xp.astype(positions, xp.float32)[..., None] * w
        return xp.astype(xp.cos(a), ctx.wide), xp.astype(xp.sin(a), ctx.wide)


class IgnoresOffset(RefRope):
    """``positions=None`` always starts at 0: the decode offset is dropped."""

    name = "mut-ignores-offset"

    def _default_positions(self, seq: int, offset: Any, *, ctx: Ctx) -> Any:
        return ctx.xp.arange(seq, device=ctx.device)


class StaleRopeCache(RefRope):
    """Caches cos/sin keyed by the positions' shape."""

    name = "mut-stale-rope"

    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> tuple[Any, Any]:
        key = ("cs", tuple(positions.shape), str(ctx.wide), str(ctx.device), ctx.backend.name)
        if key not in _cache(self):
            _cache(self)[key] = super()._half_cos_sin(positions, ctx=ctx, seq_len=seq_len)
        return _cache(self)[key]  # type: ignore[no-any-return]


class RopeIgnoresDtype(RefRope):
    """Returns float32 whatever dtype ``x`` has."""

    name = "mut-rope-dtype"

    def rotate(self, x: Any, positions: Any = None, **kw: Any) -> Any:
        out = super().rotate(x, positions, **kw)
        xp = _namespace_of(self, out)
        return xp.astype(out, xp.float32)


class RopeNumpyLeak(RefRope):
    """Computes its tables with ``np.cos``/``np.sin``."""

    name = "mut-rope-numpy"

    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> tuple[Any, Any]:
        a = np.asarray(positions, dtype=np.float64)[..., None] * inv_freq(self.dim)
        return np.cos(a), np.sin(a)


class RopeControlFlow(RefRope):
    """Validates positions with a Python ``if`` on an array value: breaks jit."""

    name = "mut-rope-control-flow"

    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> tuple[Any, Any]:
        if positions.ndim and float(ctx.xp.max(positions)) > 1e9:
            raise ValueError("positions too large")
        return super()._half_cos_sin(positions, ctx=ctx, seq_len=seq_len)


class RopeMutatesX(RefRope):
    """Writes the rotated values back into ``x`` (an "in-place" optimisation)."""

    name = "mut-rope-mutates"

    def rotate(self, x: Any, positions: Any = None, **kw: Any) -> Any:
        out = super().rotate(x, positions, **kw)
        x[...] = out
        return out


class RopeDeviceLeak(RefRope):
    """Builds its frequencies without ``device=``."""

    name = "mut-rope-device"

    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> tuple[Any, Any]:
        xp = ctx.xp
        w = xp.asarray(list(_omega(self.dim).omega), dtype=ctx.wide)
        a = xp.astype(positions, ctx.wide)[..., None] * w
        return xp.cos(a), xp.sin(a)


class MRopeOwnFrequencies(RefMRope):
    """Each axis restarts RoPE's frequency sequence (``inv_freq(2·section)``) instead of taking
    its share of one sequence: M-RoPE no longer reduces to RoPE on equal axes."""

    name = "mut-mrope-own-freqs"

    def _axis_frequencies(self, seq_len: int | None) -> tuple[Frequencies, ...]:
        return tuple(Frequencies.from_omega(inv_freq(2 * n)) for n in self._sections())
