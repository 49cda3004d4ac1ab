"""Plot the M-RoPE ids of "text, image, text, video" (Qwen2.5-VL) against token index.

Run from the repository root::

    python docs/examples/plot_mrope_ids.py            # writes docs/_static/mrope_ids.png

It also prints the ids table shown in docs/multimodal.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from peregistry.multimodal import Image, Text, Video, num_tokens, position_ids

OUT = Path(__file__).resolve().parents[1] / "_static" / "mrope_ids.png"

SEGMENTS = [
    Text(3),                                   # e.g. "<|im_start|>user\n<|vision_start|>"
    Image((1, 4, 6)),                          # 4x6 patches -> 2x3 tokens
    Text(2),                                   # "<|vision_end|><|vision_start|>"
    Video((3, 4, 4), seconds_per_grid=1.0),    # 3 grids of 2x2 tokens, one second apart
]
CONVENTION = "qwen2.5-vl"                      # tokens_per_second=2: temporal ids 2 apart
GENERATED = 3                                  # tokens generated after the prompt


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

    gen_x = np.arange(n, n + GENERATED)
    gen_y = np.arange(next_offset, next_offset + GENERATED)
    colors = {"text": "#f2f2f2", "image": "#dbe9f6", "video": "#fde2cc"}
    fig, axes = plt.subplots(3, 1, figsize=(9, 6.5), sharex=True, sharey=True)
    for axis, (ax, label) in enumerate(zip(axes, ("temporal", "height", "width"), strict=True)):
        for (a, b), name in zip(bounds, names, strict=True):
            ax.axvspan(a - 0.5, b - 0.5, color=colors[name], zorder=0)
            if axis == 0:
                ax.text((a + b - 1) / 2, 1.02, name, ha="center", va="bottom",
                        transform=ax.get_xaxis_transform(), fontsize=10)
        ax.axvspan(n - 0.5, n + GENERATED - 0.5, color="#e3f3e0", zorder=0)
        ax.step(np.arange(n), ids[axis], where="mid", color="#555555", lw=0.8, zorder=1)
        ax.plot(np.arange(n), ids[axis], "o", ms=5, color="#1f4e79", zorder=2)
        ax.plot(gen_x, gen_y, "o", ms=5, mfc="white", color="#2e7d32", zorder=2)
        ax.set_ylabel(f"{label} id")
        ax.grid(axis="y", alpha=0.3)
    axes[0].text(n + (GENERATED - 1) / 2, 1.02, "generated", ha="center", va="bottom",
                 transform=axes[0].get_xaxis_transform(), fontsize=10)
    axes[-1].set_xlabel("token index")
    axes[-1].set_xticks(np.arange(0, n + GENERATED, 2))
    fig.suptitle(f"M-RoPE position ids, {CONVENTION}: text, image (2x3 tokens), text, "
                 f"video (3x2x2 tokens, 1 s apart)\ngenerated tokens continue at "
                 f"next_offset = max(ids) + 1 = {next_offset}", fontsize=11)
    fig.tight_layout()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=120)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
