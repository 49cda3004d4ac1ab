"""The built-in backend adapters, registered through the ``peregistry`` entry point group like any
third-party adapter. Importing this module imports no framework."""

from __future__ import annotations

from .._markers import hookimpl
from ._base import Backend
from ._jax import JaxBackend
from ._numpy import NumpyBackend
from ._strict import StrictBackend
from ._torch import TorchBackend

_BUILTIN: list[Backend] = [TorchBackend(), JaxBackend(), StrictBackend(), NumpyBackend()]


@hookimpl
def peregistry_backends() -> list[Backend]:
    """The built-in adapters: torch, JAX, array-api-strict, NumPy (hook
    ``peregistry_backends``)."""
    return list(_BUILTIN)
