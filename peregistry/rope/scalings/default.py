"""``{"type": "default"}``: no scaling, RoFormer's frequencies ``ω_i = θ^(-2i/d)`` (Su et al.
2021, arXiv:2104.09864); the same as ``scaling=None``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._funcs import inv_freq
from .base import RopeScaling

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Default"]


class Default(RopeScaling):
    """No scaling: RoFormer's frequencies. ``{"type": "default"}`` equals ``scaling=None``."""

    name = "default"
    summary = "no scaling (RoFormer frequencies)"

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        return inv_freq(rotary_dim, theta)
