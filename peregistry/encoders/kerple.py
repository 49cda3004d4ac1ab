"""KERPLE: a learned, conditionally positive definite kernel of the distance as an attention
bias (Chi et al. 2022, "KERPLE: Kernelized Relative Positional Embedding for Length
Extrapolation", eqs. 5-6)::

    log:    bias[..., h, i, j] = -r1_h · log(1 + r2_h · |k_j - q_i|)
    power:  bias[..., h, i, j] = -r1_h · |k_j - q_i| ** r2_h          (0 < r2 <= 2)

The paper constrains ``r1, r2 > 0`` (and ``r2 <= 2`` for power) and its code clamps the
parameters after every update; here the parameters are unconstrained and the constraint is in
the formula: ``r1 = softplus(scale)``, ``r2 = softplus(rate)`` (log) or ``2·sigmoid(power)``
(power), so any gradient step keeps a valid kernel (softplus grows linearly, so a large step
cannot overflow as an exponential would). Fresh parameters are near 0: ``r1, r2 ≈ ln 2``
(log), ``r2 ≈ 1`` (power). Registered by the ``relative`` entry point.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._markers import hookimpl
from .._options import MAX_DIM, Option
from ..backends._base import Ctx
from ..kinds.base import BiasEncoder, Encoder
from .learned_params import LearnedParams
from .pairs import compute_dtype, distance

__all__ = ["Kerple"]


def _softplus(x: Any, xp: Any) -> Any:
    """``log(1 + exp(x))`` without overflow: ``max(x, 0) + log1p(exp(-|x|))``."""
    return xp.maximum(x, xp.zeros_like(x)) + xp.log1p(xp.exp(-xp.abs(x)))


class Kerple(LearnedParams, BiasEncoder):
    """KERPLE attention bias: learned log or power kernels of the distance (Chi et al. 2022).

    ``-r1·log(1 + r2·|k - q|)`` (``variant="log"``) or ``-r1·|k - q|^r2`` (``"power"``), learned per
    head; params ``scale`` and ``rate``/``power``, ``(num_heads,)`` each, through softplus/sigmoid
    (see the module docstring)."""

    name = "kerple"
    properties = frozenset({"relative"})
    __slots__ = ()
    _compile_hook_eagerly = True  # the hook reads no values: one program per shape on eager JAX

    num_heads = Option(int, allowed=f"an integer in 1..{MAX_DIM}",
                       check=lambda n: 0 < n <= MAX_DIM, doc="attention heads", example=8)
    variant = Option(str, "log", choices=("log", "power"),
                     doc="'log': -r1·log(1 + r2·d); 'power': -r1·d^r2 (the paper's eq. 5, 6)")

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        h = int(self._values["num_heads"])
        second = "rate" if self._values["variant"] == "log" else "power"
        return {"scale": (h,), second: (h,)}

    def _bias(self, q: Any, k: Any, *, params: Mapping[str, Any], ctx: Ctx, dtype: Any) -> Any:
        xp = ctx.xp
        cdt = compute_dtype(dtype, ctx)
        d = xp.astype(xp.abs(distance(q, k, ctx=ctx)), cdt)[..., None, :, :]  # (*b, 1, Q, K)

        def per_head(key: str) -> Any:
            p = params[key]
            return xp.reshape(p if p.dtype == cdt else xp.astype(p, cdt), (-1, 1, 1))

        r1 = _softplus(per_head("scale"), xp)
        if self._values["variant"] == "log":
            return -r1 * xp.log1p(_softplus(per_head("rate"), xp) * d)
        z = per_head("power")
        e = xp.exp(-xp.abs(z))  # in (0, 1]: no overflow for any z
        r2 = 2.0 * xp.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
        # d**r2 with d = 0 written out: the gradient of 0**r2 in r2 is 0·log(0), NaN
        positive = d > 0
        powered = xp.pow(xp.where(positive, d, xp.ones_like(d)), r2)
        return -r1 * xp.where(positive, powered, xp.zeros_like(powered))


@hookimpl
def peregistry_encoders() -> list[type[Encoder]]:
    """The ``kerple`` encoder, registered by its own entry point."""
    return [Kerple]
