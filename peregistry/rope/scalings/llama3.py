"""``llama3``: Llama 3.1's wavelength-dependent interpolation (Meta, "The Llama 3 Herd of
Models", 2024), Hugging Face's ``_compute_llama3_parameters``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ..._options import Option
from .._funcs import inv_freq
from .base import RopeScaling, context_option, factor_option

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Llama3"]


class Llama3(RopeScaling):
    """Llama 3.1 frequency-dependent scaling (Meta 2024; HF ``_compute_llama3_parameters``).

    With wavelengths ``λ_i = 2π/ω_i``: keep ``ω_i`` where ``λ_i < L/high_freq_factor``, use
    ``ω_i/factor`` where ``λ_i > L/low_freq_factor``, and in between
    ``(1-κ_i)·ω_i/factor + κ_i·ω_i`` with ``κ_i = (L/λ_i - low_freq_factor)/(high_freq_factor
    - low_freq_factor)``."""

    name = "llama3"
    summary = "Llama 3.1 wavelength-dependent interpolation"
    parameters: ClassVar[Mapping[str, Option]] = {
        "factor": factor_option(),
        "low_freq_factor": Option(float, allowed="a number > 0", check=lambda f: f > 0,
                                  doc="wavelengths above L/low_freq_factor are divided by factor"),
        "high_freq_factor": Option(float, allowed="a number > 0", check=lambda f: f > 0,
                                   doc="wavelengths below L/high_freq_factor are kept"),
        "original_max_position_embeddings": context_option(),
    }

    def check(self, params: Mapping[str, Any], *, where: str, rotary_dim: int,
              theta: float) -> None:
        if not params["high_freq_factor"] > params["low_freq_factor"]:
            raise ValueError(f"{where}: 'high_freq_factor' must be greater than "
                             f"'low_freq_factor', got high_freq_factor="
                             f"{params['high_freq_factor']!r}, low_freq_factor="
                             f"{params['low_freq_factor']!r}")

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        import numpy as np

        factor = params["factor"]
        low, high = params["low_freq_factor"], params["high_freq_factor"]
        orig = params["original_max_position_embeddings"]
        omega = inv_freq(rotary_dim, theta)
        wavelen = 2 * math.pi / omega
        scaled = np.where(wavelen > orig / low, omega / factor, omega)
        smooth = (orig / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < orig / high) & ~(wavelen > orig / low)
        return np.asarray(np.where(medium, smoothed, scaled), dtype=np.float64)
