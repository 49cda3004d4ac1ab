"""The extrapolation study's picture: accuracy against evaluated length, one panel per task,
one line per encoder with its 95% interval, the rows that did not learn the task faint
(matplotlib, imported here only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._result import ExtrapolationResult


def plot_extrapolation(result: ExtrapolationResult, path: str | Path) -> None:
    """Draw ``result`` to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = figure(result)
    try:
        fig.savefig(path, dpi=110, metadata={"Software": None})
    finally:
        plt.close(fig)


def figure(result: ExtrapolationResult) -> Any:
    """The figure of ``result``: a panel per task, a line per encoder (dashed: RoPE scalings;
    error bars: the 95% intervals; faint: under the bar at the training length)."""
    import matplotlib.pyplot as plt

    s = result.settings
    cmap = plt.get_cmap("tab20")
    fig, axes = plt.subplots(1, len(s.tasks), figsize=(4.2 * len(s.tasks), 3.8), sharey=True,
                             squeeze=False)
    names = list(dict.fromkeys(r.encoder for r in result.rows))
    for ax, task in zip(axes[0], s.tasks, strict=True):
        for row in (r for r in result.rows if r.task == task):
            means = [row.mean(n) for n in s.lengths]
            halves = [row.interval(n) or 0.0 for n in s.lengths]
            style = "--" if "+" in row.encoder else "-"
            learned = row.learned(s.train_length)
            ax.errorbar(s.lengths, means, yerr=halves, label=row.encoder, linestyle=style,
                        marker="o", markersize=3, capsize=2, alpha=1.0 if learned else 0.3,
                        color=cmap(names.index(row.encoder) % 20))
        ax.axvline(s.train_length, color="grey", linewidth=0.8, linestyle=":")
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(s.lengths), [str(n) for n in s.lengths])
        ax.set_title(f"{task} (trained up to {s.train_length}; faint: did not learn)",
                     fontsize=9)
        ax.set_xlabel("evaluated length")
    axes[0][0].set_ylabel("accuracy")
    fig.legend(*axes[0][0].get_legend_handles_labels(), fontsize=7, loc="center right")
    fig.tight_layout(rect=(0, 0, 0.86, 1))
    return fig
