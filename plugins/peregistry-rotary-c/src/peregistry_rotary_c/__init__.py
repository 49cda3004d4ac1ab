"""peregistry-rotary-c: a fused C rotation kernel for peregistry's rotary encoders.

The kernel rotates NumPy arrays and CPU torch tensors in one pass over memory, bit for bit
peregistry's generic rotation (RoFormer, Su et al. 2021, eq. 34: ``a' = a·cos - b·sin``,
``b' = b·cos + a·sin`` per pair, each product and sum rounded once in the tables' dtype). The
core finds it through the ``peregistry`` entry point group (:mod:`.plugin`); nothing here is
called by users directly. ``PEREGISTRY_NATIVE=0`` switches it off.
"""

from __future__ import annotations

from .kernel import CRotationKernel, kernel_status

__all__ = ["CRotationKernel", "__version__", "kernel_status"]

__version__ = "0.1.0"
