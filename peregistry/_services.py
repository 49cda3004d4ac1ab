"""What encoders ask of a registry, at its former path: defined in
:mod:`peregistry.kinds._services` (the kinds sit below the registry and the engine)."""

from __future__ import annotations

from .kinds._services import (
    Services,
    _current,
    current_services,
    default_services,
    dynamo_tracing,
    set_default_services,
    use_services,
)

__all__ = ["Services", "_current", "current_services", "default_services", "dynamo_tracing",
           "set_default_services", "use_services"]
