"""peregistry's torch operators for ``torch.compile``, opaque to inductor:

* ``peregistry::materialize``, a copy with the identity as its gradient. A cos/sin table passes
  it, so inductor writes the table once instead of fusing its trigonometry into the elementwise
  rotation (once per element of every head and batch row).
* ``peregistry::rotate``, the fused C kernel (:mod:`._kernel`) as one call in a compiled CPU
  graph: inductor writes an interleaved rotation as a scalar loop over stride-2 pairs (1.2x a
  copy), the kernel reads and writes once (1.0-1.14x), bit for bit eager. It has no
  derivative, so :func:`._torch.rotate` traces it only where none can be asked for, and for
  large interleaved inputs only (see there).

The ops are defined when this module is first imported: on the first call under a compiler,
where Dynamo runs the import for real (its body is not traced), so a model compiled before any
eager call gets them too. The import lock makes the definition happen once per process, whatever
the threads (two definitions at once crash torch).
"""

from __future__ import annotations

from typing import Any

import torch

from ._kernel import load_kernel
from ._torch_kernel import derivative_possible, rotate_functional, rotate_native, takes_dtypes

#: The C kernel is built and not switched off: read once, when the ops are defined.
KERNEL_ON = load_kernel() is not None
#: (x, table) dtypes the kernel rotates, as constants Dynamo can read while tracing.
KERNEL_DTYPES = frozenset((x, t) for x in (torch.float32, torch.bfloat16, torch.float64)
                          for t in (torch.float32, torch.float64)
                          if takes_dtypes(x, t))


@torch.library.custom_op("peregistry::materialize", mutates_args=(), schema="(Tensor a) -> Tensor")
def materialize(a: torch.Tensor) -> torch.Tensor:
    return a.clone()


@materialize.register_fake
def _(a: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(a)


def _backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    return grad


materialize.register_autograd(_backward)


@materialize.register_vmap
def _vmap(info: Any, in_dims: tuple[int | None], a: torch.Tensor) -> tuple[torch.Tensor, int | None]:
    return a.clone(), in_dims[0]  # a copy keeps the batch axis where it was


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int,
            interleaved: bool) -> torch.Tensor:
    """The eager rotation of :func:`._torch.rotate` (the kernel where it takes the layouts,
    else the plain expression: the same bits), always a new contiguous tensor. An error where
    a derivative could be asked for: the op has none (traced only where none can be)."""
    if derivative_possible(x, cos, sin):
        raise RuntimeError("peregistry::rotate has no derivative: called where one could be "
                           "asked for (an input requires grad, or inside a forward-mode "
                           "dual_level); rotate with peregistry's public functions instead")
    out: torch.Tensor | None = rotate_native(x, cos, sin, rotary_dim, interleaved)
    if out is None:
        out = rotate_functional(x, cos, sin, rotary_dim, interleaved).contiguous()
    return out


def _rotate_fake(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int,
                 interleaved: bool) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


# Defined through a library fragment with a CPU kernel, not ``custom_op``: that adds ~10 us
# of Python per call (its autograd wrapper), as much as the kernel takes on a decode step. No
# autograd kernel: the op is only traced where nothing is differentiated (._torch).
# (pt2_compliant_tag, as custom_op gives: compiles under only_allow_pt2_compliant_ops too)
torch.library.define("peregistry::rotate",
                     "(Tensor x, Tensor cos, Tensor sin, int rotary_dim, bool interleaved) -> Tensor",
                     tags=(torch.Tag.pt2_compliant_tag,))
torch.library.impl("peregistry::rotate", "CPU", _rotate)
torch.library.register_fake("peregistry::rotate", _rotate_fake)
rotate = torch.ops.peregistry.rotate.default
