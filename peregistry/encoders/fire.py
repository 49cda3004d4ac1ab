"""FIRE: functional interpolation for relative positions (Li et al. 2023, "Functional
Interpolation for Relative Positions Improves Long Context Transformers", arXiv:2310.04418,
eq. 6 and the PyTorch listing of its appendix)::

    bias[..., h, i, j] = f_θ(ψ(i - j) / ψ(max(L, i)))_h,    ψ(x) = log(|c·x| + 1)

with ``i`` the query's and ``j`` the key's position, ``f_θ`` a two-layer ReLU MLP from one input
to ``num_heads`` outputs (``mlp_width`` hidden units), ``c`` learned, and the threshold
``L = |L_multiplier · init_L|`` of progressive interpolation learned through its multiplier;
the denominator carries ``+ eps``. ``ψ`` of ``|c·(i - j)|`` makes the bias of a key after the
query (which causal attention masks) that of the same distance before it. The normalizer depends
on ``i``, so FIRE is not a function of ``j - i`` alone (exempt from that law). Params
``w1 (mlp_width, 1)``, ``b1 (mlp_width,)``, ``w2 (num_heads, mlp_width)``, ``b2 (num_heads,)``
(the shapes of ``torch.nn.Linear``), ``c ()`` and ``L_multiplier ()``; fresh ones draw the
weights with the variances of ``nn.Linear``'s default init and set ``c = init_c``,
``L_multiplier = 1``. Registered by the ``relative`` entry point.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from .._markers import hookimpl
from .._options import MAX_DIM, Option
from ..backends._base import Ctx
from ..kinds.base import BiasEncoder, Encoder
from .learned_params import LearnedParams
from .pairs import compute_dtype, distance

__all__ = ["Fire"]


class Fire(LearnedParams, BiasEncoder):
    """FIRE attention bias: a learned MLP of progressively interpolated distances (Li et al. 2023).

    ``MLP(ψ(i - j) / ψ(max(L, i)))`` per head, with ``ψ(x) = log(|c·x| + 1)``, learned ``c``,
    threshold ``L`` and MLP (see the module docstring)."""

    name = "fire"
    __slots__ = ()
    exempt_checks = MappingProxyType({
        "check_relative_toeplitz": "the normalizer ψ(max(L, i)) depends on the query's position "
                                   "i (progressive interpolation), so the bias is not a function "
                                   "of k - q alone (Li et al. 2023, eq. 6)"})
    _compile_hook_eagerly = True  # the hook reads no values: one program per shape on eager JAX

    num_heads = Option(int, allowed=f"an integer in 1..{MAX_DIM}",
                       check=lambda n: 0 < n <= MAX_DIM, doc="attention heads", example=8)
    mlp_width = Option(int, 32, allowed=f"an integer in 1..{MAX_DIM}",
                       check=lambda n: 0 < n <= MAX_DIM, doc="hidden units of f_θ (paper: 32)")
    init_c = Option(float, 0.1, allowed="a finite number > 0", check=lambda c: c > 0,
                    doc="fresh value of c in ψ(x) = log(|c·x| + 1) (paper: 0.1)")
    init_L = Option(float, 512.0, allowed="a finite number > 0", check=lambda v: v > 0,
                    doc="threshold L of progressive interpolation, times the learned "
                        "L_multiplier (paper: 512)")
    eps = Option(float, 1e-6, allowed="a finite number >= 0", check=lambda e: e >= 0,
                 doc="added to the normalizer ψ(max(L, i)) (paper: 1e-6)")

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        h, w = int(self._values["num_heads"]), int(self._values["mlp_width"])
        return {"w1": (w, 1), "b1": (w,), "w2": (h, w), "b2": (h,), "c": (),
                "L_multiplier": ()}

    def init_std(self, name: str) -> float:
        # nn.Linear's U(-1/sqrt(fan_in), 1/sqrt(fan_in)) has variance 1/(3·fan_in)
        if name in ("c", "L_multiplier"):
            return 0.0  # constants (init_mean)
        width = int(self._values["mlp_width"])
        fan_in = {"w1": 1, "b1": 1, "w2": width, "b2": width}[name]
        return 1.0 / math.sqrt(3.0 * fan_in)

    def init_mean(self, name: str) -> float:
        if name in ("w1", "b1", "w2", "b2"):
            return 0.0
        return {"c": float(self._values["init_c"]), "L_multiplier": 1.0}[name]

    def _bias(self, q: Any, k: Any, *, params: Mapping[str, Any], ctx: Ctx, dtype: Any) -> Any:
        xp = ctx.xp
        cdt = compute_dtype(dtype, ctx)
        p = {key: v if v.dtype == cdt else xp.astype(v, cdt) for key, v in params.items()}
        # |i - j| in integers first (exact at any position), the query's position on rows
        d = xp.astype(xp.abs(distance(q, k, ctx=ctx)), cdt)  # (*b, Q, K)
        qf = xp.astype(q, cdt)[..., :, None]  # (*b, Q, 1)
        c = xp.abs(p["c"])
        threshold = xp.abs(p["L_multiplier"] * float(self._values["init_L"]))
        # ψ(i - j) / (ψ(max(L, i)) + eps): (*b, Q, K)
        x = xp.log1p(c * d) / (
            xp.log1p(c * xp.abs(xp.maximum(qf, threshold))) + float(self._values["eps"]))
        hidden = xp.maximum(x[..., None] * p["w1"][:, 0] + p["b1"], xp.zeros((), dtype=cdt, device=ctx.device))
        out = hidden @ xp.matrix_transpose(p["w2"]) + p["b2"]  # (*b, Q, K, H)
        return xp.moveaxis(out, -1, -3)  # (*b, H, Q, K)


@hookimpl
def peregistry_encoders() -> list[type[Encoder]]:
    """The ``fire`` encoder, registered by its own entry point."""
    return [Fire]
