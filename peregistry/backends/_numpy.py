"""NumPy adapter. NumPy has no bfloat16 and no jit; everything else is the standard's."""

from __future__ import annotations

from typing import Any

from ._base import Backend


class NumpyBackend(Backend):
    name = "numpy"
    priority = 90  # after the others: jax/torch scalars may also look like numpy generics

    def owns(self, x: Any) -> bool:
        import numpy as np

        return isinstance(x, np.ndarray | np.generic)

    def namespace(self) -> Any:
        import array_api_compat.numpy as xp

        return xp

    def native(self) -> Any:
        import numpy

        return numpy

    def device(self, x: Any) -> Any:
        return "cpu"

    def default_device(self) -> Any:
        return "cpu"
