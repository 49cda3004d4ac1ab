"""The built-in RoPE scaling types' entry point (``rope_scalings``) and their former home: the
types now live in :mod:`peregistry.rope.scalings`, one module each, and are re-exported here so
that code and plugins importing ``peregistry.encoders.rope_scaling`` keep working. :class:`Param`
is deprecated (declare parameters with :class:`peregistry.Option`)."""

from __future__ import annotations

from .._options import REQUIRED
from ..rope.scalings import (
    SEQ_LEN_DEPENDENCE,
    Default,
    Dynamic,
    Linear,
    Llama3,
    LongRope,
    Proportional,
    RopeScaling,
    Yarn,
    as_scaling,
    base_inv_freq,
    describe_parameters,
    peregistry_rope_scalings,
    resolve_scaling,
)
from ..rope.scalings._params import Param

__all__ = [
    "REQUIRED",
    "SEQ_LEN_DEPENDENCE",
    "Default",
    "Dynamic",
    "Linear",
    "Llama3",
    "LongRope",
    "Param",
    "Proportional",
    "RopeScaling",
    "Yarn",
    "as_scaling",
    "base_inv_freq",
    "describe_parameters",
    "peregistry_rope_scalings",
    "resolve_scaling",
]
