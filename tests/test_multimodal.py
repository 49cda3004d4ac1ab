"""peregistry.multimodal: M-RoPE ids of text/image/video/audio sequences.

Three kinds of evidence: small cases worked out by hand from the Qwen papers' and reference
docstrings' rules; exact equality with transformers 5.23's ``get_rope_index`` wherever it follows
Qwen's reference rule (every convention, with and without padding); and the long-video cases where
5.23 advances by ``max(h, w) / merge`` instead, where we follow the reference's ``max + 1``.
"""

from __future__ import annotations

import math
import subprocess
import sys
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from peregistry.multimodal import (
    Audio,
    AudioVisual,
    Image,
    Segment,
    Text,
    Video,
    audio_tokens,
    batch_position_ids,
    num_tokens,
    position_ids,
)


def ids_of(segments: list[Segment], **kwargs: Any) -> tuple[np.ndarray[Any, Any], int]:
    ids, nxt = position_ids(segments, **kwargs)
    assert isinstance(ids, np.ndarray) and ids.dtype == np.int64, (type(ids), ids.dtype)
    return ids, nxt


def cols(*triples: tuple[int, int, int]) -> np.ndarray[Any, Any]:
    """``(3, n)`` from per-token ``(t, h, w)`` triples: easier to read against the papers."""
    return np.asarray(triples, dtype=np.int64).T


def line(start: int, n: int) -> list[tuple[int, int, int]]:
    return [(p, p, p) for p in range(start, start + n)]


# -- hand-computed cases ---------------------------------------------------------------------------
def test_text_only_is_arange_on_every_axis() -> None:
    ids, nxt = ids_of([Text(3), Text(2)])
    np.testing.assert_array_equal(ids, np.tile(np.arange(5), (3, 1)))
    assert nxt == 5


def test_qwen2_vl_image_between_text() -> None:
    # Qwen2-VL §2.1: an image token gets (start, start + row, start + col); text goes on from the
    # largest id + 1. A 4x4 patch grid merges 2x2 into 2x2 = 4 tokens.
    ids, nxt = ids_of([Text(2), Image((1, 4, 4)), Text(2)])
    expected = cols(*line(0, 2), (2, 2, 2), (2, 2, 3), (2, 3, 2), (2, 3, 3), *line(4, 2))
    np.testing.assert_array_equal(ids, expected)
    assert nxt == 6


def test_qwen2_vl_video_temporal_axis_counts_grids() -> None:
    ids, nxt = ids_of([Text(1), Video((3, 2, 4)), Text(1)])
    expected = cols(*line(0, 1), (1, 1, 1), (1, 1, 2), (2, 1, 1), (2, 1, 2), (3, 1, 1), (3, 1, 2),
                    *line(4, 1))
    np.testing.assert_array_equal(ids, expected)
    assert nxt == 5


def test_qwen2_5_vl_reference_docstring_example() -> None:
    # The example of Qwen's get_rope_index docstring: 3 temporal patches of 2x2 (merged) tokens,
    # fps 1, temporal_patch_size 2 (2 s per grid), 25 tokens per second: temporal ids step 50,
    # and "the text start position_ids [is] the max vision position_ids plus 1" = 101.
    ids, nxt = ids_of([Video((3, 4, 4), seconds_per_grid=2.0), Text(5)],
                      convention="qwen2.5-vl", tokens_per_second=25)
    np.testing.assert_array_equal(ids[0], [0] * 4 + [50] * 4 + [100] * 4 + list(range(101, 106)))
    np.testing.assert_array_equal(ids[1], [0, 0, 1, 1] * 3 + list(range(101, 106)))
    np.testing.assert_array_equal(ids[2], [0, 1, 0, 1] * 3 + list(range(101, 106)))
    assert nxt == 106


def test_qwen2_5_vl_truncates_fractional_times_and_accepts_fractions() -> None:
    # fps = 3, temporal_patch_size = 2: 2/3 s per grid, 2 ids per second -> floor(4i/3).
    segs: list[Segment] = [Video((4, 2, 2), seconds_per_grid=Fraction(2, 3))]
    ids, nxt = ids_of(segs, convention="qwen2.5-vl")
    np.testing.assert_array_equal(ids[0], [0, 1, 2, 4])
    assert nxt == 5
    float_ids, _ = ids_of([Video((4, 2, 2), seconds_per_grid=2 / 3)], convention="qwen2.5-vl")
    np.testing.assert_array_equal(float_ids, ids)


def test_qwen2_5_vl_images_have_temporal_offset_zero() -> None:
    # Qwen's reference sets second_per_grid_t = 0 for images.
    ids, _ = ids_of([Image((2, 2, 2))], convention="qwen2.5-vl")
    np.testing.assert_array_equal(ids, cols((0, 0, 0), (0, 0, 0)))


def test_qwen3_vl_video_frames_restart_time_after_their_timestamps() -> None:
    # Qwen3-VL: <t0><vs> frame <ve><t1><vs> frame <ve>; every frame is a t=1 grid at its start.
    ids, nxt = ids_of([Text(2), Video((2, 2, 2), frame_gaps=3), Text(1)], convention="qwen3-vl")
    np.testing.assert_array_equal(ids, cols(*line(0, 2), (2, 2, 2), *line(3, 3), (6, 6, 6),
                                            *line(7, 1)))
    assert nxt == 8
    frames, _ = ids_of([Text(2), Image((1, 2, 2)), Text(3), Image((1, 2, 2)), Text(1)],
                       convention="qwen3-vl")
    np.testing.assert_array_equal(frames, ids)


@pytest.mark.parametrize(("frames", "tokens"), [(3, 1), (6, 1), (7, 2), (100, 25), (400, 100),
                                                (3000, 750)])
def test_omni_audio_token_count(frames: int, tokens: int) -> None:
    # Two stride-2 stages: 100 mel frames per second -> 25 tokens per second.
    assert audio_tokens(frames) == tokens
    assert Audio(n_frames=frames).length == tokens


def test_omni_audio_visual_interleaves_chunks_and_shares_marker_ids() -> None:
    # TMRoPE: video grids at 0 s and 2 s (ids 0 and 50 at 25 ids/s), 3 audio tokens; chunks of
    # 2 s = 50 ids: video chunk 0, audio chunk 0, video chunk 1. The two start markers share one
    # id, so do the two end markers.
    seg = AudioVisual(Video((2, 2, 2), seconds_per_grid=2.0), Audio(n_tokens=3))
    ids, nxt = ids_of([Text(1), seg, Text(1)], convention="qwen2.5-omni")
    expected = cols((0, 0, 0), (1, 1, 1), (1, 1, 1), (2, 2, 2), *line(2, 3), (52, 2, 2),
                    (53, 53, 53), (53, 53, 53), (54, 54, 54))
    np.testing.assert_array_equal(ids, expected)
    assert nxt == 55
    assert num_tokens([Text(1), seg, Text(1)], convention="qwen2.5-omni") == ids.shape[1] == 11


def test_omni_image_and_video_are_time_aligned() -> None:
    ids, _ = ids_of([Image((2, 2, 2)), Video((3, 2, 2), seconds_per_grid=0.5)],
                    convention="qwen2.5-omni")
    # Images: 1 s per temporal grid (25 ids); video: 0.5 s per grid -> floor(12.5 i).
    np.testing.assert_array_equal(ids[0], [0, 25, 26, 38, 51])


def test_offset_starts_the_first_segment() -> None:
    ids, nxt = ids_of([Text(1), Image((1, 2, 4))], offset=10)
    np.testing.assert_array_equal(ids, cols((10, 10, 10), (11, 11, 11), (11, 11, 12)))
    assert nxt == 13


def test_empty_sequence() -> None:
    ids, nxt = ids_of([])
    assert ids.shape == (3, 0) and nxt == 0
    assert position_ids([], offset=4).next_offset == 4


# -- the long-video rule: max(ids so far) + 1, not max(h, w) / merge --------------------------------
@pytest.mark.parametrize(("convention", "video", "tps"), [
    ("qwen2-vl", Video((8, 4, 4)), None),                          # 8 grids, 2x2 tokens each
    ("qwen2.5-vl", Video((6, 4, 4), seconds_per_grid=2.0), 2),     # 12 s: temporal ids up to 20
])
def test_long_video_text_continues_after_the_largest_id(convention: str, video: Video,
                                                        tps: int | None) -> None:
    segs: list[Segment] = [Text(2), video, Text(3)]
    ids, nxt = ids_of(segs, convention=convention, tokens_per_second=tps)
    n_video = video.grid_thw[0] * 2 * 2
    vid = ids[:, 2:-3]
    assert vid.shape[1] == n_video
    last_t = 2 + (7 if convention == "qwen2-vl" else 20)
    assert vid[0].max() == last_t
    np.testing.assert_array_equal(ids[:, -3:], np.tile(np.arange(last_t + 1, last_t + 4), (3, 1)))
    assert nxt == last_t + 4
    # transformers 5.23 would start the text at 2 + max(h, w) / 2 = 4, inside the video's ids.
    assert ids[0, -3] > 4


# -- comparisons with transformers' get_rope_index ---------------------------------------------------
TEXT, PAD = 1000, 151643
VISION_START, VISION_END, IMAGE, VIDEO = 151652, 151653, 151655, 151656
AUDIO, AUDIO_START, AUDIO_END = 151646, 151647, 151648


def reference_model(convention: str, *, tokens_per_second: int = 2) -> Any:
    """transformers' ``get_rope_index`` bound to a bare object with a real config: no weights."""
    pytest.importorskip("torch", reason="transformers' get_rope_index is written in torch")
    pytest.importorskip("transformers", reason="transformers is the reference for these tests; "
                                               "install it (pip install transformers) to run them")
    if convention == "qwen2.5-omni":
        from transformers.models.qwen2_5_omni.configuration_qwen2_5_omni import (
            Qwen2_5OmniThinkerConfig,
        )
        from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import (
            Qwen2_5OmniPreTrainedModelForConditionalGeneration as Omni,
        )

        class OmniRef:
            get_rope_index = Omni.get_rope_index
            get_chunked_index = Omni.get_chunked_index
            get_llm_pos_ids_for_vision = Omni.get_llm_pos_ids_for_vision

            def __init__(self) -> None:
                # Real checkpoints' thinker configs carry the vision marker ids.
                make: Any = Qwen2_5OmniThinkerConfig
                self.config = make(vision_start_token_id=VISION_START,
                                   vision_end_token_id=VISION_END)
                self.spatial_merge_size = self.config.vision_config.spatial_merge_size

        return OmniRef()
    model: Any
    config: Any
    if convention == "qwen2-vl":
        from transformers import Qwen2VLConfig
        from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel as model

        config = Qwen2VLConfig(vision_config={"spatial_merge_size": 2})
    elif convention == "qwen2.5-vl":
        from transformers import Qwen2_5_VLConfig
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel as model

        config = Qwen2_5_VLConfig(vision_config={"spatial_merge_size": 2,
                                                 "tokens_per_second": tokens_per_second})
    else:
        from transformers import Qwen3VLConfig
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel as model

        config = Qwen3VLConfig(vision_config={"spatial_merge_size": 2})

    class Ref:
        get_rope_index = model.get_rope_index
        get_vision_position_ids = model.get_vision_position_ids

        def __init__(self) -> None:
            self.config = config

    return Ref()


def tokens_of(segments: list[Segment], convention: str) -> tuple[list[int], list[int]]:
    """A row's input ids and mm_token_type_ids (0 text, 1 image, 2 video), markers included:
    the text token before an image/video/audio becomes its start marker, the one after it its end
    marker (the Omni reference finds segments by these)."""
    ids: list[int] = []
    types: list[int] = []
    marks: list[tuple[int, int, int, int]] = []
    for seg in segments:
        a = len(ids)
        if isinstance(seg, Text):
            ids += [TEXT] * seg.n
            types += [0] * seg.n
            continue
        if isinstance(seg, Audio):
            ids += [AUDIO] * seg.length
            types += [0] * seg.length
            marks.append((a, len(ids), AUDIO_START, AUDIO_END))
        elif isinstance(seg, AudioVisual):
            n_video = num_tokens([seg.video], convention="qwen2.5-omni")
            # Inside the block the reference's ids do not depend on the order of the tokens.
            block = ([VISION_START, AUDIO_START] + [VIDEO] * n_video + [AUDIO] * seg.audio.length
                     + [AUDIO_END, VISION_END])
            ids += block
            types += [0] * len(block)
        elif isinstance(seg, Video) and convention == "qwen3-vl":
            _, h, w = seg.grid_thw
            gaps = seg.gaps
            for i in range(seg.grid_thw[0]):
                if i:
                    ids += [TEXT] * gaps[i - 1]
                    types += [0] * gaps[i - 1]
                ids += [VIDEO] * (h * w // 4)
                types += [2] * (h * w // 4)
            marks.append((a, len(ids), VISION_START, VISION_END))
        else:
            token, kind = (IMAGE, 1) if isinstance(seg, Image) else (VIDEO, 2)
            n = num_tokens([seg], convention=convention)  # type: ignore[arg-type]
            ids += [token] * n
            types += [kind] * n
            marks.append((a, len(ids), VISION_START, VISION_END))
    for a, b, start, end in marks:
        if a > 0 and ids[a - 1] == TEXT:
            ids[a - 1] = start
        if b < len(ids) and ids[b] == TEXT:
            ids[b] = end
    return ids, types


def reference(convention: str, rows: list[list[Segment]], *, padding_side: str | None = None,
              tokens_per_second: int = 2) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any],
                                                   np.ndarray[Any, Any] | None]:
    """transformers' (position_ids, rope_deltas) for ``rows``, and the attention mask used."""
    torch = pytest.importorskip("torch", reason="transformers' get_rope_index is written in torch")
    pytest.importorskip("transformers", reason="transformers is the reference for these tests "
                                               "(installed in the torch env)")

    model = reference_model(convention, tokens_per_second=tokens_per_second)
    built = [tokens_of(r, convention) for r in rows]
    width = max(len(i) for i, _ in built)
    input_ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    types = torch.zeros((len(rows), width), dtype=torch.int)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, (i, t) in enumerate(built):
        sl = slice(0, len(i)) if padding_side != "left" else slice(width - len(i), width)
        input_ids[b, sl] = torch.tensor(i)
        types[b, sl] = torch.tensor(t)
        mask[b, sl] = 1
    segs = [s for r in rows for s in r]
    videos = [v for s in segs for v in ([s.video] if isinstance(s, AudioVisual) else [s])
              if isinstance(v, Video)]
    images = [s.grid_thw for s in segs if isinstance(s, Image)]
    audios = [a for s in segs for a in ([s.audio] if isinstance(s, AudioVisual) else [s])
              if isinstance(a, Audio)]
    kw: dict[str, Any] = {
        "image_grid_thw": torch.tensor(images) if images else None,
        "video_grid_thw": torch.tensor([v.grid_thw for v in videos]) if videos else None,
        "attention_mask": mask if padding_side is not None else None,
    }
    seconds = torch.tensor([float(v.seconds_per_grid) for v in videos]) if videos else None
    if convention == "qwen2.5-omni":
        assert all(a.n_frames is not None for a in audios), "the reference needs mel frame counts"
        if not (images or videos):  # its text-only path (audio ids are consecutive) needs a mask
            kw["attention_mask"] = mask
        kw.update(use_audio_in_video=any(isinstance(s, AudioVisual) for s in segs),
                  audio_seqlens=torch.tensor([a.n_frames for a in audios]) if audios else None,
                  second_per_grids=seconds)
        pos, deltas = model.get_rope_index(input_ids, **kw)
    else:
        if convention == "qwen2.5-vl":
            kw["second_per_grid_ts"] = seconds
        pos, deltas = model.get_rope_index(input_ids, types, **kw)
    return pos.numpy(), deltas.numpy().reshape(-1), (mask.numpy() if padding_side else None)


def check_same_as_transformers(convention: str, segs: list[Segment], tps: int = 2) -> None:
    ref, deltas, _ = reference(convention, [segs], tokens_per_second=tps)
    kw: dict[str, Any] = {"convention": convention}
    if convention in ("qwen2.5-vl", "qwen2.5-omni"):
        kw["tokens_per_second"] = tps
    ids, nxt = ids_of(segs, **kw)
    np.testing.assert_array_equal(ids, ref[:, 0], err_msg=f"{convention}: {segs}")
    assert nxt - ids.shape[1] == deltas[0], (nxt, ids.shape[1], deltas)


AGREE: list[tuple[str, list[Segment], int]] = [
    # Vision segments whose temporal ids stay below max(h, w)/merge: 5.23 agrees with max + 1.
    ("qwen2-vl", [Text(5), Image((1, 4, 6)), Text(3), Video((2, 4, 4)), Text(2)], 2),
    ("qwen2-vl", [Text(2), Image((1, 6, 4)), Text(2), Image((1, 2, 2)), Text(1)], 2),
    ("qwen2-vl", [Image((1, 4, 4)), Text(3)], 2),
    ("qwen2-vl", [Text(3), Video((3, 12, 8)), Text(4)], 2),
    ("qwen2.5-vl", [Text(4), Image((1, 4, 6)), Text(3), Video((2, 8, 8), seconds_per_grid=1.0),
                    Text(2)], 2),
    ("qwen2.5-vl", [Text(2), Video((3, 12, 8), seconds_per_grid=0.5), Text(2)], 2),
    ("qwen2.5-vl", [Text(2), Video((2, 56, 56), seconds_per_grid=1.0), Text(2)], 25),
    # Qwen3-VL frames are t=1 grids: always agrees, long videos included.
    ("qwen3-vl", [Text(4), Image((1, 4, 6)), Text(5), Video((3, 4, 4), frame_gaps=5), Text(2)], 2),
    ("qwen3-vl", [Text(2), Video((4, 2, 2), frame_gaps=(3, 4, 5)), Text(3)], 2),
    # Omni's reference uses max + 1 itself: agrees with long videos too.
    ("qwen2.5-omni", [Text(3), Image((1, 4, 4)), Text(3), Video((3, 4, 4), seconds_per_grid=2.0),
                      Text(3), Audio(n_frames=400), Text(2)], 25),
    ("qwen2.5-omni", [Text(2), Video((4, 2, 2), seconds_per_grid=1.5), Text(2)], 25),
    ("qwen2.5-omni", [Text(3), AudioVisual(Video((4, 4, 6), seconds_per_grid=1.0),
                                           Audio(n_frames=400)), Text(2)], 25),
    ("qwen2.5-omni", [Text(2), Image((1, 6, 4)), Text(3),
                      AudioVisual(Video((5, 4, 4), seconds_per_grid=2.0), Audio(n_frames=1000)),
                      Text(2), AudioVisual(Video((2, 2, 2), seconds_per_grid=1.0),
                                           Audio(n_frames=300)), Text(1)], 25),
]


@pytest.mark.parametrize(("convention", "segs", "tps"), AGREE,
                         ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(AGREE)])
def test_equals_transformers_get_rope_index(convention: str, segs: list[Segment], tps: int) -> None:
    check_same_as_transformers(convention, segs, tps)


@pytest.mark.parametrize(("convention", "video", "tps"), [
    ("qwen2-vl", Video((8, 4, 4)), 2),
    ("qwen2.5-vl", Video((6, 4, 4), seconds_per_grid=2.0), 2),
])
def test_long_video_where_transformers_5_23_differs(convention: str, video: Video,
                                                    tps: int) -> None:
    segs: list[Segment] = [Text(2), video, Text(3)]
    ref, _, _ = reference(convention, [segs], tokens_per_second=tps)
    kw = {"tokens_per_second": tps} if convention == "qwen2.5-vl" else {}
    ids, nxt = ids_of(segs, convention=convention, **kw)
    # Text and video ids agree; only where the text after the video starts differs.
    np.testing.assert_array_equal(ids[:, :-3], ref[:, 0, :-3])
    video_max = int(ids[:, 2:-3].max())
    np.testing.assert_array_equal(ref[:, 0, -3:], np.tile([4, 5, 6], (3, 1)))  # 2 + max(h,w)/2
    assert ref[0, 0, -3] <= video_max  # ... which reuses the video's temporal ids
    np.testing.assert_array_equal(ids[:, -3:], np.tile(np.arange(3) + video_max + 1, (3, 1)))
    assert nxt == video_max + 4


def test_omni_end_markers_follow_the_largest_id_not_the_last_chunk() -> None:
    # A one-grid 8x8 video (ids up to start + 3 on h/w) with 2 audio tokens: the reference
    # puts the end markers at the last chunk's (audio's) max + 1, inside the video's ids.
    seg = AudioVisual(Video((1, 8, 8), seconds_per_grid=1.0), Audio(n_frames=7))
    segs: list[Segment] = [Text(2), seg, Text(1)]
    ref, _, _ = reference("qwen2.5-omni", [segs], tokens_per_second=25)
    ids, nxt = ids_of(segs, convention="qwen2.5-omni")
    n = ids.shape[1]
    np.testing.assert_array_equal(ids[:, :n - 3], ref[:, 0, :n - 3])
    assert ref[0, 0, n - 3] == 2 + 1 + 2  # audio 3, 4 -> 5
    video_max = 2 + 1 + 3
    np.testing.assert_array_equal(ids[:, n - 3:], np.tile([video_max + 1] * 2 + [video_max + 2],
                                                          (3, 1)))
    assert nxt == video_max + 3


@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parametrize("convention", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl", "qwen2.5-omni"])
def test_padded_batch_equals_transformers(convention: str, padding_side: str) -> None:
    if convention == "qwen2.5-omni":
        rows: list[list[Segment]] = [
            [Text(3), Image((1, 4, 4)), Text(2), Audio(n_frames=200), Text(2)],
            [Text(2), Video((2, 4, 6), seconds_per_grid=2.0), Text(4)],
            [Text(1), Image((1, 2, 2)), Text(1)],
        ]
    else:
        video = (Video((3, 4, 4), frame_gaps=4) if convention == "qwen3-vl"
                 else Video((2, 4, 4), seconds_per_grid=0.5))
        rows = [[Text(3), Image((1, 4, 6)), Text(2), video, Text(2)],
                [Text(2), Image((1, 2, 2)), Text(1)],
                [Text(4), video, Text(5)]]
    tps = 25 if convention == "qwen2.5-omni" else 2
    ref, deltas, mask = reference(convention, rows, padding_side=padding_side, tokens_per_second=tps)
    # 5.23 fills padding with 0 (Qwen2-VL/2.5-VL/3-VL) or 1 (Omni; Qwen's reference code).
    pad = 1 if convention == "qwen2.5-omni" else 0
    kw: dict[str, Any] = {"tokens_per_second": tps} if convention in ("qwen2.5-vl",
                                                                      "qwen2.5-omni") else {}
    out, offsets = batch_position_ids(rows, convention=convention,  # type: ignore[arg-type]
                                      padding_side=padding_side,  # type: ignore[arg-type]
                                      pad_value=pad, **kw)
    np.testing.assert_array_equal(out, ref)
    lengths = [num_tokens(r, convention=convention) for r in rows]  # type: ignore[arg-type]
    np.testing.assert_array_equal(np.asarray(offsets) - lengths, deltas)
    # The same through the attention mask (a torch tensor here: the output follows it).
    import torch

    assert mask is not None
    by_mask, offsets2 = batch_position_ids(rows, convention=convention,  # type: ignore[arg-type]
                                           attention_mask=torch.asarray(mask), pad_value=pad, **kw)
    assert isinstance(by_mask, torch.Tensor)
    np.testing.assert_array_equal(by_mask.numpy(), ref)
    assert offsets2 == offsets


def test_batch_rows_equal_single_rows_and_pad_value() -> None:
    rows: list[list[Segment]] = [[Text(2), Image((1, 4, 4))], [Text(1)], []]
    out, offsets = batch_position_ids(rows, padding_side="left", length=7)
    assert out.shape == (3, 3, 7)
    for b, row in enumerate(rows):
        single, nxt = position_ids(row)
        n = single.shape[1]
        np.testing.assert_array_equal(out[:, b, 7 - n:], single)
        np.testing.assert_array_equal(out[:, b, :7 - n], 1)
        assert offsets[b] == nxt
    mixed = np.asarray([[1, 0, 1, 1, 0, 1, 1, 1], [0, 0, 0, 1, 0, 0, 0, 0], [0] * 8])
    out2, _ = batch_position_ids(rows, attention_mask=mixed.tolist(), pad_value=-1)
    np.testing.assert_array_equal(out2[:, 0, mixed[0] == 1], position_ids(rows[0]).ids)
    np.testing.assert_array_equal(out2[:, 0, mixed[0] == 0], -1)
    np.testing.assert_array_equal(out2[:, 1], [[-1, -1, -1, 0, -1, -1, -1, -1]] * 3)
    np.testing.assert_array_equal(out2[:, 2], -1)


# -- output namespace, device and dtype -------------------------------------------------------------
SEGS: list[Segment] = [Text(2), Image((1, 4, 6)), Text(1), Video((2, 2, 2)), Text(1)]


def default_int(backend: Any) -> Any:
    xp = backend.namespace()
    return xp.__array_namespace_info__().default_dtypes(
        device=backend.default_device())["integral"]


def test_output_namespace_from_xp(backend: Any) -> None:
    expected, nxt = position_ids(SEGS)
    for xp in (backend.native(), backend.namespace(), backend.name):
        ids, n = position_ids(SEGS, xp=xp)
        assert backend.owns(ids), f"xp={xp!r} gave {type(ids)}"
        assert ids.dtype == default_int(backend), ids.dtype
        assert backend.device(ids) == backend.default_device()
        np.testing.assert_array_equal(backend.to_numpy(ids), expected)
        assert n == nxt


def test_output_follows_like_and_device(backend: Any) -> None:
    devices = backend.test_devices()
    for dev in devices[:1]:
        like = backend.from_numpy(np.zeros(3, dtype=np.int64), device=dev)
        ids, _ = position_ids(SEGS, like=like)
        assert backend.owns(ids) and backend.device(ids) == backend.device(like)
        ids2, _ = position_ids(SEGS, xp=backend.native(), device=dev)
        assert backend.device(ids2) == backend.device(like)
        xp = backend.namespace()
        ids3, _ = position_ids(SEGS, like=like, dtype=xp.int32)
        assert ids3.dtype == xp.int32
        np.testing.assert_array_equal(backend.to_numpy(ids3), position_ids(SEGS).ids)


def test_batch_output_follows_the_mask(backend: Any) -> None:
    rows: list[list[Segment]] = [SEGS, [Text(3)]]
    n = num_tokens(SEGS)
    mask_np = np.zeros((2, n), dtype=np.int64)
    mask_np[0] = 1
    mask_np[1, -3:] = 1
    mask = backend.from_numpy(mask_np)
    out, offsets = batch_position_ids(rows, attention_mask=mask)
    assert backend.owns(out) and out.shape == (3, 2, n)
    assert backend.device(out) == backend.device(mask)
    assert out.dtype == default_int(backend)
    expected, _ = batch_position_ids(rows, padding_side="left")
    np.testing.assert_array_equal(backend.to_numpy(out), expected)
    assert offsets == (position_ids(SEGS).next_offset, 3)


def test_import_multimodal_imports_no_array_library() -> None:
    code = ("import sys, peregistry.multimodal as m; m.Text(3); m.Image((1, 2, 2)); "
            "bad = [k for k in ('numpy', 'torch', 'jax', 'array_api_strict') if k in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr


# -- errors --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("make", "exc", "pattern"), [
    (lambda: Text(-1), ValueError, r"Text: n must be an integer >= 0, got -1"),
    (lambda: Text(2.5),  # type: ignore[arg-type]
     TypeError, r"Text: n must be an integer >= 0, got 2.5 \(float\)"),
    (lambda: Text(True), TypeError, r"Text: n must be an integer >= 0, got True"),
    (lambda: Image((1, -2, 4)), ValueError, r"Image: grid_thw\[1\] \(h\) must be an integer >= 1, "
                                            r"got -2"),
    (lambda: Image((0, 2, 2)), ValueError, r"grid_thw\[0\] \(t\) must be an integer >= 1, got 0"),
    (lambda: Image((2, 2)),  # type: ignore[arg-type]
     TypeError, r"grid_thw must be a sequence of three integers \(t, h, w\), got \(2, 2\)"),
    (lambda: Image("122"),  # type: ignore[arg-type]
     TypeError, r"grid_thw must be a sequence of three integers"),
    (lambda: Video((2, 2, 2), seconds_per_grid=0), ValueError,
     r"Video: seconds_per_grid must be a positive finite number, got 0"),
    (lambda: Video((2, 2, 2), seconds_per_grid=-0.5), ValueError, r"got -0.5"),
    (lambda: Video((2, 2, 2), seconds_per_grid=math.nan), ValueError, r"got nan"),
    (lambda: Video((2, 2, 2), seconds_per_grid="1"),  # type: ignore[arg-type]
     TypeError,
     r"seconds_per_grid must be a positive real number .*got '1' \(str\)"),
    (lambda: Video((3, 2, 2), frame_gaps=(1,)), ValueError,
     r"frame_gaps must hold t - 1 = 2 counts .* got 1: \(1,\)"),
    (lambda: Video((3, 2, 2), frame_gaps=-1), ValueError, r"frame_gaps must be an integer >= 0, "
                                                          r"got -1"),
    (lambda: Audio(), TypeError, r"Audio: give exactly one of n_frames .* or n_tokens, got "
                                 r"n_frames=None, n_tokens=None"),
    (lambda: Audio(n_frames=5, n_tokens=1), TypeError, r"exactly one of"),
    (lambda: Audio(n_frames=2), ValueError, r"n_frames=2 gives 0 audio tokens; the encoder needs "
                                            r"n_frames >= 3"),
    (lambda: Audio(n_tokens=0), ValueError, r"n_tokens must be an integer >= 1, got 0"),
    (lambda: AudioVisual(Video((2, 2, 2)), Text(3)), TypeError,  # type: ignore[arg-type]
     r"AudioVisual: audio must be an Audio, got Text\(n=3\)"),
])
def test_segment_errors(make: Any, exc: type[Exception], pattern: str) -> None:
    with pytest.raises(exc, match=pattern):
        make()


@pytest.mark.parametrize(("segs", "kw", "exc", "pattern"), [
    ([Text(1), Image((1, 5, 4))], {}, ValueError,
     r"segments\[1\] has grid_thw=\(1, 5, 4\): h=5 is not divisible by spatial_merge_size=2"),
    ([Video((1, 4, 6))], {"spatial_merge_size": 4}, ValueError,
     r"w=6 is not divisible by spatial_merge_size=4"),
    ([Text(1)], {"spatial_merge_size": 0}, ValueError,
     r"spatial_merge_size must be an integer >= 1, got 0"),
    ([Text(1)], {"convention": "qwen2_vl"}, ValueError,
     r"convention must be one of 'qwen2-vl', 'qwen2.5-vl', 'qwen2.5-omni', 'qwen3-vl', got "
     r"'qwen2_vl'"),
    ([Text(1)], {"tokens_per_second": 2}, ValueError,
     r"tokens_per_second=2 is used only by .*'qwen2.5-vl' and 'qwen2.5-omni'"),
    ([Text(1)], {"convention": "qwen2.5-vl", "tokens_per_second": -1}, ValueError,
     r"tokens_per_second must be a positive finite number, got -1"),
    ([Text(1)], {"convention": "qwen2.5-vl", "seconds_per_chunk": 2}, ValueError,
     r"seconds_per_chunk=2 is used only by 'qwen2.5-omni'"),
    ([Text(1), Audio(n_tokens=3)], {"convention": "qwen2.5-vl"}, ValueError,
     r"segments\[1\] is Audio, but only the 'qwen2.5-omni' convention has audio; got "
     r"convention='qwen2.5-vl'"),
    ([Video((2, 2, 2), frame_gaps=2)], {}, ValueError,
     r"segments\[0\] sets frame_gaps, which only the 'qwen3-vl' convention has"),
    ([Video((2, 2, 2))], {"convention": "qwen3-vl"}, ValueError,
     r"segments\[0\] has t=2 frames, and qwen3-vl puts a timestamp text between frames: give "
     r"Video\(..., frame_gaps=N\)"),
    ([Text(1), "image"], {}, TypeError,
     r"segments\[1\] must be a Text, Image, Video, Audio or AudioVisual segment, got 'image' "
     r"\(str\)"),
    (Text(3), {}, TypeError, r"segments must be a sequence \(list or tuple\) of segments, got "
                             r"Text\(n=3\)"),
    ([Text(3), Image((1, 4, 4))], {"num_tokens": 6}, ValueError,
     r"the segments hold 7 tokens \(Text 3 \+ Image 4, with spatial_merge_size=2\) but "
     r"num_tokens=6"),
    ([Text(3)], {"offset": -1}, ValueError, r"offset must be an integer >= 0, got -1"),
    ([Text(3)], {"dtype": "float32"}, TypeError, r"dtype=float32 is not an integer dtype of "
                                                 r"numpy; allowed: None .*int32"),
    ([Text(3)], {"dtype": np.float32}, TypeError, r"dtype=float32 is not an integer dtype"),
    ([Text(3)], {"offset": 2**31, "dtype": "int32"}, ValueError,
     r"ids span \[2147483648, 2147483650\], which int32 cannot hold"),
    ([Text(3)], {"offset": 2**31, "dtype": np.int32}, ValueError, r"which int32 cannot hold"),
    ([Text(3)], {"like": [1, 2]}, TypeError, r"like must be an array of a registered backend"),
    ([Text(3)], {"xp": "numpy", "like": object()}, TypeError, r"like must be an array"),
])
def test_position_ids_errors(segs: Any, kw: dict[str, Any], exc: type[Exception],
                             pattern: str) -> None:
    with pytest.raises(exc, match=pattern):
        position_ids(segs, **kw)


def test_xp_and_like_must_agree() -> None:
    strict = pytest.importorskip("array_api_strict")
    with pytest.raises(TypeError, match=r"xp='numpy' \(numpy\) and like \(a array_api_strict "
                                        r"array\) disagree"):
        position_ids([Text(1)], xp="numpy", like=strict.asarray([1]))


@pytest.mark.parametrize(("rows", "kw", "exc", "pattern"), [
    ([[Text(3)], [Text(2), Image((1, 2, 2))]], {"attention_mask": [[1, 1, 1, 0], [1, 1, 1, 1]]},
     ValueError, r"row 1 has 4 unmasked tokens in attention_mask, but its segments hold 3 "
                 r"\(Text 2 \+ Image 1, with spatial_merge_size=2\)"),
    ([[Text(3)]], {"attention_mask": [1, 1, 1]}, ValueError,
     r"attention_mask must have shape \(batch, seq\) = \(1, seq\), got \(3,\)"),
    ([[Text(3)]], {"attention_mask": [[1, 1, 1]], "length": 3}, ValueError,
     r"give attention_mask or length, not both"),
    ([[Text(3)]], {"attention_mask": [[1, 1, 1]], "padding_side": "left"}, ValueError,
     r"padding_side='left' has no meaning with an attention_mask"),
    ([[Text(3)], [Text(5)]], {"length": 4}, ValueError,
     r"length=4 is shorter than row 1, whose segments hold 5 tokens"),
    ([[Text(3)]], {"padding_side": "top"}, ValueError,
     r"padding_side must be 'right' or 'left', got 'top'"),
    ([Text(3), Text(2)], {}, TypeError, r"batch must be a list of segment lists, one per row"),
    ([[Text(3)], [Image((1, 3, 2))]], {}, ValueError, r"batch\[1\]\[0\] has grid_thw=\(1, 3, 2\): "
                                                      r"h=3 is not divisible"),
    ([[Text(3)]], {"pad_value": 1.5}, TypeError, r"pad_value must be an integer"),
])
def test_batch_errors(rows: Any, kw: dict[str, Any], exc: type[Exception], pattern: str) -> None:
    with pytest.raises(exc, match=pattern):
        batch_position_ids(rows, **kw)


# -- random sequences against transformers ---------------------------------------------------------
def _agrees_with_5_23(seg: Segment, convention: str, tps: int) -> bool:
    """True if 5.23's ``max(h, w) / merge`` step equals the reference's ``max + 1`` for ``seg``,
    and (Omni) the last interleaved chunk holds the block's largest id."""
    if isinstance(seg, AudioVisual):
        _, h, w = seg.video.grid_thw
        last = math.floor((seg.video.grid_thw[0] - 1) * seg.video.seconds_per_grid * tps)
        return seg.audio.length >= max(last + 1, h // 2, w // 2)
    if convention in ("qwen2.5-omni", "qwen3-vl") or not isinstance(seg, Image | Video):
        return True
    t, h, w = seg.grid_thw
    step = 1 if isinstance(seg, Image) or convention == "qwen2-vl" else seg.seconds_per_grid * tps
    last = 0 if isinstance(seg, Image) and convention == "qwen2.5-vl" else math.floor((t - 1) * step)
    return last + 1 <= max(h, w) // 2


@st.composite
def sequences(draw: Any, convention: str) -> list[Segment]:
    sizes = st.sampled_from([2, 4, 6, 8])
    seconds = st.sampled_from([0.5, 1.0, 2.0])
    audio_visual = convention == "qwen2.5-omni" and draw(st.booleans())
    segs: list[Segment] = []
    for _ in range(draw(st.integers(1, 4))):
        segs.append(Text(draw(st.integers(2, 5))))
        kinds = ["image", "video"]
        if convention == "qwen2.5-omni":
            kinds = ["image", "audio", "av"] if audio_visual else ["image", "video", "audio"]
        kind = draw(st.sampled_from(kinds))
        grid = (draw(st.integers(1, 4)), draw(sizes), draw(sizes))
        if kind == "image":
            segs.append(Image((1, grid[1], grid[2])))
        elif kind == "audio":
            segs.append(Audio(n_frames=draw(st.integers(3, 600))))
        elif kind == "av":
            segs.append(AudioVisual(Video(grid, seconds_per_grid=draw(seconds)),
                                    Audio(n_frames=draw(st.integers(3, 600)))))
        elif convention == "qwen3-vl":
            segs.append(Video(grid, frame_gaps=draw(st.integers(1, 4))))
        else:
            segs.append(Video(grid, seconds_per_grid=draw(seconds)))
    segs.append(Text(draw(st.integers(1, 3))))
    return segs


@pytest.mark.parametrize("convention", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl", "qwen2.5-omni"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(data=st.data())
def test_random_sequences_equal_transformers(convention: str, data: st.DataObject) -> None:
    reference_model(convention)  # skips without transformers
    segs = data.draw(sequences(convention))
    tps = 25 if convention == "qwen2.5-omni" else 2
    assume(all(_agrees_with_5_23(seg, convention, tps) for seg in segs))
    check_same_as_transformers(convention, segs, tps)


def test_segment_spans_cover_the_ids_in_order() -> None:
    from peregistry.multimodal import segment_spans

    segs = [Text(3), Image((1, 4, 6)), Text(2), Video((3, 4, 4), seconds_per_grid=1.0)]
    spans = segment_spans(segs, convention="qwen2.5-vl")
    assert spans == [("text", 0, 3), ("image", 3, 9), ("text", 9, 11), ("video", 11, 23)]
    assert spans[-1][2] == num_tokens(segs, convention="qwen2.5-vl")
