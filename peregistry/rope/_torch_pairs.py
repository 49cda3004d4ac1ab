"""PyTorch fast paths of the relative encoders' integer lookups, reached only through
:mod:`._delegation`: each gives the integers (or gathered values) of the generic Array API code
it stands for in fewer torch calls, since a small call's cost is its count of calls (issue 17).
Torch is looked up in ``sys.modules`` (a dict read, not an import): these run only on torch
tensors, so torch is imported already.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["clamp_int", "is_plain", "take_differences", "take_flat"]


def clamp_int(d: Any, low: int, high: int) -> Any:
    """``torch.clamp`` of an integer tensor by Python ints: one kernel (traceable, and fine
    under torch.func transforms)."""
    return sys.modules["torch"].clamp(d, low, high)  # a dict read, not an import


def take_differences(vector: Any, q: Any, k: Any) -> Any:
    """``vector[k_j - q_i]`` of eager 1-D positions: ``torch.take`` (a third of advanced
    indexing's cost) of the distances in int64 (narrower positions are widened first, so that no
    difference wraps), negative ones counting from the end."""
    torch = sys.modules["torch"]
    wide = torch.int64
    if q.dtype != wide or k.dtype != wide:
        q, k = q.to(wide), k.to(wide)
    return torch.take(vector, k - q.view(-1, 1))


def is_plain(t: Any) -> bool:
    """A tensor of torch's own class (or a parameter): not a subclass such as a DTensor, whose
    sharding a gather along an axis keeps and a flattening would undo."""
    torch = sys.modules["torch"]
    return type(t) is torch.Tensor or type(t) is torch.nn.Parameter


def take_flat(table: Any, idx: Any) -> Any:
    """The elements of ``table`` in row-major order at integer ``idx`` (``idx.shape``):
    ``torch.take`` eagerly, one operation at a third of advanced indexing's cost; indexing the
    flattened table under ``torch.compile`` and inside ``torch.func`` transforms (vmap has no
    batching rule for ``take``, and warns)."""
    torch = sys.modules["torch"]
    if idx.dtype != torch.int64:
        idx = idx.to(torch.int64)
    if (type(idx) is torch.Tensor and torch._C._functorch.peek_interpreter_stack() is None
            and not torch.compiler.is_compiling()):
        return torch.take(table, idx)
    return table.reshape(-1)[idx]
