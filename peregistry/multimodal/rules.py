"""The per-model rules: which conventions exist and their settings, which segments each accepts,
and the ids of one row (segment starts, the temporal offsets ``τ_i`` of each convention, the
grid blocks, Qwen3-VL's per-frame grids and Qwen2.5-Omni's audio/video chunks), on the host with
NumPy integers. The table of rules and their sources is in :mod:`peregistry.multimodal`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from .segments import (
    _SEGMENT_TYPES,
    Audio,
    AudioVisual,
    Image,
    Segment,
    Text,
    Video,
    _int,
    _positive_real,
)

if TYPE_CHECKING:
    import numpy as np

__all__ = ["CONVENTIONS", "DEFAULT_SECONDS_PER_CHUNK", "DEFAULT_TOKENS_PER_SECOND", "Convention"]

Convention: TypeAlias = Literal["qwen2-vl", "qwen2.5-vl", "qwen2.5-omni", "qwen3-vl"]
#: The model conventions :func:`position_ids` knows.
CONVENTIONS: tuple[str, ...] = ("qwen2-vl", "qwen2.5-vl", "qwen2.5-omni", "qwen3-vl")

#: ``tokens_per_second`` when not given: Qwen2.5-VL checkpoints' ``vision_config.tokens_per_second``
#: and Qwen2.5-Omni's ``position_id_per_seconds``.
DEFAULT_TOKENS_PER_SECOND: dict[str, int] = {"qwen2.5-vl": 2, "qwen2.5-omni": 25}
#: Qwen2.5-Omni's ``seconds_per_chunk``.
DEFAULT_SECONDS_PER_CHUNK = 2


# -- settings --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Settings:
    convention: str
    merge: int
    tokens_per_second: float | Fraction
    seconds_per_chunk: float | Fraction


def _settings(owner: str, convention: Any, spatial_merge_size: Any, tokens_per_second: Any,
              seconds_per_chunk: Any) -> _Settings:
    if convention not in CONVENTIONS:
        raise ValueError(f"{owner}: convention must be one of {', '.join(map(repr, CONVENTIONS))}, "
                         f"got {convention!r}")
    merge = _int(owner, "spatial_merge_size", spatial_merge_size, minimum=1)
    if convention in DEFAULT_TOKENS_PER_SECOND:
        tps = (DEFAULT_TOKENS_PER_SECOND[convention] if tokens_per_second is None else
               _positive_real(owner, "tokens_per_second", tokens_per_second))
    elif tokens_per_second is not None:
        raise ValueError(f"{owner}: tokens_per_second={tokens_per_second!r} is used only by the "
                         f"time-aligned conventions 'qwen2.5-vl' and 'qwen2.5-omni'; "
                         f"{convention!r} does not encode time in its ids (leave it None)")
    else:
        tps = 1
    if convention == "qwen2.5-omni":
        spc = (DEFAULT_SECONDS_PER_CHUNK if seconds_per_chunk is None else
               _positive_real(owner, "seconds_per_chunk", seconds_per_chunk))
    elif seconds_per_chunk is not None:
        raise ValueError(f"{owner}: seconds_per_chunk={seconds_per_chunk!r} is used only by "
                         f"'qwen2.5-omni' (audio/video interleaving); leave it None for "
                         f"{convention!r}")
    else:
        spc = DEFAULT_SECONDS_PER_CHUNK
    return _Settings(str(convention), merge, tps, spc)


def _check_segment(owner: str, where: str, seg: Any, s: _Settings) -> None:
    if not isinstance(seg, _SEGMENT_TYPES):
        raise TypeError(f"{owner}: {where} must be a Text, Image, Video, Audio or AudioVisual "
                        f"segment, got {seg!r} ({type(seg).__name__})")
    if isinstance(seg, Audio | AudioVisual) and s.convention != "qwen2.5-omni":
        raise ValueError(f"{owner}: {where} is {type(seg).__name__}, but only the "
                         f"'qwen2.5-omni' convention has audio; got convention={s.convention!r}")
    video = seg.video if isinstance(seg, AudioVisual) else seg
    if isinstance(video, Image | Video):
        _, h, w = video.grid_thw
        for axis, size in (("h", h), ("w", w)):
            if size % s.merge:
                raise ValueError(
                    f"{owner}: {where} has grid_thw={video.grid_thw}: {axis}={size} is not "
                    f"divisible by spatial_merge_size={s.merge} (the vision encoder merges "
                    f"{s.merge}x{s.merge} patches into one token)")
    if isinstance(seg, Video):
        if s.convention == "qwen3-vl":
            if seg.frame_gaps is None and seg.grid_thw[0] > 1:
                raise ValueError(
                    f"{owner}: {where} has t={seg.grid_thw[0]} frames, and qwen3-vl puts a "
                    f"timestamp text between frames: give Video(..., frame_gaps=N) with the number "
                    f"of text tokens between consecutive frames (or describe each frame as "
                    f"Image((1, h, w)) with Text between)")
        elif seg.frame_gaps is not None:
            raise ValueError(f"{owner}: {where} sets frame_gaps, which only the 'qwen3-vl' "
                             f"convention has (text between video frames); got "
                             f"convention={s.convention!r}")


def _checked(owner: str, segments: Any, s: _Settings, where: str = "segments") -> list[Segment]:
    if isinstance(segments, (*_SEGMENT_TYPES, str, bytes)) or not isinstance(segments, Sequence):
        raise TypeError(f"{owner}: {where} must be a sequence (list or tuple) of segments, got "
                        f"{segments!r}")
    out = list(segments)
    for i, seg in enumerate(out):
        _check_segment(owner, f"{where}[{i}]", seg, s)
    return out


# -- the rules -------------------------------------------------------------------------------------
def _temporal_offsets(seg: Image | Video, s: _Settings) -> list[int]:
    """``τ_i`` of the table in the module docstring."""
    t = seg.grid_thw[0]
    if isinstance(seg, Image):
        if s.convention == "qwen2.5-vl":
            return [0] * t
        if s.convention == "qwen2.5-omni":
            # The reference: (arange(t) * 1 * position_id_per_seconds).long().
            return [math.floor(i * s.tokens_per_second) for i in range(t)]
        return list(range(t))
    if s.convention in ("qwen2.5-vl", "qwen2.5-omni"):
        # The references: (arange(t) * second_per_grid * tokens_per_second).long().
        return [math.floor(i * seg.seconds_per_grid * s.tokens_per_second) for i in range(t)]
    return list(range(t))


def _grid_block(start: int, taus: Sequence[int], gh: int, gw: int) -> np.ndarray[Any, Any]:
    """``(3, t·gh·gw)`` ids, temporal-major then row then column."""
    import numpy as np

    tt, rr, cc = np.meshgrid(np.asarray(taus, dtype=np.int64), np.arange(gh, dtype=np.int64),
                             np.arange(gw, dtype=np.int64), indexing="ij")
    return np.stack([tt.reshape(-1), rr.reshape(-1), cc.reshape(-1)]) + start


def _line(start: int, n: int) -> np.ndarray[Any, Any]:
    """``(3, n)`` ids ``start + k`` on every axis (text, markers, audio)."""
    import numpy as np

    return np.broadcast_to(np.arange(start, start + n, dtype=np.int64), (3, n))


def _chunk_bounds(values: Sequence[int], per_chunk: int) -> list[tuple[int, int]]:
    """Qwen2.5-Omni's ``get_chunked_index``: split nondecreasing ``values`` (ids less the block
    start) into ``[start, end)`` slices; a slice ends before the first value that reaches
    ``k · per_chunk`` for the next ``k`` (k = 1, 2, ...; one value closes at most one slice)."""
    bounds = []
    begin, k = 0, 1
    for i, v in enumerate(values):
        if v >= k * per_chunk:
            bounds.append((begin, i))
            begin, k = i, k + 1
    bounds.append((begin, len(values)))
    return bounds


def _row(segments: Sequence[Segment], s: _Settings, offset: int) -> tuple[np.ndarray[Any, Any], int]:
    """The ``(3, n)`` int64 ids of one row and ``max + 1`` (``offset`` if the row is empty)."""
    import numpy as np

    blocks: list[np.ndarray[Any, Any]] = []
    nxt = offset  # max(ids so far) + 1

    def add(block: np.ndarray[Any, Any]) -> None:
        nonlocal nxt
        if block.shape[1]:
            blocks.append(block)
            nxt = max(nxt, int(block.max()) + 1)

    m = s.merge
    for seg in segments:
        if isinstance(seg, Text):
            add(_line(nxt, seg.n))
        elif isinstance(seg, Audio):
            add(_line(nxt, seg.length))
        elif isinstance(seg, Image) or (isinstance(seg, Video) and s.convention != "qwen3-vl"):
            _, h, w = seg.grid_thw
            add(_grid_block(nxt, _temporal_offsets(seg, s), h // m, w // m))
        elif isinstance(seg, Video):  # qwen3-vl: one single-frame grid per frame, text between
            t, h, w = seg.grid_thw
            gaps = seg.gaps
            for i in range(t):
                if i:
                    add(_line(nxt, gaps[i - 1]))
                add(_grid_block(nxt, [0], h // m, w // m))
        else:  # AudioVisual (qwen2.5-omni TMRoPE)
            _, h, w = seg.video.grid_thw
            add(_line(nxt, 1))
            add(_line(nxt - 1, 1))  # <|audio_bos|> shares <|vision_bos|>'s id
            base = nxt
            video = _grid_block(base, _temporal_offsets(seg.video, s), h // m, w // m)
            audio = _line(base, seg.audio.length)
            per_chunk = int(s.tokens_per_second * s.seconds_per_chunk)
            v_chunks = _chunk_bounds((video[0] - base).tolist(), per_chunk)
            a_chunks = _chunk_bounds((audio[0] - base).tolist(), per_chunk)
            for j in range(max(len(v_chunks), len(a_chunks))):
                if j < len(v_chunks):
                    add(video[:, v_chunks[j][0]:v_chunks[j][1]])
                if j < len(a_chunks):
                    add(audio[:, a_chunks[j][0]:a_chunks[j][1]])
            add(_line(nxt, 1))
            add(_line(nxt - 1, 1))  # <|vision_eos|> shares <|audio_eos|>'s id
    ids = np.concatenate(blocks, axis=1) if blocks else np.zeros((3, 0), dtype=np.int64)
    return ids, nxt
