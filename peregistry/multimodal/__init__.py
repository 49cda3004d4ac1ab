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

from .output import (
    BatchPositionIds,
    PositionIds,
    batch_position_ids,
    num_tokens,
    position_ids,
    segment_spans,
)
from .rules import CONVENTIONS, Convention
from .rules import DEFAULT_SECONDS_PER_CHUNK as DEFAULT_SECONDS_PER_CHUNK
from .rules import DEFAULT_TOKENS_PER_SECOND as DEFAULT_TOKENS_PER_SECOND
from .segments import Audio, AudioVisual, Image, Segment, SegmentBase, Text, Video
from .segments import audio_tokens as audio_tokens

__all__ = [
    "CONVENTIONS",
    "Audio",
    "AudioVisual",
    "BatchPositionIds",
    "Convention",
    "Image",
    "PositionIds",
    "Segment",
    "SegmentBase",
    "Text",
    "Video",
    "batch_position_ids",
    "num_tokens",
    "position_ids",
    "segment_spans",
]
