"""Backend adapters; see :mod:`peregistry.backends._base` for the interface."""

from ._base import Backend

__all__ = ["Backend"]
