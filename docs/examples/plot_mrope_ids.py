"""Plot the M-RoPE ids of "text, image, text, video" (Qwen2.5-VL) against token index.

Run from the repository root::

    python docs/examples/plot_mrope_ids.py            # writes mrope_ids.png here

It also prints the ids table shown in docs/multimodal.md. The figure on that page,
docs/images/mrope_ids.png, is this same figure drawn by docs/draw_images.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

from peregistry.multimodal import position_ids, segment_spans
from peregistry.plot import PlotSettings, example_segments, plot_ids

OUT = Path("mrope_ids.png")

# text, an image of 4x6 patches (2x3 tokens), text, a video of 3 grids of 2x2 tokens 1 s apart
SEGMENTS = example_segments()
CONVENTION = "qwen2.5-vl"                      # tokens_per_second=2: temporal ids 2 apart


def main() -> int:
    ids, next_offset = position_ids(SEGMENTS, convention=CONVENTION)
    n = ids.shape[1]

    spans = segment_spans(SEGMENTS, convention=CONVENTION)

    print("| token | segment | t | h | w |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for i in range(n):
        kind = next(k for k, a, b in spans if a <= i < b)
        print(f"| {i} | {kind} | {ids[0, i]} | {ids[1, i]} | {ids[2, i]} |")
    print(f"next_offset = {next_offset}")

    # The figure itself is `peregistry plot mrope --kind ids` (peregistry.plot.plot_ids),
    # drawn for these same segments.
    fig = plot_ids(None, PlotSettings(convention=CONVENTION))
    fig.savefig(OUT, dpi=120)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
