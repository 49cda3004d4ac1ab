"""``ntk``: fixed NTK-aware scaling, and its "mixed" variant with ``mixed_b`` (Su 2023,
https://kexue.fm/archives/9706), as vLLM's ``NTKScalingRotaryEmbedding``
(``vllm/model_executor/layers/rotary_embedding/ntk_scaling_rope.py``) computes it for
``rope_type == "ntk"``; transformers has no such type."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ..._options import Option
from .._funcs import inv_freq
from .base import RopeScaling, factor_option

if TYPE_CHECKING:
    import numpy as np

__all__ = ["NTK"]


class NTK(RopeScaling):
    """Fixed NTK-aware scaling and Su's mixed variant (vLLM ``NTKScalingRotaryEmbedding``).

    With ``d = rotary_dim``, ``s = factor`` and ``ω_i = θ^(-2i/d)``, ``i = 0 … d/2 - 1``::

        mixed_b = None:  ω'_i = (θ·s)^(-2i/d) / s^(2/d)          (base θ·s, all divided once more)
        mixed_b = b:     ω'_i = ω_i / exp(a·(i + 1)^b),  a = ln s / (d/2)^b

    Source: vLLM ``vllm/model_executor/layers/rotary_embedding/ntk_scaling_rope.py``
    (``_compute_inv_freq``; Su, "Transformer升级之路：10、RoPE是一种β进制编码",
    kexue.fm/archives/9706, for the mixed form). vLLM computes in float32; here float64.
    """

    name = "ntk"
    summary = "fixed NTK-aware base scaling, optionally Su's mixed_b (vLLM's ntk)"
    parameters: ClassVar[Mapping[str, Option]] = {
        "factor": factor_option("s: the base grows to θ·s (or the mixed rule's total stretch)"),
        "mixed_b": Option(float, None, nullable=True, allowed="None or a finite number > 0",
                          check=lambda b: 0 < b < math.inf,
                          doc="exponent b of Su's mixed rule λ_m = exp(a·m^b); None: fixed NTK"),
    }

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        import numpy as np

        d, s, b = rotary_dim, float(params["factor"]), params["mixed_b"]
        if b is None:
            return np.asarray(inv_freq(d, theta * s) / s ** (2.0 / d), dtype=np.float64)
        a = math.log(s) / (d / 2) ** b
        m = np.arange(1, d // 2 + 1, dtype=np.float64)
        return np.asarray(inv_freq(d, theta) / np.exp(a * m ** b), dtype=np.float64)
