"""Small numeric helpers the checks share: the widest float dtype a backend offers, the largest
absolute difference of two NumPy results, and an array's shape as Python ints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._core import Case


def wide_name(case: Case) -> str:
    """``"float64"`` where the backend has it, else ``"float32"`` (JAX without x64)."""
    return "float64" if "float64" in case.float_dtypes else "float32"


def max_err(a: Any, b: Any) -> float:
    """``max |a - b|`` of two NumPy-convertible results (0 for empty ones)."""
    import numpy as np

    return float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) if np.size(a) else 0.0


def shape_of(x: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in x.shape)


def max_position(probe: Any) -> float:
    """The largest ``|position|`` of a probe's position arguments (0 for none)."""
    import numpy as np

    keys = [k for k in probe.args if k not in probe.float_args]
    return max((float(np.max(np.abs(probe.args[k]), initial=0.0)) for k in keys), default=0.0)
