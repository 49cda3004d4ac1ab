"""``peregistry_rotary_c::rotate``: the C kernel as one opaque call in a compiled CPU graph.

Inductor writes an interleaved rotation as a scalar loop over stride-2 pairs (1.2x a copy) and
a bfloat16 one up to 6x slower than the kernel, which reads and writes once (1.0-1.14x), bit for
bit eager (measured in the core's docs/benchmarks.md). The op has no derivative, so
:func:`._torch._under_compile` traces it only where none can be asked for, and only where it pays.

Defined when this module is first imported: on the first call under a compiler, where Dynamo
runs the import for real (its body is not traced), so a model compiled before any eager call gets
it too. The import lock makes the definition happen once per process, whatever the threads (two
definitions at once crash torch). Through a library fragment with a CPU kernel, not
``custom_op``: that adds ~10 us of Python per call (its autograd wrapper), as much as the kernel
takes on a decode step. ``pt2_compliant_tag``, as ``custom_op`` gives: it compiles under
Dynamo's ``only_allow_pt2_compliant_ops`` too.
"""

from __future__ import annotations

import torch

from ._torch import derivative_possible, rotate_eager, rotate_functional
from .kernel import load

__all__ = ["rotate"]


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """The eager rotation (the kernel where it takes the tensors, else the plain expression:
    the same bits), always a new contiguous tensor. An error where a derivative could be asked
    for: the op has none (traced only where none can be)."""
    if derivative_possible(x, cos, sin):
        raise RuntimeError("peregistry_rotary_c::rotate has no derivative: called where one could "
                           "be asked for (an input requires grad, or inside a forward-mode "
                           "dual_level); rotate with peregistry's public functions instead")
    module = load()
    out: torch.Tensor | None = None
    if module is not None:
        out = rotate_eager(module, x, cos, sin, interleaved)
    if out is None:
        out = rotate_functional(x, cos, sin, interleaved).contiguous()
    return out


def _rotate_fake(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 interleaved: bool) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


torch.library.define("peregistry_rotary_c::rotate",
                     "(Tensor x, Tensor cos, Tensor sin, bool interleaved) -> Tensor",
                     tags=(torch.Tag.pt2_compliant_tag,))
torch.library.impl("peregistry_rotary_c::rotate", "CPU", _rotate)
torch.library.register_fake("peregistry_rotary_c::rotate", _rotate_fake)
rotate = torch.ops.peregistry_rotary_c.rotate.default
