"""``linear``: position interpolation, ``ω'_i = ω_i / factor`` (Chen et al. 2023,
arXiv:2306.15595; kaiokendev), Hugging Face's ``linear`` rope type."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ..._options import Option
from .._funcs import inv_freq
from .base import RopeScaling, factor_option

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Linear"]


class Linear(RopeScaling):
    """Position interpolation: ``ω'_i = ω_i / factor`` (Chen et al. 2023, arXiv:2306.15595)."""

    name = "linear"
    summary = "position interpolation, ω/factor (Chen et al. 2023)"
    parameters: ClassVar[Mapping[str, Option]] = {
        "factor": factor_option("positions are divided by this")}

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        import numpy as np

        return np.asarray(inv_freq(rotary_dim, theta) / params["factor"], dtype=np.float64)
