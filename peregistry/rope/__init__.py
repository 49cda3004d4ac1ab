"""The rotary engine: RoPE's mathematics as pure functions, one framework dispatch, and the base
classes rotary families are built from. Everything here is public and typed; the built-in
``rotary`` and ``mrope`` encoders use nothing else.

Layers, each importing only the ones above it:

1. **the mathematics** (pure functions on Array API arrays, the reference)::

       omega = inv_freq(64, theta=10000.0)            # host float64 ω_i = θ^(-2i/d)
       freqs = Frequencies.from_omega(omega)          # + its exact split for float32 backends
       cos, sin = cos_sin(positions, freqs, ctx=ctx)  # half-width (*positions.shape, 32)
       full = full_width(cos, layout="half")          # [c0 c1 ..] -> [c0 c1 .. c0 c1 ..]
       y = apply_rotation(x, cos, sin, rotary_dim=64, interleaved=False, cdt=x.dtype, xp=xp)

   with the pair swaps :func:`rotate_half` (``[x0 x1 | x2 x3] -> [-x2 -x3 | x0 x1]``) and
   :func:`rotate_every_two` (``[x0 x1 x2 x3] -> [-x1 x0 -x3 x2]``), and the rotation of each
   layout, :func:`rotate_half_layout` and :func:`rotate_interleaved_layout`.
2. **the fast application** of precomputed tables: :func:`apply_rotary` and
   :class:`RotaryTables` (``q, k = enc.tables(ids).rotate_all(q, k)``), through the one
   dispatch to the rotation kernels of plugins (:func:`kernels`) and framework fast paths
   (torch's cache-blocked and DTensor paths; a fusion boundary under
   ``torch.compile``/``jax.jit``), bit for bit the reference.
3. **the base classes**: :class:`RotaryEncoder` (``rotate``, ``cos_sin``, ``tables``; a
   subclass gives :meth:`~RotaryEncoder._half_cos_sin`), :class:`ScaledRotary`
   (RoFormer frequencies with a ``scaling`` option) and :class:`MultiAxisRotary` (positions
   ``(num_axes, ...)``: M-RoPE, axial RoPE).
"""

from __future__ import annotations

from ._angles import Frequencies, angles, cos_sin
from ._apply import RotaryTables, apply_rotary, rotate_features
from ._funcs import (
    LAYOUTS,
    Layout,
    apply_rotation,
    full_width,
    half_width,
    inv_freq,
    rotate_every_two,
    rotate_half,
    rotate_half_layout,
    rotate_interleaved_layout,
)
from ._kernels import RotationKernel, kernel_isa, kernel_status, kernels
from ._tables import clear_caches, set_table_cache_bytes, table_cache_bytes
from ._weights import permute_for_layout
from .encoder import RotaryEncoder
from .scaled import MultiAxisRotary, ScaledRotary, ScalingState

__all__ = [
    "LAYOUTS",
    "Frequencies",
    "Layout",
    "MultiAxisRotary",
    "RotaryEncoder",
    "RotaryTables",
    "RotationKernel",
    "ScaledRotary",
    "ScalingState",
    "angles",
    "apply_rotary",
    "apply_rotation",
    "clear_caches",
    "cos_sin",
    "full_width",
    "half_width",
    "inv_freq",
    "kernel_isa",
    "kernel_status",
    "kernels",
    "permute_for_layout",
    "rotate_every_two",
    "rotate_features",
    "rotate_half",
    "rotate_half_layout",
    "rotate_interleaved_layout",
    "set_table_cache_bytes",
    "table_cache_bytes",
]
