"""The sinusoidal encoder of Vaswani et al., "Attention Is All You Need" (2017), §3.5.

.. math::

    PE(p, 2i) = \\sin(p\\,\\omega_i),\\quad PE(p, 2i+1) = \\cos(p\\,\\omega_i),\\qquad
    \\omega_i = \\text{base}^{-2i/d},\\; i = 0 \\dots d/2 - 1

``layout="interleaved"`` is the paper's order ``[sin ω0, cos ω0, sin ω1, cos ω1, ...]``;
``layout="split"`` puts all sines first, then all cosines, with the *same* frequencies (as
Marian and Pegasus do). fairseq and tensor2tensor use the split order but also change the
denominator to ``d/2 - 1`` (``ω_i = base^{-i/(d/2-1)}``): that is a different table, not a
layout of this one.

For d = 8 and p = 2: ``[0.9093, -0.4161, 0.1987, 0.9801, 0.0200, 0.9998, 0.0020, 1.0000]``.

Because ``PE(p + k)`` is a block rotation of ``PE(p)`` (angle ``k·ω_i`` in block ``i``), the
encoding is *shift-linear* and ``PE(p+k)·PE(p) = Σ cos(k·ω_i)`` depends on ``k`` alone; the
conformance suite checks both laws.

This module is a plugin like any other: it is the ``sinusoidal`` entry point of the
``peregistry`` distribution.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._markers import hookimpl
from .._options import Option
from ..backends._base import Ctx
from ..kinds.base import AbsoluteEncoder
from ..rope._angles import Frequencies, angles

__all__ = ["Sinusoidal", "sinusoidal_frequencies"]


def sinusoidal_frequencies(dim: int, base: float) -> Frequencies:
    """``ω_i = base^(-2i/dim)`` for ``i = 0 … dim/2 - 1``, in float64 on the host."""
    omega = []
    for i in range(dim // 2):
        omega.append(base ** (-2.0 * i / dim))
    return Frequencies.from_omega(omega)


def _vaswani(enc: AbsoluteEncoder, inputs: Mapping[str, Any], params: Any) -> Any:
    """§3.5 in float64 NumPy, written apart from :meth:`Sinusoidal._encode` (its
    ``float64_reference``, which ``check_matches_reference`` holds every backend to)."""
    import numpy as np

    d, base = int(enc.options["dim"]), float(enc.options["base"])
    p = np.asarray(inputs["positions"], dtype=np.float64)[..., None]
    angle = p / np.power(base, np.arange(0, d, 2, dtype=np.float64) / d)
    if enc.options["layout"] == "split":
        return np.concatenate([np.sin(angle), np.cos(angle)], axis=-1)
    out = np.empty((*angle.shape[:-1], d))
    out[..., 0::2], out[..., 1::2] = np.sin(angle), np.cos(angle)
    return out


class Sinusoidal(AbsoluteEncoder):
    """Fixed sine/cosine encoding of Vaswani et al. 2017 (interleaved or split layout)."""

    name = "sinusoidal"
    continuous = True
    properties = frozenset({"shift-linear", "shift-invariant-dot"})
    __slots__ = ()
    _compile_hook_eagerly = True  # the hook reads no values: one program per shape on eager JAX

    dim = Option(int, allowed="a positive even integer", check=lambda d: d > 0 and d % 2 == 0,
                 doc="length of the encoding vector")
    base = Option(float, 10000.0, allowed="a finite number > 0 (and != 1)",
                  check=lambda b: b > 0 and b != 1.0, doc="wavelength base (10000 in the paper)")
    layout = Option(str, "interleaved", choices=("interleaved", "split"),
                    doc="'interleaved' = sin,cos,sin,cos...; 'split' = all sines, then cosines")
    float64_reference = _vaswani

    def _validate(self) -> None:
        # host constants of the options, made once (a trace never runs this code)
        self._cache["freqs"] = sinusoidal_frequencies(self._values["dim"], self._values["base"])

    @property
    def frequencies(self) -> Frequencies:
        """The ``dim/2`` angular frequencies ``ω_i`` (host constants, made at construction)."""
        return self._cache["freqs"]  # type: ignore[no-any-return]

    def _encode(self, positions: Any, *, params: Mapping[str, Any], ctx: Ctx) -> Any:
        xp = ctx.xp
        theta = angles(positions, self._cache["freqs"], ctx=ctx)
        sin, cos = xp.sin(theta), xp.cos(theta)
        if self._values["layout"] == "split":
            return xp.concat((sin, cos), axis=-1)
        # [s0 s1 ..], [c0 c1 ..] -> [s0 c0 s1 c1 ..]
        return xp.reshape(xp.stack((sin, cos), axis=-1), (*positions.shape, self._values["dim"]))


@hookimpl
def peregistry_encoders() -> list[type[AbsoluteEncoder]]:
    """This family's encoders, ``sinusoidal`` (hook ``peregistry_encoders``)."""
    return [Sinusoidal]
