"""Accurate ``cos(p·ω)`` and ``sin(p·ω)`` for positions ``p`` and frequencies ``ω``.

Every continuous encoder (sinusoidal, Transformer-XL, rotary, M-RoPE) needs the angles
``θ = p·ω``. Frequencies are computed once per encoder on the host in float64 (NumPy), where
``base ** (-2i/d)`` is correct to an ulp. The angles are then computed in the caller's framework:

* **float64 available** (NumPy, PyTorch, array-api-strict, JAX with x64): ``θ = p·ω`` in float64.
  At ``p = 2**20`` the error is ~1e-10.
* **float32 only** (JAX without x64, devices without float64): the naive ``float32(p) * ω`` is
  off by ``p·ulp(ω)`` ≈ 0.06 rad at ``p = 2**20``. Instead we work in *turns*
  ``t = p·ω/2π`` with ``c = ω/2π`` split on the host into ``c1 + c2 + c3`` (11, 11 and 24
  significant bits), and ``p`` split into ``ph + pm + pf`` (multiple of 4096, integer below 4096,
  fraction; exact splits). The products ``ph·c1, ph·c2, pm·c1, pm·c2`` then have at most
  23 significant bits and are *exact* in float32, so their fractional parts are exact too; the
  remaining terms are small. Summing fractional parts gives ``t mod 1`` to ~1e-7 turns, and
  ``θ = 2π·frac(t) ∈ [-π, π]`` is where float32 sin/cos are accurate. The angle error stays below
  1e-6 rad for ``|p| < 2**24`` (where float32 still holds integer positions exactly).

This is the classic Cody–Waite idea of exact range reduction by splitting constants, applied to
the multiplication instead of the reduction constant.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..backends._base import Ctx

__all__ = ["Frequencies", "cos_sin"]

_POS_SPLIT = 4096.0  # 2**12: ph has <= 12 significant bits below 2**24, pm < 2**12
_TWO_PI_F32 = 6.2831854820251465  # float32(2π); θ = 2π·frac(t) is computed in float32


def _round_bits(c: float, bits: int) -> float:
    """``c`` rounded to ``bits`` significant bits (pure Python: traceable by torch.compile)."""
    if c == 0.0:
        return 0.0
    m, e = math.frexp(c)
    return math.ldexp(round(m * 2.0**bits), e - bits)


@dataclass(frozen=True)
class Frequencies:
    """Host-side frequency constants of one encoder: ``omega`` in float64 and its split in
    turns for float32-only backends. Built once per encoder, shared by every call.

    Computed with Python floats (IEEE float64) rather than NumPy, so that building them inside
    a traced function (``torch.compile``, ``jax.jit``) is plain constant folding."""

    omega: tuple[float, ...]
    c1: tuple[float, ...]
    c2: tuple[float, ...]
    c3: tuple[float, ...]
    c: tuple[float, ...]

    @classmethod
    def from_omega(cls, omega: Iterable[float]) -> Frequencies:
        """The constants of frequencies ``omega`` (radians per position): ``c = ω/2π`` in turns,
        rounded to 24 significant bits, and its exact split ``c1 + c2 + c3`` (11, 11 and 24
        bits) used for the float32 range reduction described in this module's docstring."""
        w: list[float] = []
        c1: list[float] = []
        c2: list[float] = []
        c3: list[float] = []
        c: list[float] = []
        for v in omega:
            w.append(float(v))
            turns = w[-1] / (2 * math.pi)
            c1.append(_round_bits(turns, 11))
            c2.append(_round_bits(turns - c1[-1], 11))
            c3.append(_round_bits(turns - c1[-1] - c2[-1], 24))
            c.append(_round_bits(turns, 24))
        return cls(omega=tuple(w), c1=tuple(c1), c2=tuple(c2), c3=tuple(c3), c=tuple(c))

    def __len__(self) -> int:
        return len(self.omega)

    def subset(self, indices: Iterable[int]) -> Frequencies:
        """The frequencies at ``indices`` (same constants, so the same angles to the bit)."""
        idx = tuple(indices)
        return Frequencies(*(tuple(getattr(self, f)[i] for i in idx)
                             for f in ("omega", "c1", "c2", "c3", "c")))


def angles(positions: Any, freqs: Frequencies, *, ctx: Ctx, per_pair: bool = False,
           omega: Any = None) -> Any:
    """``θ = p·ω`` of shape ``(*positions.shape, len(freqs))`` in float64 (reduced to
    ``[-π, π]`` on float32-only backends, where the unreduced angle cannot be represented).
    With ``per_pair=True`` the last axis of ``positions`` is already one position per
    frequency (``θ_i = p_i·ω_i``, of ``positions.shape``): every angle is computed by the same
    operations as without it, so to the same bits. ``omega``: ``freqs.omega`` already as an
    array of ``ctx.wide`` (used with float64)."""
    xp = ctx.xp
    if ctx.wide != getattr(xp, "float64", None):  # (not ctx.has_float64)
        return _reduced_angles_f32(positions, freqs, ctx=ctx, per_pair=per_pair)
    p = positions if positions.dtype == ctx.wide else xp.astype(positions, ctx.wide)
    if omega is None:  # (ctx.constant, inline)
        omega = xp.asarray(list(freqs.omega), dtype=ctx.wide, device=ctx.device)
    return (p if per_pair else p[..., None]) * omega


def cos_sin(positions: Any, freqs: Frequencies, *, ctx: Ctx, per_pair: bool = False,
            omega: Any = None) -> tuple[Any, Any]:
    """``(cos θ, sin θ)`` with ``θ = p·ω``, each ``(*positions.shape, len(freqs))`` in
    ``ctx.wide``; accurate to ~1e-6 absolute for ``|p| < 2**24`` on every backend.
    ``per_pair`` and ``omega`` as for :func:`angles`."""
    theta = angles(positions, freqs, ctx=ctx, per_pair=per_pair, omega=omega)
    return ctx.xp.cos(theta), ctx.xp.sin(theta)


def _reduced_angles_f32(positions: Any, freqs: Frequencies, *, ctx: Ctx,
                        per_pair: bool) -> Any:
    xp = ctx.xp
    p = xp.astype(positions, ctx.wide)
    if not per_pair:
        p = p[..., None]
    ph = xp.floor(p / _POS_SPLIT) * _POS_SPLIT  # exact: power-of-two scaling and floor
    rest = p - ph  # exact, in [0, 4096)
    pm = xp.floor(rest)
    pf = rest - pm  # exact fraction in [0, 1)
    c1, c2 = ctx.constant(list(freqs.c1)), ctx.constant(list(freqs.c2))

    def frac(t: Any) -> Any:  # t - round(t) is exact in floating point
        return t - xp.round(t)

    t = frac(ph * c1) + frac(ph * c2) + frac(pm * c1) + frac(pm * c2)
    t = frac(t) + (ph + pm) * ctx.constant(list(freqs.c3)) + pf * ctx.constant(list(freqs.c))
    return frac(t) * _TWO_PI_F32
