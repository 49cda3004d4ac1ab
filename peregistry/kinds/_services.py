"""What encoders ask of a registry — backend adapters, rope scaling types, other encoders —
without importing it. The registry imports the encoder modules (to check and build their
classes), so an encoder importing the registry back would close an import circle. Instead every
encoder holds the :class:`Services` of the registry that built it (:attr:`Encoder.services`),
which a :class:`~peregistry.registry.Registry` *is*: the registry makes itself
:func:`current_services` while it builds an encoder, and ``peregistry.registry`` installs
``default_registry`` with :func:`set_default_services` for everything built outside a registry
(a class called directly, an unpickled encoder, module-level helpers such as
:func:`peregistry.convert`). So the encoders of a ``Registry(entry_points=False)`` look
backends, scalings and encoders up in that registry only.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .._records import KernelInfo
    from ..backends._base import Backend

__all__ = ["Services", "current_services", "set_default_services", "use_services"]


class Services(Protocol):
    """The lookups an encoder needs; :class:`~peregistry.registry.Registry` provides them."""

    #: The adapter of each array type :meth:`backend_of` has found (read only: a hot call's
    #: one dict get before it asks :meth:`backend_of`; not under ``torch.compile``, where
    #: Dynamo would guard on the dict). A registry renews it when its plugins change.
    backend_by_type: dict[type, Backend]

    def backends(self) -> list[Backend]:
        """Every backend adapter, in lookup order."""
        ...

    def backend(self, name: str) -> Backend:
        """The adapter named ``name``; a ``ValueError`` naming the known ones otherwise."""
        ...

    def backend_of(self, x: Any) -> Backend | None:
        """The adapter owning array ``x``, or None."""
        ...

    def backend_of_namespace(self, xp: Any) -> Backend:
        """The adapter of a namespace, framework module or backend name."""
        ...

    def scalings(self) -> dict[str, Any]:
        """Every rope scaling type, by name."""
        ...

    def get_encoder(self, name: str, /, **options: Any) -> Any:
        """The encoder ``name`` with ``options`` (an :class:`~peregistry.Encoder`; typed ``Any``
        here: the kinds' base classes ask this module for their services, so it names none)."""
        ...

    def rotation_kernels(self) -> list[KernelInfo]:
        """Every rotation kernel, in the order tried, with its status."""
        ...


_default: Services | None = None
_current: ContextVar[Services | None] = ContextVar("peregistry_services", default=None)


def set_default_services(services: Services) -> None:
    """Make ``services`` the answer of :func:`current_services` outside :func:`use_services`."""
    global _default
    _default = services


def dynamo_tracing() -> bool:
    """Whether TorchDynamo traces this call (``torch.compile``), without importing torch. A
    torch still being imported by another thread (in ``sys.modules``, not yet complete) cannot be
    tracing this one."""
    compiler = getattr(sys.modules.get("torch"), "compiler", None)
    is_compiling = getattr(compiler, "is_compiling", None)
    return is_compiling is not None and bool(is_compiling())


def current_services() -> Services:
    """The registry building an encoder right now (:func:`use_services`), else the default.
    While TorchDynamo traces (``torch.compile``), the default: it cannot read a ``ContextVar``
    (fullgraph would fail), and encoders are built outside compiled code anyway."""
    if not dynamo_tracing():
        found = _current.get()
        if found is not None:
            return found
    if _default is None:  # only if peregistry.registry was never imported: a packaging bug
        raise RuntimeError("no peregistry registry is installed; import peregistry first")
    return _default


def default_services() -> Services:
    """The services of everything built outside a registry: ``default_registry``."""
    if _default is None:  # only if peregistry.registry was never imported: a packaging bug
        raise RuntimeError("no peregistry registry is installed; import peregistry first")
    return _default


@contextmanager
def use_services(services: Services) -> Iterator[Services]:
    """Within the block, :func:`current_services` is ``services`` (in this thread or task only)."""
    token = _current.set(services)
    try:
        yield services
    finally:
        _current.reset(token)
