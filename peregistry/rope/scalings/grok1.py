"""``grok1``: Grok-1's YaRN-like scaling with its ``extra_method`` modes (``yarn_log``,
``theta_scale``, ...), as vLLM's ``Grok1ScalingRotaryEmbedding``
(``vllm/model_executor/layers/rotary_embedding/grok1_scaling_rope.py``) computes it; Grok-1's
magnitude scale is computed there and never applied, so the attention factor is 1."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ..._options import Option
from .._funcs import inv_freq
from .base import RopeScaling, beta_options, check_beta_order, context_option, factor_option

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Grok1"]

#: Grok-1's ``extra_method`` values (vLLM ``_compute_inv_freq``).
METHODS = ("yarn_log", "yarn", "yarn_linear", "theta_scale", "original")


def _extrapolated_share(d: int, theta: float, orig: int, beta_fast: float,
                        beta_slow: float) -> np.ndarray[Any, Any]:
    """YaRN's ``γ_i = 1 - clip((i - lo)/(hi - lo), 0, 1)`` over the floored/ceiled correction
    range ``lo = ⌊r(beta_fast)⌋``, ``hi = ⌈r(beta_slow)⌉``, ``r(n) = d·ln(L/(2πn))/(2 ln θ)``."""
    import numpy as np

    def correction_dim(rotations: float) -> float:
        return (d * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high: float = min(math.ceil(correction_dim(beta_slow)), d - 1)
    if low == high:
        high += 0.001  # as vLLM: no singular ramp
    ramp = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    return np.asarray(1.0 - ramp, dtype=np.float64)


class Grok1(RopeScaling):
    """Grok-1's scaling (vLLM ``Grok1ScalingRotaryEmbedding``), with ``ω_i = θ^(-2i/d)``,
    ``s = factor``, ``L = original_max_position_embeddings`` and ``m_i = γ_i·extrapolation_factor``
    (``γ_i`` YaRN's extrapolated share, the correction range floored and ceiled)::

        original:          ω'_i = ω_i
        yarn, yarn_linear: ω'_i = (ω_i/s)·(1 - m_i) + ω_i·m_i
        yarn_log:          ω'_i = exp(ln ω_i·m_i + ln(ω_i/s)·(1 - m_i)) = ω_i·s^(m_i - 1)
        theta_scale:       ω'_i = θ'^(-2i/d),  θ' = θ^(ln(L·s/2π) / ln(L/2π))

    No attention factor: vLLM computes ``yarn_get_mscale(s)·attn_factor`` and leaves the lines
    that would apply it commented out. Source: vLLM
    ``vllm/model_executor/layers/rotary_embedding/grok1_scaling_rope.py`` (``_compute_inv_freq``,
    ``_compute_cos_sin_cache``); the model reads the config's top-level ``rope_type`` (the
    method), ``scaling_factor``, ``original_max_position_embeddings``, ``extrapolation_factor``,
    ``beta_fast``, ``beta_slow`` (``models/grok1.py``, ``get_rope_scaling``).
    """

    name = "grok1"
    summary = "Grok-1's YaRN-like scaling: extra_method yarn_log, theta_scale, ... (vLLM)"
    parameters: ClassVar[Mapping[str, Option]] = {
        "factor": factor_option("s: Grok-1's scaling_factor"),
        "original_max_position_embeddings": context_option(),
        "extra_method": Option(str, "yarn_log", choices=METHODS,
                               doc="Grok-1's rope_type: how the frequencies are scaled"),
        "extrapolation_factor": Option(float, 1.0, allowed="a finite number >= 0",
                                       check=lambda f: 0 <= f < math.inf,
                                       doc="multiplies YaRN's extrapolated share m_i"),
        **beta_options(),
    }

    def check(self, params: Mapping[str, Any], *, where: str, rotary_dim: int,
              theta: float) -> None:
        check_beta_order(params, where)
        if params["extra_method"] == "theta_scale" and \
                not params["original_max_position_embeddings"] > 2 * math.pi:
            raise ValueError(f"{where}: extra_method='theta_scale' needs "
                             f"original_max_position_embeddings > 2π (its exponent divides by "
                             f"ln(L/2π)), got {params['original_max_position_embeddings']!r}")

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        import numpy as np

        d, s, method = rotary_dim, float(params["factor"]), params["extra_method"]
        orig = int(params["original_max_position_embeddings"])
        omega = inv_freq(d, theta)
        if method == "original":
            return np.asarray(omega, dtype=np.float64)
        if method == "theta_scale":
            scaled = theta ** (math.log(orig * s / (2 * math.pi)) / math.log(orig / (2 * math.pi)))
            return np.asarray(inv_freq(d, scaled), dtype=np.float64)
        m = _extrapolated_share(d, theta, orig, params["beta_fast"],
                                params["beta_slow"]) * params["extrapolation_factor"]
        if method == "yarn_log":
            return np.asarray(omega * s ** (m - 1.0), dtype=np.float64)
        return np.asarray((omega / s) * (1.0 - m) + omega * m, dtype=np.float64)
