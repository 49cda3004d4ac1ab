"""The kinds' base classes, at the path plugins have imported them from: they are defined in
:mod:`peregistry.kinds` (below the engine and the families), and ``peregistry.plugin`` or
``peregistry`` itself is the place to import them from."""

from __future__ import annotations

from ..backends._base import Ctx
from ..kinds._declaration import KINDS
from ..kinds.base import AbsoluteEncoder, BiasEncoder, Encoder, RelativeEmbedding
from ..kinds.context import (
    check_positions,
    devices_differ,
    hook_arguments,
    make_context,
    params_dtype,
    resolve_dtype,
)

__all__ = ["KINDS", "AbsoluteEncoder", "BiasEncoder", "Ctx", "Encoder", "RelativeEmbedding",
           "check_positions", "devices_differ", "hook_arguments", "make_context", "params_dtype",
           "resolve_dtype"]
