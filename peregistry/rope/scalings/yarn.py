"""``yarn``: YaRN (Peng et al. 2023, arXiv:2309.00071) as Hugging Face's
``_compute_yarn_parameters``: a ramp between interpolated and kept frequencies, and an attention
factor on ``cos``/``sin`` (with DeepSeek's ``mscale``/``mscale_all_dim`` ratio)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ..._options import Option
from .._funcs import inv_freq
from .base import RopeScaling, beta_options, check_beta_order, context_option, factor_option

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Yarn"]


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's ``m(s, k) = 0.1·k·ln(s) + 1`` (1 for ``s <= 1``)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _derived(doc: str, allowed: str, check: Any) -> Option:
    return Option(float, None, allowed=allowed, check=check, nullable=True, doc=doc)


class Yarn(RopeScaling):
    """YaRN (Peng et al. 2023, arXiv:2309.00071), as Hugging Face ``_compute_yarn_parameters``.

    With ``r(n) = d·ln(L/(2π·n)) / (2 ln θ)`` (the dimension that makes ``n`` rotations over
    ``L`` positions), ``lo = r(beta_fast)``, ``hi = r(beta_slow)`` (floored/ceiled when
    ``truncate``), clipped to ``[0, d-1]``, and ``γ_i = 1 - clip((i - lo)/(hi - lo), 0, 1)``:
    ``ω'_i = (ω_i/factor)·(1 - γ_i) + ω_i·γ_i`` (high frequencies kept, low ones interpolated).

    Attention factor: ``attention_factor`` if given; else, when both ``mscale`` and
    ``mscale_all_dim`` are non-zero (DeepSeek-V2/V3), ``m(factor, mscale)/m(factor,
    mscale_all_dim)``; else ``m(factor, 1)``, where ``m(s, k) = 0.1·k·ln(s) + 1`` (1 if s <= 1).
    """

    name = "yarn"
    summary = "YaRN ramp between interpolation and extrapolation (Peng et al. 2023)"
    parameters: ClassVar[Mapping[str, Option]] = {
        "factor": factor_option(),
        "original_max_position_embeddings": context_option(),
        **beta_options(),
        "mscale": _derived("DeepSeek: numerator coefficient of the attention factor",
                           "None or a number >= 0", lambda m: m >= 0),
        "mscale_all_dim": _derived("DeepSeek: denominator coefficient of the attention factor",
                                   "None or a number >= 0", lambda m: m >= 0),
        "attention_factor": _derived("factor on cos/sin (None: derived from factor and mscale)",
                                     "None or a number > 0", lambda a: a > 0),
        "truncate": Option(bool, True, doc="floor/ceil the correction range (gpt-oss: False)"),
    }

    def check(self, params: Mapping[str, Any], *, where: str, rotary_dim: int,
              theta: float) -> None:
        check_beta_order(params, where)

    def attention_factor(self, rotary_dim: int, theta: float, params: Mapping[str, Any]) -> float:
        if params["attention_factor"] is not None:
            return float(params["attention_factor"])
        factor, mscale, mscale_all = params["factor"], params["mscale"], params["mscale_all_dim"]
        if mscale and mscale_all:  # Hugging Face tests truthiness: 0 and None mean "absent"
            return float(_yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all))
        return _yarn_mscale(factor)

    def softmax_scale_factor(self, params: Mapping[str, Any]) -> float:
        """DeepSeek-V2/V3 multiply the softmax scale by ``m(factor, mscale_all_dim)²`` when
        ``mscale_all_dim`` is non-zero (transformers' ``yarn_apply_mscale``); 1.0 otherwise."""
        mscale_all = params["mscale_all_dim"]
        return float(_yarn_mscale(params["factor"], mscale_all) ** 2) if mscale_all else 1.0

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        import numpy as np

        d = rotary_dim
        orig = params["original_max_position_embeddings"]

        def correction_dim(rotations: float) -> float:
            return (d * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(theta))

        low = correction_dim(params["beta_fast"])
        high = correction_dim(params["beta_slow"])
        if params["truncate"]:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, d - 1)
        if low == high:
            high += 0.001  # Hugging Face: prevent a singular ramp
        ramp = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
        extrapolation = 1.0 - ramp
        omega = inv_freq(d, theta)
        return np.asarray((omega / params["factor"]) * (1.0 - extrapolation)
                          + omega * extrapolation, dtype=np.float64)
