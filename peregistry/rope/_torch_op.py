"""peregistry's torch operator for ``torch.compile``, opaque to inductor:
``peregistry::materialize``, a copy with the identity as its gradient. A cos/sin table passes
it, so inductor writes the table once instead of fusing its trigonometry into the elementwise
rotation (once per element of every head and batch row).

The op is defined when this module is first imported: on the first call under a compiler,
where Dynamo runs the import for real (its body is not traced), so a model compiled before any
eager call gets them too. The import lock makes the definition happen once per process, whatever
the threads (two definitions at once crash torch).
"""

from __future__ import annotations

from typing import Any

import torch


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
