"""The entry point module (``[project.entry-points.peregistry]``): the hook that hands the core
this distribution's rotation kernel."""

from __future__ import annotations

import peregistry

from .kernel import CRotationKernel


@peregistry.hookimpl
def peregistry_rotation_kernels() -> list[CRotationKernel]:
    """The C kernel, whether built and switched on or not: its ``status()`` says which, and the
    core lists it either way (``peregistry list --kernels``)."""
    return [CRotationKernel()]
