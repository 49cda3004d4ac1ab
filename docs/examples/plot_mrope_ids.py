"""Plot the M-RoPE ids of "text, image, text, video" (Qwen2.5-VL) against token index.

Run from the repository root::

    python docs/examples/plot_mrope_ids.py            # writes docs/_static/mrope_ids.png

It also prints the ids table shown in docs/multimodal.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

from peregistry.multimodal import Image, Text, Video, num_tokens, position_ids
from peregistry.plot import PlotSettings, plot_ids

OUT = Path(__file__).resolve().parents[1] / "_static" / "mrope_ids.png"

SEGMENTS = [
    Text(3),                                   # e.g. "<|im_start|>user\n<|vision_start|>"
    Image((1, 4, 6)),                          # 4x6 patches -> 2x3 tokens
    Text(2),                                   # "<|vision_end|><|vision_start|>"
    Video((3, 4, 4), seconds_per_grid=1.0),    # 3 grids of 2x2 tokens, one second apart
]
CONVENTION = "qwen2.5-vl"                      # tokens_per_second=2: temporal ids 2 apart


def main() -> int:
    ids, next_offset = position_ids(SEGMENTS, convention=CONVENTION)
    n = ids.shape[1]

    names, bounds, start = [], [], 0
    for seg in SEGMENTS:
        length = num_tokens([seg], convention=CONVENTION)
        names.append(type(seg).__name__.lower())
        bounds.append((start, start + length))
        start += length

    print("| token | segment | t | h | w |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for i in range(n):
        seg = next(k for k, (a, b) in enumerate(bounds) if a <= i < b)
        print(f"| {i} | {names[seg]} | {ids[0, i]} | {ids[1, i]} | {ids[2, i]} |")
    print(f"next_offset = {next_offset}")

    # The figure itself is `peregistry plot mrope --kind ids` (peregistry.plot.plot_ids),
    # drawn for these same segments.
    fig = plot_ids(None, PlotSettings(convention=CONVENTION))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=120)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
