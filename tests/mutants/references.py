"""Correct reference plugins, one per kind, written from docs/plugins.md alone: each must pass
the full ``check_encoder`` on every backend. The mutants subclass them and break one thing."""

from __future__ import annotations

import math
from typing import Any

import peregistry as per
from peregistry.plugin import (
    Ctx,
    Frequencies,
    LearnedParams,
    MultiAxisRotary,
    RotaryEncoder,
    clip_distance,
    compute_dtype,
    cos_sin,
    distance,
    gather,
)


def positive(default: int) -> Any:
    return per.Option(int, default, allowed="a positive integer", check=lambda n: n > 0)


def even(default: int) -> Any:
    return per.Option(int, default, allowed="a positive even integer",
                      check=lambda d: d > 0 and d % 2 == 0)


def _omega(dim: int, base: float = 10000.0) -> Frequencies:
    return Frequencies.from_omega(base ** (-2 * i / dim) for i in range(dim // 2))


class RefSin(per.AbsoluteEncoder):
    """Reference absolute continuous encoder: sines then cosines (no properties declared)."""

    name = "corpus-sin"
    continuous = True
    dim = even(8)

    def _encode(self, positions: Any, *, params: Any, ctx: Ctx) -> Any:
        cos, sin = cos_sin(positions, _omega(self.dim), ctx=ctx)
        return ctx.xp.concat((sin, cos), axis=-1)


def check_in_range(owner: str, positions: Any, n: int, ctx: Ctx) -> None:
    """Raise for positions outside ``[0, n)`` where their values can be read (eagerly)."""
    xp = ctx.xp
    if ctx.backend.is_tracing(positions) or math.prod(positions.shape) == 0:
        return
    lo, hi = int(xp.min(positions)), int(xp.max(positions))
    if lo < 0 or hi >= n:
        raise ValueError(f"{owner}: positions in [{lo}, {hi}], but should be in [0, {n})")


class RefTable(per.AbsoluteEncoder):
    """Reference learned absolute table using the documented base ``Encoder.init``."""

    name = "corpus-table"
    num_positions = positive(16)
    dim = positive(4)

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"table": (self.num_positions, self.dim)}

    def position_range(self) -> tuple[int, int]:
        """A table of positions: the suite checks that positions past it raise."""
        return 0, self.num_positions

    def example_positions(self, rng: Any, shape: tuple[int, ...]) -> Any:
        return rng.integers(0, self.num_positions, size=shape)

    def _index(self, positions: Any, ctx: Ctx) -> Any:
        check_in_range(self.name, positions, self.num_positions, ctx)
        return positions

    def _encode(self, positions: Any, *, params: Any, ctx: Ctx) -> Any:
        return gather(params["table"], self._index(positions, ctx), axis=0, ctx=ctx)


def alibi_slopes(n: int) -> list[float]:
    p = 2 ** math.floor(math.log2(n))
    first = [2.0 ** (-8.0 * (i + 1) / p) for i in range(p)]
    return first + [2.0 ** (-4.0 * (2 * i + 1) / p) for i in range(n - p)]


class RefBias(per.BiasEncoder):
    """Reference fixed bias: ALiBi's -m_h·|k - q| (no properties declared)."""

    name = "corpus-bias"
    num_heads = positive(4)

    def _slopes(self, ctx: Ctx, dt: Any) -> Any:
        return ctx.xp.asarray(alibi_slopes(self.num_heads), dtype=dt, device=ctx.device)

    def _bias(self, q: Any, k: Any, *, params: Any, ctx: Ctx, dtype: Any) -> Any:
        xp = ctx.xp
        dt = compute_dtype(dtype, ctx)
        d = xp.astype(xp.abs(distance(q, k, ctx=ctx)), dt)          # (..., Q, K)
        return -self._slopes(ctx, dt)[:, None, None] * d[..., None, :, :]


class RefRelEmb(per.RelativeEmbedding):
    """Reference relative embedding: a sinusoid of k - q (Transformer-XL style)."""

    name = "corpus-relemb"
    dim = even(8)

    def _embed(self, q: Any, k: Any, *, params: Any, ctx: Ctx, dtype: Any) -> Any:
        cos, sin = cos_sin(distance(q, k, ctx=ctx), _omega(self.dim), ctx=ctx)
        return ctx.xp.concat((sin, cos), axis=-1)


class RefLearnedBias(LearnedParams, per.BiasEncoder):
    """Reference learned bias: one learned scalar per head and clipped distance k - q."""

    name = "corpus-learned-bias"
    num_heads = positive(2)
    max_distance = positive(8)

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"table": (self.num_heads, 2 * self.max_distance + 1)}

    def _index(self, q: Any, k: Any, ctx: Ctx) -> Any:
        m = self.max_distance
        return clip_distance(distance(q, k, ctx=ctx), -m, m, ctx=ctx) + m

    def _bias(self, q: Any, k: Any, *, params: Any, ctx: Ctx, dtype: Any) -> Any:
        out = gather(params["table"], self._index(q, k, ctx), axis=1, ctx=ctx)  # (H, ..., Q, K)
        return ctx.xp.moveaxis(out, 0, -3) if out.ndim > 3 else out


class RefRope(RotaryEncoder):
    """Reference rotary encoder: RoFormer frequencies through ``cos_sin``."""

    name = "corpus-rope"
    dim = even(16)

    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> tuple[Any, Any]:
        return cos_sin(positions, _omega(self.dim), ctx=ctx)


class RefMRope(MultiAxisRotary):
    """Reference M-RoPE: RoPE's frequencies shared out among 3 axes in contiguous bands."""

    name = "corpus-mrope"
    properties = frozenset({"multi-axis"})
    dim = even(16)
    num_axes = 3

    def _sections(self) -> tuple[int, ...]:
        half = self.dim // 2
        return (half - 2 * (half // 3), half // 3, half // 3)

    def _axis_frequencies(self, seq_len: int | None) -> tuple[Frequencies, ...]:
        omega = list(_omega(self.dim).omega)
        out, start = [], 0
        for n in self._sections():
            out.append(Frequencies.from_omega(omega[start:start + n]))
            start += n
        return tuple(out)

    def text_equivalent(self) -> RotaryEncoder:
        return RefRope(dim=self.dim)


def _cache(enc: per.Encoder) -> dict[Any, Any]:
    """The instance's cache of derived values (``Encoder._cache``), where the mutants keep
    what they should not."""
    return enc._cache


def _namespace_of(enc: per.Encoder, x: Any) -> Any:
    backend = enc.services.backend_of(x)
    assert backend is not None
    return backend.namespace()


REFERENCES: list[per.Encoder] = [RefSin(dim=8), RefTable(), RefBias(), RefRelEmb(),
                                  RefLearnedBias(), RefRope(), RefMRope()]
