"""``deepseek-yarn``: YaRN as vLLM's ``DeepseekScalingRotaryEmbedding`` computes it for the
``deepseek_yarn`` and ``deepseek_llama_scaling`` branches of ``get_rope`` and, with ``mscale`` and
``mscale_all_dim`` 0, for DeepSeek-V4's ``DeepseekV4ScalingRotaryEmbedding``: the attention
factor is vLLM's ratio, whatever coefficients are zero, where transformers' ``yarn`` falls back to
``0.1·ln s + 1`` unless both are non-zero."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ..._options import Option
from .._funcs import inv_freq
from .base import RopeScaling, beta_options, check_beta_order, context_option, factor_option
from .grok1 import _extrapolated_share
from .yarn import _yarn_mscale as _m

if TYPE_CHECKING:
    import numpy as np

__all__ = ["DeepseekYarn"]


class DeepseekYarn(RopeScaling):
    """YaRN as vLLM's ``DeepseekScalingRotaryEmbedding``, with ``ω_i = θ^(-2i/d)``,
    ``s = factor``, ``L = original_max_position_embeddings``, ``m_i = γ_i·extrapolation_factor``
    (``γ_i`` YaRN's extrapolated share, the correction range floored and ceiled) and
    ``m(s, k) = 0.1·k·ln s + 1`` (1 for ``s <= 1``)::

        ω'_i = (ω_i/s)·(1 - m_i) + ω_i·m_i
        attention factor (on cos and sin) = m(s, mscale) / m(s, mscale_all_dim) · attn_factor

    With the defaults ``mscale=1``, ``mscale_all_dim=0`` that is ``0.1·ln s + 1``; DeepSeek-V4
    passes ``mscale = mscale_all_dim = 0`` (factor ``attn_factor``). The softmax scale of a
    DeepSeek model is multiplied by ``m(s, mscale_all_dim)²`` on the ``deepseek_yarn`` branch
    (``apply_yarn_scaling`` true, the default) and left alone on ``deepseek_llama_scaling``
    (false), which builds the same tables. Sources: vLLM
    ``vllm/model_executor/layers/rotary_embedding/deepseek_scaling_rope.py`` at 7bc8d408
    (``_compute_inv_freq``, ``_compute_cos_sin_cache``, ``yarn_get_mscale``),
    ``DeepseekV4ScalingRotaryEmbedding`` in the same file at 96e9b374 (Whamp/vllm),
    ``models/deepseek_v2.py`` (``apply_yarn_scaling`` selects the branch and the softmax scale).
    """

    name = "deepseek-yarn"
    summary = "YaRN as vLLM's DeepseekScalingRotaryEmbedding (deepseek_yarn, DeepSeek-V4)"
    parameters: ClassVar[Mapping[str, Option]] = {
        "factor": factor_option(),
        "original_max_position_embeddings": context_option(),
        **beta_options(),
        "mscale": Option(float, 1.0, allowed="a finite number >= 0",
                         check=lambda m: 0 <= m < math.inf,
                         doc="numerator coefficient k of m(s, k) (vLLM default 1)"),
        "mscale_all_dim": Option(float, 0.0, allowed="a finite number >= 0",
                                 check=lambda m: 0 <= m < math.inf,
                                 doc="denominator coefficient of the attention factor and of "
                                     "the softmax scale's m(s, k)² (vLLM default 0)"),
        "attn_factor": Option(float, 1.0, allowed="a finite number > 0",
                              check=lambda a: 0 < a < math.inf,
                              doc="multiplies the attention factor"),
        "extrapolation_factor": Option(float, 1.0, allowed="a finite number >= 0",
                                       check=lambda f: 0 <= f < math.inf,
                                       doc="multiplies YaRN's extrapolated share m_i"),
        "apply_yarn_scaling": Option(bool, True,
                                     doc="True: the deepseek_yarn branch (softmax scale times "
                                         "m(s, mscale_all_dim)²); False: deepseek_llama_scaling"),
    }

    def check(self, params: Mapping[str, Any], *, where: str, rotary_dim: int,
              theta: float) -> None:
        check_beta_order(params, where)

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        import numpy as np

        d, s = rotary_dim, float(params["factor"])
        m = _extrapolated_share(d, theta, int(params["original_max_position_embeddings"]),
                                params["beta_fast"], params["beta_slow"]) \
            * params["extrapolation_factor"]
        omega = inv_freq(d, theta)
        return np.asarray((omega / s) * (1.0 - m) + omega * m, dtype=np.float64)

    def attention_factor(self, rotary_dim: int, theta: float, params: Mapping[str, Any]) -> float:
        s = float(params["factor"])
        return float(_m(s, params["mscale"]) / _m(s, params["mscale_all_dim"])
                     * params["attn_factor"])

    def softmax_scale_factor(self, params: Mapping[str, Any]) -> float:
        if not params["apply_yarn_scaling"]:
            return 1.0
        return float(_m(float(params["factor"]), params["mscale_all_dim"]) ** 2)
