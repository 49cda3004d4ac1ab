"""The built-in RoPE scaling types' entry point (``rope_scalings``) and their former home: the
types now live in :mod:`peregistry.rope.scalings`, one module each, and are re-exported here so
that code and plugins importing ``peregistry.encoders.rope_scaling`` keep working. :class:`Param`
is deprecated (declare parameters with :class:`peregistry.Option`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from ..rope.scalings._param import Param

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


def __getattr__(name: str) -> Any:
    # The deprecated Param, imported on first use (PEP 562; see peregistry/rope/scalings/_param.py).
    if name == "Param":
        from ..rope.scalings._param import Param

        return Param
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "Param"})
