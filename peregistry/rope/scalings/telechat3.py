"""``telechat3-yarn``: TeleChat 3's YaRN, whose attention factor is ``0.07·ln s + 1`` where YaRN's
is ``0.1·ln s + 1``, as vLLM's ``TeleChat3RoPEScaledRotaryEmbedding``
(``vllm/model_executor/layers/rotary_embedding/telechat3_scaling_rope.py``) computes it for
``rope_type == "telechat3-yarn"``; transformers has no such type."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

from ..._options import Option
from .base import beta_options, context_option, factor_option, positive_option
from .yarn import Yarn

__all__ = ["TeleChat3Yarn"]


class TeleChat3Yarn(Yarn):
    """TeleChat 3's YaRN (vLLM ``TeleChat3RoPEScaledRotaryEmbedding``).

    The frequencies are YaRN's (:class:`~peregistry.rope.scalings.Yarn`: the ramp between
    ``ω_i`` and ``ω_i/factor`` over the correction range of ``beta_fast``/``beta_slow`` in
    ``L = original_max_position_embeddings``, floored/ceiled when ``truncate``); ``cos`` and
    ``sin`` are multiplied by::

        attn_factor·(0.07·ln(factor) + 1)     (attn_factor for factor <= 1)

    Source: vLLM ``vllm/model_executor/layers/rotary_embedding/telechat3_scaling_rope.py``
    (``get_mscale`` in ``__init__``; the frequencies and cache of its base class in
    ``yarn_scaling_rope.py``).
    """

    name = "telechat3-yarn"
    summary = "TeleChat 3's YaRN: attention factor 0.07·ln(factor) + 1 (vLLM telechat3-yarn)"
    parameters: ClassVar[Mapping[str, Option]] = {
        "factor": factor_option(),
        "original_max_position_embeddings": context_option(),
        **beta_options(),
        "attn_factor": positive_option("multiplies the attention factor 0.07·ln(factor) + 1", 1.0),
        "truncate": Option(bool, True, doc="floor/ceil the correction range"),
    }

    def attention_factor(self, rotary_dim: int, theta: float, params: Mapping[str, Any]) -> float:
        factor = float(params["factor"])
        mscale = 1.0 if factor <= 1 else 0.07 * math.log(factor) + 1.0
        return mscale * float(params["attn_factor"])

    def softmax_scale_factor(self, params: Mapping[str, Any]) -> float:
        return 1.0
