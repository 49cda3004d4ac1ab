"""Scaling types that serving engines (vLLM, SGLang) build and transformers does not, registered
through the public plugin API: the ``peregistry_rope_scalings`` hook of the ``engine_scalings``
entry point (issue 46). Each type is its own module; docs/porting.md lists the engines' branches.
"""

from __future__ import annotations

from ..._markers import hookimpl
from .base import RopeScaling
from .ntk import NTK

__all__ = ["peregistry_rope_scalings"]


@hookimpl
def peregistry_rope_scalings() -> list[RopeScaling]:
    """``ntk`` (vLLM ``NTKScalingRotaryEmbedding``)."""
    return [NTK()]
