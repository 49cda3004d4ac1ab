"""``axial``: the frequencies of N-D axial RoPE with equal bands, each band restarting RoPE's
sequence at its own width, for ``mrope`` (one band of pairs per axis): Llama 4's vision rotary
over the patch grid (vLLM ``Llama4VisionRotaryEmbedding``, the ``mllama4`` branch of
``get_rope``; transformers ``Llama4VisionRotaryEmbedding``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ..._options import Option
from .._funcs import inv_freq
from .base import RopeScaling

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Axial"]


class Axial(RopeScaling):
    """Equal axial bands: with ``d = rotary_dim`` and ``n = axes``, the ``d/2`` pairs form ``n``
    bands of ``d/(2n)``; pair ``j`` of every band has ``ω = θ^(-2j/(d/n))``, RoPE's frequencies
    of a head ``d/n`` wide (EVA-02's and FLUX's axial RoPE with equal widths).

    With ``mrope``, ``sections`` of ``d/(2n)`` pairs each (contiguous) give band ``a`` to axis
    ``a``. Llama 4's vision encoder (head ``d``, ``θ = rope_theta``) is ``mrope(dim=d,
    sections=(d/4, d/4), layout="interleaved", scaling={"type": "axial", "axes": 2})`` at
    positions ``(x + 1, y + 1)`` of patch ``(row y, column x)`` and ``(0, 0)`` for the class
    token: vLLM ``vllm/model_executor/layers/rotary_embedding/llama4_vision_rope.py`` at
    10760a01 (``_compute_cos_sin_cache``: ``freq_dim = rotary_dim = d/2``, ``img_idx % side``
    and ``// side`` plus one, the class token masked to angle 0) and transformers 5.23
    ``models/llama4/modeling_llama4.py`` (``Llama4VisionRotaryEmbedding``).
    """

    name = "axial"
    summary = "equal axial bands of RoPE frequencies for mrope (Llama 4 vision, mllama4)"
    parameters: ClassVar[Mapping[str, Option]] = {
        "axes": Option(int, 2, allowed="an integer >= 1 dividing rotary_dim/2",
                       check=lambda n: n >= 1, doc="number of equal bands (axes)"),
    }

    def check(self, params: Mapping[str, Any], *, where: str, rotary_dim: int,
              theta: float) -> None:
        n = params["axes"]
        if (rotary_dim // 2) % n:
            raise ValueError(f"{where}: 'axes'={n!r} must divide rotary_dim/2 = "
                             f"{rotary_dim // 2} (equal bands of pairs)")

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        import numpy as np

        n = params["axes"]
        band = np.asarray(inv_freq(rotary_dim // n, theta), dtype=np.float64)
        return np.asarray(np.tile(band, n), dtype=np.float64)
