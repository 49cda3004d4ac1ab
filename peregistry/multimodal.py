"""M-RoPE position ids for a mixed sequence of text, image, video and audio segments (Qwen family).

Multimodal RoPE (M-RoPE; Qwen2-VL, Wang et al. 2024, arXiv:2409.12191, §2.1) gives every token
three position ids, one per axis ``(temporal, height, width)``, which the ``mrope`` encoder turns
into rotation angles. Text tokens get the same id on all three axes; a vision token gets the id of
its temporal grid index, its row and its column, all shifted by the segment's start::

    from peregistry.multimodal import Image, Text, Video, position_ids

    ids, next_offset = position_ids(
        [Text(4), Image((1, 4, 6)), Text(3), Video((3, 4, 4), seconds_per_grid=1.0), Text(2)],
        convention="qwen2.5-vl",
    )
    ids.shape          # (3, 4 + 6 + 3 + 12 + 2)
    next_offset        # the id the first generated token gets (then +1 per token)

The rules, and where each comes from
------------------------------------
*Segment start.* Every segment starts at ``max(ids so far) + 1`` (at ``offset``, 0 by default, for
the first). This is the rule of Qwen's reference code (``get_rope_index`` in the Qwen2-VL /
Qwen2.5-VL / Qwen3-VL repositories and in transformers 4.x: ``st_idx =
llm_pos_ids_list[-1].max() + 1``). transformers 5.23 instead advances by ``max(h, w) /
spatial_merge_size`` after a vision segment (``current_pos += max(grid_thw[1], grid_thw[2]) //
spatial_merge_size``), which equals the reference only while a segment's temporal ids stay below
that: a video with more temporal grids than ``max(h, w) / merge`` (Qwen2-VL), or whose
time-aligned temporal ids run past it (Qwen2.5-VL), makes 5.23's following text reuse ids of the
video. We follow the reference; ``next_offset`` is ``max(ids) + 1`` in both.

*Vision tokens.* A ``(t, h, w)`` patch grid becomes ``t · (h/m) · (w/m)`` tokens (``m`` =
``spatial_merge_size``: the vision encoder merges ``m × m`` patches into one token), ordered
temporal-major then row then column. Token ``(i, r, c)`` gets ids ``(start + τ_i, start + r,
start + c)``, where the temporal offsets ``τ_i`` depend on the convention:

=================  ==========================  =================================================
convention         image ``τ_i``               video ``τ_i``
=================  ==========================  =================================================
``qwen2-vl``       ``i``                       ``i``
``qwen2.5-vl``     ``0`` (reference [#img]_)   ``⌊i · seconds_per_grid · tokens_per_second⌋``
``qwen2.5-omni``   ``i · tokens_per_second``   ``⌊i · seconds_per_grid · tokens_per_second⌋``
``qwen3-vl``       ``i``                       every frame is its own segment with ``τ = 0``,
                                               separated by its timestamp text (``frame_gaps``)
=================  ==========================  =================================================

``tokens_per_second`` is Qwen2.5-VL's ``vision_config.tokens_per_second`` (2 in the released
Qwen2.5-VL checkpoints) and Qwen2.5-Omni's ``position_id_per_seconds`` (25): temporal ids then
count absolute time, e.g. 25 ids per second (Qwen2.5-VL report, arXiv:2502.13923, §2.1.3;
Qwen2.5-Omni report, arXiv:2503.20215, §2.2 "TMRoPE"). The references compute
``(arange(t) * seconds * tokens_per_second).long()`` in float32; we compute in float64, or exactly
if ``seconds_per_grid`` is a :class:`fractions.Fraction` (``Fraction(2, 3)``), and truncate. Both
agree unless a product lies within float32 rounding of an integer.

.. [#img] Qwen's reference sets ``second_per_grid_t = 0`` for images; transformers 5.23 uses
   ``i`` (issue #45325). Qwen processors always emit ``t = 1`` for images, where both give 0.

*Qwen3-VL video.* Qwen3-VL writes a timestamp before every temporal grid of a video
(``<0.5 seconds><|vision_start|>`` frame tokens ``<|vision_end|><1.5 seconds><|vision_start|>``
...), and its ``get_rope_index`` splits the video grid into ``t`` grids of one frame
(``repeat_interleave(video_grid_thw, t)``; ``grid[:, 0] = 1``). A :class:`Video` segment then
covers the first frame's tokens to the last frame's, the text between consecutive frames
included; ``frame_gaps`` says how many text tokens lie between them (they depend on the tokenizer).
Equivalently, describe each frame as ``Image((1, h, w))`` and the text between as :class:`Text`.

*Audio (Qwen2.5-Omni).* An audio clip of ``n_frames`` mel frames (100 per second) becomes
``((n_frames - 1) // 2 + 1 - 2) // 2 + 1`` tokens (the audio encoder's two stride-2 stages,
``_get_feat_extract_output_lengths``), one per 40 ms, with consecutive ids like text, so with 25
ids per second they follow time as the video's temporal ids do.

*Audio with video (TMRoPE, ``use_audio_in_video``).* An :class:`AudioVisual` segment is the whole
block ``<|vision_bos|><|audio_bos|> ... <|audio_eos|><|vision_eos|>``: the two start markers share
one id ``s``, the video (temporal ids as above) and the audio (``s + 1 + k``) both start at
``s + 1``, and their tokens are interleaved in chunks of ``seconds_per_chunk`` seconds
(``tokens_per_second · seconds_per_chunk`` temporal ids): video chunk 0, audio chunk 0, video
chunk 1, ... (Qwen2.5-Omni ``get_chunked_index``; a chunk ends at the first token whose id, less
``s + 1``, reaches the next multiple of the chunk length, and one token closes at most one chunk).
The two end markers share the id ``max(ids so far) + 1``. The Qwen2.5-Omni reference takes the
largest id of the *last chunk* + 1 there instead, which is the same except when the video's
largest id lies above the last audio chunk's (a clip with fewer audio tokens than the video spans
ids; e.g. a one-grid video whose ``h/m`` exceeds the audio length): we keep ``max + 1`` so ids
never repeat.

Markers such as ``<|vision_start|>`` are ordinary text tokens: count them in the :class:`Text`
segments around an image, video or audio (only :class:`AudioVisual` includes its own markers, as
its start and end pairs share ids).

Padding
-------
:func:`batch_position_ids` takes one segment list per row and either an ``attention_mask``
(``(batch, seq)``; the ids fill the slots where it is nonzero, in order, so left, right or any
padding works) or ``padding_side``. Padded slots get ``pad_value``: 1 by default, as Qwen's
reference code and transformers' Qwen2.5-Omni do (transformers 5.23's Qwen2-VL/2.5-VL/3-VL fill 0;
pass ``pad_value=0`` to match them). Padded slots are masked out of attention, so the value only
matters for bit-equality with another implementation.

Computation
-----------
Grid sizes and lengths are host metadata, so the ids are computed on the host with Python and
NumPy integer arithmetic and converted once at the end, through the backend adapter, to the
caller's namespace (``xp=`` a module or backend name, or ``like=`` an array) and device, as the
namespace's default integer dtype (int64; int32 for JAX without ``jax_enable_x64``). NumPy is
imported only when a function is called.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeAlias

from ._services import current_services

if TYPE_CHECKING:
    import numpy as np

    from .backends._base import Backend

__all__ = [
    "CONVENTIONS",
    "Audio",
    "AudioVisual",
    "BatchPositionIds",
    "Convention",
    "Image",
    "PositionIds",
    "Segment",
    "Text",
    "Video",
    "batch_position_ids",
    "num_tokens",
    "position_ids",
    "segment_spans",
]

Convention: TypeAlias = Literal["qwen2-vl", "qwen2.5-vl", "qwen2.5-omni", "qwen3-vl"]
#: The model conventions :func:`position_ids` knows.
CONVENTIONS: tuple[str, ...] = ("qwen2-vl", "qwen2.5-vl", "qwen2.5-omni", "qwen3-vl")

#: ``tokens_per_second`` when not given: Qwen2.5-VL checkpoints' ``vision_config.tokens_per_second``
#: and Qwen2.5-Omni's ``position_id_per_seconds``.
DEFAULT_TOKENS_PER_SECOND: dict[str, int] = {"qwen2.5-vl": 2, "qwen2.5-omni": 25}
#: Qwen2.5-Omni's ``seconds_per_chunk``.
DEFAULT_SECONDS_PER_CHUNK = 2


# -- validation helpers ----------------------------------------------------------------------------
def _int(owner: str, name: str, value: Any, *, minimum: int) -> int:
    """``value`` as a Python int (any integer type, bool excluded), at least ``minimum``."""
    if isinstance(value, bool):
        raise TypeError(f"{owner}: {name} must be an integer >= {minimum}, got {value!r}")
    try:
        out = operator.index(value)
    except TypeError:
        raise TypeError(f"{owner}: {name} must be an integer >= {minimum}, got "
                        f"{value!r} ({type(value).__name__})") from None
    if out < minimum:
        raise ValueError(f"{owner}: {name} must be an integer >= {minimum}, got {out}")
    return out


def _positive_real(owner: str, name: str, value: Any) -> float | Fraction:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{owner}: {name} must be a positive real number (int, float or "
                        f"fractions.Fraction), got {value!r} ({type(value).__name__})")
    out: float | Fraction
    if isinstance(value, numbers.Integral):
        out = int(value)
    elif isinstance(value, numbers.Rational):
        out = Fraction(int(value.numerator), int(value.denominator))
    else:
        out = float(value)
    if not (out > 0 and math.isfinite(out)):
        raise ValueError(f"{owner}: {name} must be a positive finite number, got {value!r}")
    return out


def _grid(owner: str, value: Any) -> tuple[int, int, int]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence) or len(value) != 3:
        raise TypeError(f"{owner}: grid_thw must be a sequence of three integers (t, h, w), "
                        f"got {value!r}")
    t, h, w = (_int(owner, f"grid_thw[{i}] ({'thw'[i]})", v, minimum=1)
               for i, v in enumerate(value))
    return t, h, w


# -- segments --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Text:
    """``n`` text tokens (markers such as ``<|vision_start|>`` included): ids ``start + k`` on
    all three axes."""

    n: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "n", _int("Text", "n", self.n, minimum=0))


@dataclass(frozen=True, slots=True)
class Image:
    """An image's placeholder tokens, from its patch grid ``(t, h, w)`` as the image processor
    reports it (``image_grid_thw``; before spatial merging, so ``h`` and ``w`` are multiples of
    ``spatial_merge_size``)."""

    grid_thw: tuple[int, int, int]

    def __post_init__(self) -> None:
        object.__setattr__(self, "grid_thw", _grid("Image", self.grid_thw))


@dataclass(frozen=True, slots=True)
class Video:
    """A video's placeholder tokens, from its patch grid ``(t, h, w)`` (``video_grid_thw``).

    :ivar seconds_per_grid: seconds of video per temporal grid (``temporal_patch_size / fps``,
        the processor's ``second_per_grid_ts``); 1.0 when unknown, as the references default.
        Used by ``qwen2.5-vl`` and ``qwen2.5-omni``; the others do not encode time in the ids.
    :ivar frame_gaps: ``qwen3-vl`` only: the number of text tokens between consecutive frames
        (``<|vision_end|>``, the next frame's timestamp, ``<|vision_start|>``), one int for every
        gap or a sequence of ``t - 1`` ints. Required there when ``t > 1``.
    """

    grid_thw: tuple[int, int, int]
    seconds_per_grid: float | Fraction = 1.0
    frame_gaps: int | tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        grid = _grid("Video", self.grid_thw)
        object.__setattr__(self, "grid_thw", grid)
        object.__setattr__(self, "seconds_per_grid",
                           _positive_real("Video", "seconds_per_grid", self.seconds_per_grid))
        gaps = self.frame_gaps
        if gaps is None:
            return
        if isinstance(gaps, Sequence) and not isinstance(gaps, str | bytes):
            if len(gaps) != grid[0] - 1:
                raise ValueError(f"Video: frame_gaps must hold t - 1 = {grid[0] - 1} counts (one "
                                 f"per gap between the {grid[0]} frames), got {len(gaps)}: "
                                 f"{tuple(gaps)!r}")
            out = tuple(_int("Video", f"frame_gaps[{i}]", g, minimum=0)
                        for i, g in enumerate(gaps))
        else:
            out = (_int("Video", "frame_gaps", gaps, minimum=0),) * (grid[0] - 1)
        object.__setattr__(self, "frame_gaps", out)

    @property
    def gaps(self) -> tuple[int, ...]:
        """``frame_gaps`` as ``t - 1`` counts (empty if not given)."""
        gaps = self.frame_gaps
        return gaps if isinstance(gaps, tuple) else ()


def audio_tokens(n_frames: int) -> int:
    """Tokens of an audio clip of ``n_frames`` mel frames in Qwen2.5-Omni: two stride-2 stages,
    ``((n_frames - 1) // 2 + 1 - 2) // 2 + 1`` (``_get_feat_extract_output_lengths``)."""
    return ((n_frames - 1) // 2 + 1 - 2) // 2 + 1


@dataclass(frozen=True, slots=True)
class Audio:
    """An audio clip's placeholder tokens (Qwen2.5-Omni), given by exactly one of

    :ivar n_frames: its mel frames (the feature extractor's ``feature_attention_mask.sum()``, 100
        per second); the token count is :func:`audio_tokens` of it.
    :ivar n_tokens: its token count directly.
    """

    n_frames: int | None = None
    n_tokens: int | None = None

    def __post_init__(self) -> None:
        if (self.n_frames is None) == (self.n_tokens is None):
            raise TypeError(f"Audio: give exactly one of n_frames (mel frames) or n_tokens, got "
                            f"n_frames={self.n_frames!r}, n_tokens={self.n_tokens!r}")
        if self.n_frames is not None:
            frames = _int("Audio", "n_frames", self.n_frames, minimum=1)
            tokens = audio_tokens(frames)
            if tokens < 1:
                raise ValueError(f"Audio: n_frames={frames} gives {tokens} audio tokens; the "
                                 f"encoder needs n_frames >= 3 for one token")
            object.__setattr__(self, "n_frames", frames)
        else:
            object.__setattr__(self, "n_tokens",
                               _int("Audio", "n_tokens", self.n_tokens, minimum=1))

    @property
    def length(self) -> int:
        """The number of audio tokens."""
        if self.n_tokens is not None:
            return self.n_tokens
        assert self.n_frames is not None
        return audio_tokens(self.n_frames)


@dataclass(frozen=True, slots=True)
class AudioVisual:
    """A Qwen2.5-Omni video with its audio track (``use_audio_in_video=True``): the whole block
    ``<|vision_bos|><|audio_bos|>`` (one shared id), the video and audio tokens interleaved in
    time chunks, ``<|audio_eos|><|vision_eos|>`` (one shared id); ``4 + video + audio`` tokens."""

    video: Video
    audio: Audio

    def __post_init__(self) -> None:
        if not isinstance(self.video, Video):
            raise TypeError(f"AudioVisual: video must be a Video, got {self.video!r}")
        if not isinstance(self.audio, Audio):
            raise TypeError(f"AudioVisual: audio must be an Audio, got {self.audio!r}")
        if self.video.frame_gaps is not None:
            raise ValueError("AudioVisual: frame_gaps is for qwen3-vl videos; an Omni video "
                             "with audio has no text between its frames")


Segment: TypeAlias = Text | Image | Video | Audio | AudioVisual
_SEGMENT_TYPES = (Text, Image, Video, Audio, AudioVisual)


class PositionIds(NamedTuple):
    """What :func:`position_ids` returns (unpacks as ``ids, next_offset``)."""

    #: ``(3, seq)`` integer array (temporal, height, width) in the caller's namespace and device.
    ids: Any
    #: ``max(ids) + 1``: the id of the first generated token; each further token adds 1.
    #: (transformers' ``rope_deltas`` is ``next_offset - seq``.)
    next_offset: int


class BatchPositionIds(NamedTuple):
    """What :func:`batch_position_ids` returns (unpacks as ``ids, next_offsets``)."""

    #: ``(3, batch, seq)`` integer array; padded slots hold ``pad_value``.
    ids: Any
    #: Per row, ``max(row's ids) + 1``: where that row's generated tokens continue.
    next_offsets: tuple[int, ...]


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


def _length(seg: Segment, merge: int) -> int:
    if isinstance(seg, Text):
        return seg.n
    if isinstance(seg, Audio):
        return seg.length
    if isinstance(seg, AudioVisual):
        return 4 + _length(seg.video, merge) + seg.audio.length
    t, h, w = seg.grid_thw
    gaps = sum(seg.gaps) if isinstance(seg, Video) else 0
    return t * (h // merge) * (w // merge) + gaps


def _describe(segments: Sequence[Segment], merge: int) -> str:
    parts = [f"{type(seg).__name__} {_length(seg, merge)}" for seg in segments]
    if len(parts) > 8:
        parts = [*parts[:8], f"... {len(parts) - 8} more"]
    return " + ".join(parts) or "no segments"


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


# -- output ----------------------------------------------------------------------------------------
def _target(owner: str, xp: Any, like: Any, device: Any) -> tuple[Backend, Any]:
    """The backend and device of the output: ``like``'s, or ``xp``'s, or NumPy's."""
    registry = current_services()
    backend = None
    if like is not None:
        backend = registry.backend_of(like)
        if backend is None:
            raise TypeError(f"{owner}: like must be an array of a registered backend "
                            f"({', '.join(b.name for b in registry.backends())}), got "
                            f"{type(like).__module__}.{type(like).__qualname__}")
        if device is None:
            device = backend.device(like)
    if xp is not None:
        from_xp = registry.backend_of_namespace(xp)
        if backend is not None and from_xp is not backend:
            raise TypeError(f"{owner}: xp={getattr(xp, '__name__', xp)!r} ({from_xp.name}) and "
                            f"like (a {backend.name} array) disagree; give one of them")
        backend = from_xp
    if backend is None:
        backend = registry.backend("numpy")
    return backend, device


def _dtype_name(dtype: Any) -> str:
    name = getattr(dtype, "__name__", None)
    return name if isinstance(name, str) else str(dtype)


def _to_output(owner: str, host: np.ndarray[Any, Any], backend: Backend, device: Any,
               dtype: Any) -> Any:
    xp = backend.namespace()
    if dtype is None:
        dtype = xp.__array_namespace_info__().default_dtypes(device=device)["integral"]
    else:
        resolved = getattr(xp, dtype, None) if isinstance(dtype, str) else dtype
        try:
            ok = resolved is not None and bool(xp.isdtype(resolved, "integral"))
        except Exception:
            ok = False
        if not ok:
            names = ", ".join(n for n in ("int8", "int16", "int32", "int64", "uint8", "uint16",
                                          "uint32", "uint64") if hasattr(xp, n))
            raise TypeError(f"{owner}: dtype={_dtype_name(dtype)} is not an integer dtype of "
                            f"{backend.name}; allowed: None (the default integer dtype) or one "
                            f"of {names} (a dtype or its name)")
        dtype = resolved
    info = xp.iinfo(dtype)
    if host.size and (int(host.max()) > info.max or int(host.min()) < info.min):
        raise ValueError(f"{owner}: ids span [{int(host.min())}, {int(host.max())}], which "
                         f"{_dtype_name(dtype)} cannot hold (range [{info.min}, {info.max}]); "
                         f"pass a wider integer dtype (int64; JAX needs jax_enable_x64)")
    import numpy as np

    return backend.from_numpy(np.ascontiguousarray(host), dtype=dtype, device=device)


# -- public functions ------------------------------------------------------------------------------
def num_tokens(segments: Sequence[Segment], *, convention: Convention = "qwen2-vl",
               spatial_merge_size: int = 2) -> int:
    """How many tokens ``segments`` occupy (the length of the ids :func:`position_ids` returns),
    e.g. to build ``input_ids`` or an attention mask."""
    s = _settings("num_tokens", convention, spatial_merge_size, None, None)
    return sum(_length(seg, s.merge) for seg in _checked("num_tokens", segments, s))


def segment_spans(segments: Sequence[Segment], *, convention: Convention = "qwen2-vl",
                  spatial_merge_size: int = 2) -> list[tuple[str, int, int]]:
    """``(kind, start, stop)`` token spans of each segment (``kind`` is ``"text"``,
    ``"image"``, ...), in order: which tokens of the ids belong to which segment."""
    s = _settings("segment_spans", convention, spatial_merge_size, None, None)
    spans, start = [], 0
    for seg in _checked("segment_spans", segments, s):
        stop = start + _length(seg, s.merge)
        spans.append((type(seg).__name__.lower(), start, stop))
        start = stop
    return spans


def position_ids(
    segments: Sequence[Segment],
    *,
    convention: Convention = "qwen2-vl",
    spatial_merge_size: int = 2,
    tokens_per_second: float | Fraction | None = None,
    seconds_per_chunk: float | Fraction | None = None,
    offset: int = 0,
    num_tokens: int | None = None,
    xp: Any = None,
    like: Any = None,
    device: Any = None,
    dtype: Any = None,
) -> PositionIds:
    """M-RoPE ids ``(3, seq)`` of one sequence described by ``segments``, and the offset that
    generated tokens continue from (the rules and their sources are in the module docstring).

    :param segments: :class:`Text`, :class:`Image`, :class:`Video`, :class:`Audio` and
        :class:`AudioVisual` segments in sequence order.
    :param convention: ``"qwen2-vl"``, ``"qwen2.5-vl"`` (time-aligned video ids),
        ``"qwen2.5-omni"`` (TMRoPE, audio) or ``"qwen3-vl"`` (per-frame timestamps).
    :param spatial_merge_size: patches merged per side into one token (2 in every Qwen model).
    :param tokens_per_second: temporal ids per second of video/audio; only for ``qwen2.5-vl``
        (default 2) and ``qwen2.5-omni`` (default 25).
    :param seconds_per_chunk: ``qwen2.5-omni`` only: length of the audio/video interleaving
        chunks (default 2).
    :param offset: the id of the first token (0; e.g. the previous turn's ``next_offset``).
    :param num_tokens: if given, the token count the segments must add up to (say
        ``input_ids.shape[-1]``): a mismatch is an error listing the segments' lengths.
    :param xp: the output namespace (``numpy``, ``torch``, ``jax.numpy``, ``array_api_strict``,
        or a backend name); default: ``like``'s, else NumPy.
    :param like: an array whose namespace and device the output takes.
    :param device: the output device (default: ``like``'s, else the namespace's default).
    :param dtype: an integer dtype or its name (default: the namespace's default integer dtype).
    :returns: ``(ids, next_offset)``, a :class:`PositionIds`.
    """
    owner = "position_ids"
    s = _settings(owner, convention, spatial_merge_size, tokens_per_second, seconds_per_chunk)
    segs = _checked(owner, segments, s)
    start = _int(owner, "offset", offset, minimum=0)
    if num_tokens is not None:
        expected = _int(owner, "num_tokens", num_tokens, minimum=0)
        got = sum(_length(seg, s.merge) for seg in segs)
        if got != expected:
            raise ValueError(f"{owner}: the segments hold {got} tokens ({_describe(segs, s.merge)}, "
                             f"with spatial_merge_size={s.merge}) but num_tokens={expected}")
    backend, dev = _target(owner, xp, like, device)
    host, nxt = _row(segs, s, start)
    return PositionIds(_to_output(owner, host, backend, dev, dtype), nxt)


def batch_position_ids(
    batch: Sequence[Sequence[Segment]],
    *,
    convention: Convention = "qwen2-vl",
    attention_mask: Any = None,
    padding_side: Literal["right", "left"] = "right",
    length: int | None = None,
    pad_value: int = 1,
    spatial_merge_size: int = 2,
    tokens_per_second: float | Fraction | None = None,
    seconds_per_chunk: float | Fraction | None = None,
    xp: Any = None,
    like: Any = None,
    device: Any = None,
    dtype: Any = None,
) -> BatchPositionIds:
    """M-RoPE ids ``(3, batch, seq)`` of padded rows, one segment list per row.

    With ``attention_mask`` (``(batch, seq)``, any namespace or nested lists; nonzero = a real
    token), each row's ids fill its unmasked slots in order, so left, right or mixed padding all
    work, and every row's unmasked count must equal its segments' token count. The output then
    takes the mask's namespace and device unless ``xp``/``like``/``device`` say otherwise.
    Without it, rows are padded on ``padding_side`` to ``length`` (default: the longest row).

    Padded slots hold ``pad_value`` (1, as Qwen's reference code; transformers 5.23's
    Qwen2-VL/2.5-VL/3-VL use 0). The other parameters are those of :func:`position_ids`.

    :returns: ``(ids, next_offsets)``, a :class:`BatchPositionIds`; ``next_offsets[b]`` is
        ``max`` of row ``b``'s ids ``+ 1``.
    """
    import numpy as np

    owner = "batch_position_ids"
    s = _settings(owner, convention, spatial_merge_size, tokens_per_second, seconds_per_chunk)
    if isinstance(batch, str | bytes) or not isinstance(batch, Sequence):
        raise TypeError(f"{owner}: batch must be a sequence of segment lists (one per row), got "
                        f"{batch!r}")
    if batch and isinstance(batch[0], _SEGMENT_TYPES):
        raise TypeError(f"{owner}: batch must be a list of segment lists, one per row; got a "
                        f"list of segments (use position_ids for one sequence, or wrap it: "
                        f"[segments])")
    rows = [_checked(owner, segs, s, where=f"batch[{b}]") for b, segs in enumerate(batch)]
    lengths = [sum(_length(seg, s.merge) for seg in row) for row in rows]
    pad = _int(owner, "pad_value", pad_value, minimum=-(2**63))

    if attention_mask is not None:
        if length is not None:
            raise ValueError(f"{owner}: give attention_mask or length, not both (the mask's "
                             f"width is the length); got length={length!r}")
        if padding_side != "right":
            raise ValueError(f"{owner}: padding_side={padding_side!r} has no meaning with an "
                             f"attention_mask (the mask says where the padding is); leave it")
        registry = current_services()
        mask_backend = registry.backend_of(attention_mask)
        if mask_backend is not None:
            if like is None and xp is None:
                like = attention_mask
            mask = np.asarray(mask_backend.to_numpy(attention_mask))
        else:
            mask = np.asarray(attention_mask)
        if mask.ndim != 2 or mask.shape[0] != len(rows):
            raise ValueError(f"{owner}: attention_mask must have shape (batch, seq) = "
                             f"({len(rows)}, seq), got {mask.shape}")
        if mask.dtype.kind not in "biuf":
            raise TypeError(f"{owner}: attention_mask must hold 0/1 values, got dtype {mask.dtype}")
        valid = mask != 0
        for b, n in enumerate(lengths):
            count = int(valid[b].sum())
            if count != n:
                raise ValueError(f"{owner}: row {b} has {count} unmasked tokens in "
                                 f"attention_mask, but its segments hold {n} "
                                 f"({_describe(rows[b], s.merge)}, with "
                                 f"spatial_merge_size={s.merge})")
    else:
        if padding_side not in ("right", "left"):
            raise ValueError(f"{owner}: padding_side must be 'right' or 'left', got "
                             f"{padding_side!r}")
        longest = max(lengths, default=0)
        width = longest if length is None else _int(owner, "length", length, minimum=0)
        if width < longest:
            raise ValueError(f"{owner}: length={width} is shorter than row "
                             f"{lengths.index(longest)}, whose segments "
                             f"hold {longest} tokens")
        valid = np.zeros((len(rows), width), dtype=bool)
        for b, n in enumerate(lengths):
            if padding_side == "right":
                valid[b, :n] = True
            else:
                valid[b, width - n:] = True

    out = np.full((3, *valid.shape), pad, dtype=np.int64)
    offsets = []
    for b, row in enumerate(rows):
        host, nxt = _row(row, s, 0)
        out[:, b, valid[b]] = host
        offsets.append(nxt)
    backend, dev = _target(owner, xp, like, device)
    return BatchPositionIds(_to_output(owner, out, backend, dev, dtype), tuple(offsets))
