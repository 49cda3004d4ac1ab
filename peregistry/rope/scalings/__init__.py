"""RoPE scaling types (context-length extension) for ``scaling={"type": NAME, ...}``, one module
each: a type changes the rotary frequencies ``ω_i`` (and may multiply ``cos``/``sin`` by an
attention factor) so that a model trained on ``original_max_position_embeddings`` positions
works on longer sequences. Parameter names, defaults and formulas follow Hugging Face
``transformers.modeling_rope_utils`` (``rope_parameters``); each class's docstring gives its
formula and source, and the frequencies are computed once per encoder on the host, in float64
NumPy. A plugin adds a type with one file, its parameters declared with :class:`~peregistry.Option`::

    import numpy as np
    import peregistry as per
    from peregistry.rope import inv_freq
    from peregistry.rope.scalings import RopeScaling

    class Stretch(RopeScaling):
        name = "stretch"
        parameters = {"factor": per.Option(float, allowed="a number >= 1", check=lambda f: f >= 1)}

        def inv_freq(self, rotary_dim, theta, params, seq_len=None):
            return inv_freq(rotary_dim, theta) / np.sqrt(params["factor"])

    @per.hookimpl
    def peregistry_rope_scalings():
        return [Stretch()]
"""

from __future__ import annotations

import warnings
from typing import Any

from ..._markers import hookimpl
from .base import (
    SEQ_LEN_DEPENDENCE,
    RopeScaling,
    as_scaling,
    context_option,
    describe_parameters,
    factor_option,
    parameter_options,
    registered_scalings,
    resolve_scaling,
)
from .default import Default
from .dynamic import Dynamic
from .linear import Linear
from .llama3 import Llama3
from .longrope import LongRope
from .proportional import Proportional
from .yarn import Yarn

__all__ = [
    "SEQ_LEN_DEPENDENCE",
    "Default",
    "Dynamic",
    "Linear",
    "Llama3",
    "LongRope",
    "Proportional",
    "RopeScaling",
    "Yarn",
    "as_scaling",
    "builtin_scalings",
    "context_option",
    "describe_parameters",
    "factor_option",
    "parameter_options",
    "peregistry_rope_scalings",
    "registered_scalings",
    "resolve_scaling",
]


def builtin_scalings() -> list[RopeScaling]:
    """One instance of each built-in type: ``default``, ``linear``, ``dynamic``, ``yarn``,
    ``longrope``, ``llama3``, ``proportional``."""
    return [Default(), Linear(), Dynamic(), Yarn(), LongRope(), Llama3(), Proportional()]


@hookimpl
def peregistry_rope_scalings() -> list[RopeScaling]:
    """The built-in scaling types (hook ``peregistry_rope_scalings``)."""
    return builtin_scalings()


def __getattr__(name: str) -> Any:
    if name == "base_inv_freq":  # its older name
        from .._funcs import inv_freq

        warnings.warn("peregistry.rope.scalings.base_inv_freq is deprecated: it is "
                      "peregistry.rope.inv_freq", DeprecationWarning, stacklevel=2)
        return inv_freq
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
