"""Moved to :mod:`peregistry.rope._kernel` (the optional C kernel belongs to the rope engine);
its status functions are kept here for older imports."""

from ..rope._kernel import kernel_isa, kernel_status

__all__ = ["kernel_isa", "kernel_status"]
