"""PyTorch adapter: default dtype from ``torch.get_default_dtype()``, ``torch.compile`` as jit."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from ._base import Backend

#: ``torch.compile`` backend used by the conformance suite's jit check. ``inductor`` generates
#: and compiles C++; ``aot_eager`` checks full-graph capture without code generation.
COMPILE_BACKEND_ENV = "PEREGISTRY_TORCH_COMPILE_BACKEND"


class TorchBackend(Backend):
    name = "torch"
    priority = 10

    def owns(self, x: Any) -> bool:
        import torch

        return isinstance(x, torch.Tensor)

    def namespace(self) -> Any:
        import array_api_compat.torch as xp

        return xp

    def native(self) -> Any:
        import torch

        return torch

    def float_dtypes(self) -> Mapping[str, Any]:
        import torch

        return {
            "float16": torch.float16,
            "bfloat16": torch.bfloat16,
            "float32": torch.float32,
            "float64": torch.float64,
        }

    def default_float_dtype(self, device: Any = None) -> Any:
        import torch

        return torch.get_default_dtype()

    def wide_float_dtype(self, device: Any = None) -> Any:
        import torch

        if device is not None and torch.device(device).type == "mps":
            return torch.float32  # MPS has no float64
        return torch.float64

    def default_device(self) -> Any:
        import torch

        return torch.get_default_device()

    def from_numpy(self, a: Any, *, dtype: Any = None, device: Any = None) -> Any:
        import torch

        return torch.asarray(a, dtype=dtype, device=device)

    def to_numpy(self, x: Any) -> Any:
        import numpy as np
        import torch

        x = x.detach().cpu()
        if x.dtype == torch.bfloat16:
            x = x.to(torch.float32)
        return np.asarray(x.numpy())

    def from_dlpack(self, x: Any, *, device: Any = None) -> Any:
        import torch

        out = torch.from_dlpack(x)
        return out if device is None else out.to(device)

    def prepare_params(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        return params

    def jit(self, fn: Callable[..., Any]) -> Callable[..., Any] | None:
        import torch

        backend = os.environ.get(COMPILE_BACKEND_ENV, "inductor")
        return torch.compile(fn, fullgraph=True, dynamic=False, backend=backend)
