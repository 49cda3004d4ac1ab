"""Scaling types that serving engines (vLLM, SGLang) build and transformers does not, registered
through the public plugin API: the ``peregistry_rope_scalings`` hook of the ``engine_scalings``
entry point (issue 46). Each type is its own module; docs/porting.md lists the engines' branches.
"""

from __future__ import annotations

from ..._markers import hookimpl
from .axial import Axial
from .base import RopeScaling
from .deepseek_yarn import DeepseekYarn
from .grok1 import Grok1
from .ntk import NTK
from .telechat3 import TeleChat3Yarn

__all__ = ["peregistry_rope_scalings"]


@hookimpl
def peregistry_rope_scalings() -> list[RopeScaling]:
    """``ntk`` (vLLM ``NTKScalingRotaryEmbedding``), ``telechat3-yarn``
    (``TeleChat3RoPEScaledRotaryEmbedding``), ``grok1`` (``Grok1ScalingRotaryEmbedding``),
    ``deepseek-yarn`` (``DeepseekScalingRotaryEmbedding``, DeepSeek-V4's too) and ``axial``
    (``Llama4VisionRotaryEmbedding``'s bands, with ``mrope``)."""
    return [NTK(), TeleChat3Yarn(), Grok1(), DeepseekYarn(), Axial()]
