"""The M-RoPE branches of the serving engines' ``get_rope`` that transformers does not have, or
reads otherwise: their axis-to-pair maps and the ``mrope`` options that reproduce each (issue 46;
docs/porting.md, "Serving engines").

* ``rope_type == "openpangu"`` (vLLM ``MRotaryEmbeddingInterleaved``,
  ``vllm/model_executor/layers/rotary_embedding/mrope_interleaved.py`` at e7bcaef1): the axes
  spread evenly over the pairs by ``get_mrope_interleaved_id_list``, the last pair temporal;
* ``mrope_interleaved_glm`` with ``mrope_interleaved`` (SGLang ``MRotaryEmbedding``,
  ``python/sglang/srt/layers/rotary_embedding/mrope.py`` at 020d83a0, and the Triton kernel it
  calls, ``python/sglang/kernels/ops/attention/rotary_triton.py`` at 0d7ff714): round-robin over
  ``t, h, w``, skipping an axis whose pairs are used up;
* ``video_rope`` with ``mrope_section`` (SGLang ``BailingMRotaryEmbedding``,
  ``bailing_mrope.py`` at 31767460): the first ``h + w`` pairs alternate height and width, the
  last ``t`` are temporal, positions may be negative; ``factor > 1`` makes it YaRN even for
  ``rope_type == "default"``;
* ``yarn`` with ``mrope_section``: vLLM's ``MRotaryEmbedding`` (``mrope.py`` at dba39a55) sizes
  its cache from ``4·original_max_position_embeddings`` before YaRN reads that number for its
  correction range; SGLang's ``YaRNScalingMRotaryEmbedding`` reads the number itself. Both take
  the attention factor from ``attn_factor`` alone (``0.1·ln s + 1`` times it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ._values import ConfigError, flag, integer, number

__all__ = ["EngineMRope", "bailing_pair_axes", "engine_mrope", "glm_pair_axes",
           "openpangu_pair_axes"]

PairMap = Callable[[tuple[int, ...]], tuple[tuple[int, ...], tuple[int, ...]]]


class EngineMRope(NamedTuple):
    """How an engine's M-RoPE branch is built: the scaling type it amounts to, its ``scaling``
    dict, the pair map (``(sections, pair_axes)`` of the config's sections; None: bands or
    Qwen3-VL cycles) and ``interleaved`` (None: ``from_hf_config``'s usual reading)."""

    kind: str
    scaling: dict[str, Any] | None
    pair_map: PairMap | None = None
    interleaved: bool | None = None


def openpangu_pair_axes(sections: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """vLLM ``MRotaryEmbeddingInterleaved.get_mrope_interleaved_id_list``: each pair goes to the
    axis with the smallest share placed so far (``placed/count``, ties to the lower axis), never
    the previous pair's axis while another remains; with three sections one temporal pair is
    held back and placed last (``force_last``). Two sections are ``(h, w)``."""
    if len(sections) not in (2, 3):
        raise ValueError(f"openpangu: mrope_section={list(sections)} must have 2 or 3 entries "
                         f"(vLLM: 'the length of mrope section is not 2 or 3')")
    counts = list(sections) + [0] * (3 - len(sections))
    force_last = len(sections) == 3
    if force_last:
        counts[0] -= 1
    placed, remaining = [0, 0, 0], list(counts)
    seq: list[int] = []
    last: int | None = None
    for _ in range(sum(counts)):
        cands = [k for k in range(3) if remaining[k] > 0 and k != last] \
            or [k for k in range(3) if remaining[k] > 0]
        best = min(cands, key=lambda k: (placed[k] / counts[k], k))
        seq.append(best)
        placed[best] += 1
        remaining[best] -= 1
        last = best
    if force_last:
        seq.append(0)
    return tuple(sections), tuple(seq)


def glm_pair_axes(sections: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """SGLang's ``axis_map`` for ``mrope_interleaved_glm``: pair ``i`` tries axis ``i mod 3``,
    then the next ones, until one has pairs left (GLM-V ``[8, 12, 12]``: ``t h w`` eight times,
    then ``h h w`` four times, then ``w w``... as its source comment draws it)."""
    if len(sections) != 3:
        raise ValueError(f"mrope_interleaved_glm: mrope_section={list(sections)} must have 3 "
                         f"entries (t, h, w)")
    counts, axes = [0, 0, 0], []
    for i in range(sum(sections)):
        ax = i % 3
        while counts[ax] >= sections[ax]:
            ax = (ax + 1) % 3
        axes.append(ax)
        counts[ax] += 1
    return tuple(sections), tuple(axes)


def bailing_pair_axes(sections: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Bailing's map (vLLM ``BailingMRotaryEmbedding.select_cos_sin``, SGLang's Ernie-4.5
    kernel with the sections reordered ``(h, w, t)``): of ``(t, h, w)`` sections with
    ``h == w``, pairs ``j < h + w`` alternate height (even ``j``) and width, the rest temporal."""
    if len(sections) != 3 or sections[1] != sections[2]:
        raise ValueError(f"video_rope: mrope_section={list(sections)} must be [t, h, w] with "
                         f"h == w (Bailing M-RoPE)")
    t, h, w = sections
    return tuple(sections), tuple(1 + j % 2 if j < h + w else 0 for j in range(h + w + t))


def _yarn(rope: Mapping[str, Any], factor: float, context: int, where: str) -> dict[str, Any]:
    """The ``yarn`` scaling of an engine's YaRN M-RoPE: the correction range over ``context``
    positions, attention factor ``attn_factor·(0.1·ln s + 1)``."""
    extrapolation = number(rope.get("extrapolation_factor", 1), "extrapolation_factor", where)
    if extrapolation != 1:
        raise ConfigError(f"{where}: extrapolation_factor={extrapolation!r} is not reproduced "
                          f"(peregistry's yarn has the engines' default, 1)")
    attn = number(rope.get("attn_factor", 1), "attn_factor", where)
    truncate = flag(rope.get("truncate", True), "truncate", where)
    return {"type": "yarn", "factor": factor, "original_max_position_embeddings": context,
            "beta_fast": number(rope.get("beta_fast", 32), "beta_fast", where),
            "beta_slow": number(rope.get("beta_slow", 1), "beta_slow", where),
            "truncate": truncate,
            "attention_factor": attn * (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)}


def _context(rope: Mapping[str, Any], config: Mapping[str, Any], where: str,
             required: bool) -> int:
    value = rope.get("original_max_position_embeddings")
    key = "original_max_position_embeddings"
    if value is None and not required:
        key, value = "max_position_embeddings", config.get("max_position_embeddings")
    if value is None:
        raise ConfigError(f"{where}: this M-RoPE branch needs {key} (the engine reads it)")
    return integer(value, key, where)


def engine_mrope(kind: str, rope: Mapping[str, Any], config: Mapping[str, Any], *,
                 engine: str, where: str) -> EngineMRope | None:
    """The engine branch ``rope`` reaches, or None when ``from_hf_config``'s usual reading
    applies. Keys only one engine reads (``openpangu``, ``video_rope``,
    ``mrope_interleaved_glm``) are read as that engine does whatever ``engine`` says; YaRN
    with ``mrope_section`` follows ``engine``."""
    has_sections = rope.get("mrope_section") is not None
    if kind == "openpangu":
        if not has_sections or not flag(rope.get("mrope_interleaved", False),
                                        "mrope_interleaved", where):
            raise ConfigError(f"{where}: rope_type 'openpangu' needs mrope_section and "
                              f"mrope_interleaved=true (vLLM: 'Pangu mrope lacks necessary "
                              f"parameters')")
        return EngineMRope("default", None, openpangu_pair_axes, False)
    if not has_sections or kind not in ("default", "yarn"):
        return None
    if flag(rope.get("video_rope", False), "video_rope", where):
        factor = number(rope.get("factor", 1.0), "factor", where)
        scaling = (_yarn(rope, factor, _context(rope, config, where, required=False), where)
                   if factor > 1 else None)
        return EngineMRope("yarn" if scaling else "default", scaling, bailing_pair_axes, False)
    interleaved = flag(rope.get("mrope_interleaved", False), "mrope_interleaved", where)
    if kind == "default":
        if interleaved and flag(rope.get("mrope_interleaved_glm", False),
                                "mrope_interleaved_glm", where):
            return EngineMRope("default", None, glm_pair_axes, False)
        return None
    if engine == "transformers":
        return None
    if rope.get("factor") is None:
        raise ConfigError(f"{where}: rope_type 'yarn' with mrope_section needs 'factor' "
                          f"({engine} reads it)")
    factor = number(rope["factor"], "factor", where)
    context = _context(rope, config, where, required=engine == "vllm")
    # vLLM's MRotaryEmbedding passes 4·L as its max_position_embeddings (a larger cache for
    # Qwen2.5-VL's video positions), which YaRNScalingRotaryEmbedding._compute_inv_freq reads
    return EngineMRope("yarn", _yarn(rope, factor, 4 * context if engine == "vllm" else context,
                                     where), None, interleaved)
