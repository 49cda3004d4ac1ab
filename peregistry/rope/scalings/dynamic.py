"""``dynamic``: dynamic NTK-aware scaling (bloc97 and emozilla, r/LocalLLaMA 2023), Hugging
Face's ``dynamic`` rope type: the base ``θ`` grows with the sequence length beyond ``L``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ..._options import Option
from .._funcs import inv_freq
from .base import RopeScaling, context_option, factor_option

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Dynamic"]


class Dynamic(RopeScaling):
    """Dynamic NTK-aware scaling (bloc97 and emozilla, r/LocalLLaMA 2023; HF ``dynamic``):

    ``θ' = θ·(factor·s/L - (factor - 1))^(d/(d-2))`` with ``s = max(seq_len, L)``, then
    ``ω'_i = θ'^(-2i/d)``. For ``s <= L`` this is plain RoPE.

    ``original_max_position_embeddings`` is ``L``; Hugging Face reads it from the model config's
    ``max_position_embeddings``."""

    name = "dynamic"
    summary = "dynamic NTK-aware base scaling (bloc97/emozilla 2023)"
    parameters: ClassVar[Mapping[str, Option]] = {
        "factor": factor_option(),
        "original_max_position_embeddings": context_option(
            "L: the model's max_position_embeddings in Hugging Face configs"),
    }
    seq_len_dependence = "continuous"

    def check(self, params: Mapping[str, Any], *, where: str, rotary_dim: int,
              theta: float) -> None:
        if rotary_dim <= 2:
            raise ValueError(f"{where} needs rotary_dim > 2 (its exponent is d/(d-2)), got "
                             f"rotary_dim={rotary_dim}")

    def seq_len_key(self, params: Mapping[str, Any], seq_len: int | None) -> Any:
        orig = params["original_max_position_embeddings"]
        return orig if seq_len is None else max(int(seq_len), orig)

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        orig = params["original_max_position_embeddings"]
        factor = params["factor"]
        s = orig if seq_len is None else max(int(seq_len), orig)
        d = rotary_dim
        base = theta * ((factor * s / orig) - (factor - 1)) ** (d / (d - 2))
        return inv_freq(d, base)
