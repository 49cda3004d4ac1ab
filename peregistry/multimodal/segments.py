"""The segments a multimodal sequence is described by — :class:`Text`, :class:`Image`,
:class:`Video`, :class:`Audio`, :class:`AudioVisual` — each validated when made, and how many
tokens each occupies (the rules of :mod:`peregistry.multimodal` give them their ids).
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, TypeAlias

__all__ = ["Audio", "AudioVisual", "Image", "Segment", "SegmentBase", "Text", "Video", "audio_tokens"]


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
class SegmentBase:
    """The base class of the segments (:class:`Text`, :class:`Image`, :class:`Video`,
    :class:`Audio`, :class:`AudioVisual`), the type the public functions take a sequence of:
    mypy types ``[Text(5), Image((1, 4, 4))]`` as a list of the classes' common base (of
    ``object`` without one), pyright as a list of their union; both are sequences of this."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Text(SegmentBase):
    """``n`` text tokens (markers such as ``<|vision_start|>`` included): ids ``start + k`` on
    all three axes."""

    n: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "n", _int("Text", "n", self.n, minimum=0))


@dataclass(frozen=True, slots=True)
class Image(SegmentBase):
    """An image's placeholder tokens, from its patch grid ``(t, h, w)`` as the image processor
    reports it (``image_grid_thw``; before spatial merging, so ``h`` and ``w`` are multiples of
    ``spatial_merge_size``)."""

    grid_thw: tuple[int, int, int]

    def __post_init__(self) -> None:
        object.__setattr__(self, "grid_thw", _grid("Image", self.grid_thw))


@dataclass(frozen=True, slots=True)
class Video(SegmentBase):
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
class Audio(SegmentBase):
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
class AudioVisual(SegmentBase):
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
