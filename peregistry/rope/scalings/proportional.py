"""``proportional``: Gemma 4's proportional RoPE (Hugging Face's ``proportional`` rope type,
``_compute_proportional_rope_parameters``; Gemma 4, Gemma 4 unified, DiffusionGemma and LFM3
full-attention layers): RoFormer's frequencies over the *whole* rotary width ``d`` for the first
``k`` pairs, zero for the others, which therefore pass through unrotated inside the half layout."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ..._options import Option
from .._funcs import inv_freq
from .base import RopeScaling

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Proportional", "rotated_pairs"]


def rotated_pairs(partial_rotary_factor: float, rotary_dim: int) -> int:
    """``k = ⌊(f·d) / 2⌋``, as transformers' ``int(rope_proportion * head_dim // 2)`` (float
    floor division: 0.25·512 // 2 = 64 pairs of 256)."""
    return int(float(partial_rotary_factor) * rotary_dim // 2)


class Proportional(RopeScaling):
    """Proportional RoPE (Gemma 4, transformers 5.23 ``_compute_proportional_rope_parameters``).

    With ``d`` the rotary width (the whole head) and ``k = ⌊partial_rotary_factor·d / 2⌋``::

        ω'_i = θ^(-2i/d) / factor   for i < k
        ω'_i = 0                    for k <= i < d/2   (cos = 1, sin = 0: unrotated)

    Unlike ``rotary_dim`` (partial rotary, which rotates the first ``rotary_dim`` features with
    frequencies ``θ^(-2i/rotary_dim)``), the rotated pairs keep the frequencies of the full width
    and the unrotated ones sit inside the half layout: with ``d = 8`` and ``k = 2`` the pairs
    ``(0, 4)``, ``(1, 5)`` turn, ``(2, 6)``, ``(3, 7)`` do not. ``partial_rotary_factor=1``
    equals ``linear`` with the same ``factor`` (or no scaling for ``factor=1``).
    """

    name = "proportional"
    summary = "Gemma 4: θ^(-2i/d) for the first ⌊f·d/2⌋ pairs, the others unrotated"
    parameters: ClassVar[Mapping[str, Option]] = {
        "partial_rotary_factor": Option(
            float, 1.0, allowed="a number in [0, 1]", check=lambda f: 0.0 <= f <= 1.0,
            doc="fraction of the width whose pairs rotate (Gemma 4: 0.25)"),
        "factor": Option(float, 1.0, allowed="a number >= 1", check=lambda f: f >= 1.0,
                         doc="the rotated frequencies are divided by this"),
    }

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        import numpy as np

        k = rotated_pairs(params["partial_rotary_factor"], rotary_dim)
        omega = np.zeros(rotary_dim // 2, dtype=np.float64)
        omega[:k] = inv_freq(rotary_dim, theta)[:k]
        return np.asarray(omega / params["factor"], dtype=np.float64)
