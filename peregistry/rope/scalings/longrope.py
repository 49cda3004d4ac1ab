"""``longrope``: LongRoPE (Ding et al. 2024, arXiv:2402.13753) as in Phi-3 and Hugging Face's
``_compute_longrope_parameters``: per-frequency divisors, short or long by sequence length."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ..._options import Option
from .._funcs import inv_freq
from .base import RopeScaling, context_option

if TYPE_CHECKING:
    import numpy as np

__all__ = ["LongRope"]


def _divisors(doc: str) -> Option:
    return Option(tuple, item=float, allowed="a list of rotary_dim/2 numbers > 0",
                  check=lambda v: all(x > 0 for x in v), doc=doc)


class LongRope(RopeScaling):
    """LongRoPE (Ding et al. 2024, arXiv:2402.13753) as in Phi-3 and Hugging Face
    ``_compute_longrope_parameters``: ``ω'_i = ω_i / r_i`` with ``r = long_factor`` when the
    sequence length ``s > L`` and ``short_factor`` otherwise.

    Attention factor: ``attention_factor`` if given, else ``sqrt(1 + ln(factor)/ln(L))`` (1 if
    ``factor <= 1``). Hugging Face derives a missing ``factor`` from the model config as
    ``max_position_embeddings / original_max_position_embeddings`` (32 for
    Phi-3-mini-128k-instruct); here one of ``factor`` and ``attention_factor`` must be given.
    """

    name = "longrope"
    summary = "LongRoPE per-frequency factors, short/long by sequence length (Ding et al. 2024)"
    parameters: ClassVar[Mapping[str, Option]] = {
        "short_factor": _divisors("divisors of ω_i for s <= L"),
        "long_factor": _divisors("divisors of ω_i for s > L"),
        "original_max_position_embeddings": context_option(),
        "factor": Option(float, None, allowed="None or a number >= 1", check=lambda f: f >= 1.0,
                         nullable=True, doc="max_position_embeddings / L (sets the attention "
                         "factor)"),
        "attention_factor": Option(float, None, allowed="None or a number > 0",
                                   check=lambda a: a > 0, nullable=True,
                                   doc="factor on cos/sin (None: derived from factor)"),
    }
    seq_len_dependence = "piecewise"

    def check(self, params: Mapping[str, Any], *, where: str, rotary_dim: int,
              theta: float) -> None:
        for key in ("short_factor", "long_factor"):
            if len(params[key]) != rotary_dim // 2:
                raise ValueError(f"{where}: {key!r} must have rotary_dim/2 = {rotary_dim // 2} "
                                 f"entries, got {len(params[key])}")
        if params["factor"] is None and params["attention_factor"] is None:
            raise ValueError(f"{where} needs 'factor' (= max_position_embeddings / "
                             f"original_max_position_embeddings of the model config, e.g. 32.0 "
                             f"for Phi-3-mini-128k) or 'attention_factor'; got neither")

    def seq_len_breakpoints(self, params: Mapping[str, Any]) -> tuple[int, ...]:
        return (int(params["original_max_position_embeddings"]),)

    def attention_factor(self, rotary_dim: int, theta: float, params: Mapping[str, Any]) -> float:
        if params["attention_factor"] is not None:
            return float(params["attention_factor"])
        factor = params["factor"]
        if factor <= 1.0:
            return 1.0
        return math.sqrt(1 + math.log(factor) / math.log(params["original_max_position_embeddings"]))

    def inv_freq(self, rotary_dim: int, theta: float, params: Mapping[str, Any],
                 seq_len: int | None = None) -> np.ndarray[Any, Any]:
        import numpy as np

        long = seq_len is not None and seq_len > params["original_max_position_embeddings"]
        ext = np.asarray(params["long_factor" if long else "short_factor"], dtype=np.float64)
        return inv_freq(rotary_dim, theta) / ext
