"""NumPy adapter. NumPy has no bfloat16 and no jit; everything else is the standard's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._base import Backend, Ctx


class NumpyBackend(Backend):
    name = "numpy"
    priority = 90  # after the others: jax/torch scalars may also look like numpy generics
    _memos = ("_ctx",)

    def context(self, x: Any) -> Ctx:
        """One :class:`Ctx` serves every NumPy call: one device, float64 always."""
        ctx: Ctx | None = self.__dict__.get("_ctx")
        if ctx is None:
            import array_api_compat.numpy as xp
            import numpy as np

            ctx = self.__dict__["_ctx"] = Ctx(xp=xp, backend=self, device="cpu", wide=np.float64,
                                              index=np.dtype(np.int64),
                                              default_float=np.dtype(np.float64))
        return ctx

    def owns(self, x: Any) -> bool:
        import numpy as np

        return isinstance(x, np.ndarray | np.generic)

    def is_tracing(self, x: Any) -> bool:
        """Never: NumPy has no tracing compiler."""
        return False

    def namespace(self) -> Any:
        import array_api_compat.numpy as xp

        return xp

    def native(self) -> Any:
        import numpy

        return numpy

    # NumPy's dtypes never change: answered from constants (every public call asks them).
    def float_dtypes(self) -> Mapping[str, Any]:
        import numpy as np

        return {"float16": np.float16, "float32": np.float32, "float64": np.float64}

    def default_float_dtype(self, device: Any = None) -> Any:
        import numpy as np

        return np.dtype(np.float64)  # as array-api-compat's default_dtypes() says

    def index_dtype(self, device: Any = None) -> Any:
        import numpy as np

        return np.dtype(np.int64)  # as array-api-compat's default_dtypes() says

    def wide_float_dtype(self, device: Any = None) -> Any:
        import numpy as np

        return np.float64

    def is_float_dtype(self, dtype: Any) -> bool:
        import numpy as np

        if isinstance(dtype, np.dtype):  # float16/32/64, not longdouble
            return dtype.kind == "f" and dtype.itemsize <= 8
        return super().is_float_dtype(dtype)

    def take(self, table: Any, idx: Any, *, axis: int) -> Any:
        """``numpy.take`` takes N-d indices directly (no flatten and reshape)."""
        import numpy as np

        return np.take(table, idx, axis=axis)

    def device(self, x: Any) -> Any:
        return "cpu"

    def default_device(self) -> Any:
        return "cpu"
