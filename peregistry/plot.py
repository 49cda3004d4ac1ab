"""Pictures of encoders: the functions behind ``peregistry plot`` and the docs' gallery.

::

    peregistry plot sinusoidal --dim 64 -o table.png                 # heatmap of the table
    peregistry plot sinusoidal --dim 64 --kind decay -o decay.png    # PE(0)·PE(k) against k
    peregistry plot rotary --dim 128 --kind angles -o angles.png     # angle per pair
    peregistry plot alibi --num-heads 8 -o alibi.png                 # the bias matrix per head
    peregistry plot mrope --kind ids -o ids.png                      # M-RoPE ids of a sequence

One function per plot kind in :data:`PLOTS`; :data:`PLOT_KINDS_BY_KIND` says which apply to an
encoder kind (the first is the default). Every function takes the encoder and a
:class:`PlotSettings` and returns a matplotlib ``Figure``; :func:`plot_to_file` writes a PNG.

matplotlib is an optional dependency (the ``docs`` extra): it is imported only when a figure is
made, with the non-interactive ``Agg`` backend, and its absence raises :class:`PlotUnavailable`
with the install command. Values are computed on NumPy in float64.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._plot_titles import fit_titles, short_repr

if TYPE_CHECKING:
    import numpy as np

    from .kinds.base import Encoder

__all__ = [
    "PLOTS",
    "PLOT_KINDS_BY_KIND",
    "PlotSettings",
    "PlotUnavailable",
    "default_plot_kind",
    "make_figure",
    "plot_to_file",
]

INSTALL_HINT = "pip install 'peregistry[docs]'"


class PlotUnavailable(ImportError):
    """matplotlib is not installed: the message names the command that installs it."""


@dataclass(frozen=True)
class PlotSettings:
    """What a plot function gets besides the encoder.

    :ivar length: number of positions (``None``: the plot kind's default).
    :ivar seed: seed of ``enc.init`` for learned encoders.
    :ivar convention: the :mod:`peregistry.multimodal` convention of the ``ids`` plot.
    :ivar title: a title replacing the generated one.
    """

    length: int | None = None
    seed: int = 0
    convention: str = "qwen2.5-vl"
    title: str | None = None


def _pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, or :class:`PlotUnavailable`."""
    try:
        import matplotlib
    except ImportError as exc:
        raise PlotUnavailable(f"plot needs matplotlib: {INSTALL_HINT}") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _params(enc: Encoder, settings: PlotSettings) -> dict[str, Any] | None:
    import numpy as np

    return enc.init(np, seed=settings.seed) if enc.learned else None


def _title(enc: Encoder, settings: PlotSettings, what: str) -> str:
    if settings.title is not None:
        return settings.title
    # the options that make this encoder: the required ones and those set away from the default
    specs = type(enc)._option_specs
    opts = ", ".join(f"{k}={short_repr(v)}" for k, v in enc.options.items()
                     if k not in specs or specs[k].required or v != specs[k].default)
    return f"{enc.name}: {what}\n({opts})"


def _rotary_pairs(enc: Encoder, values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """One column per rotated pair of a ``cos_sin`` output, whatever the layout (the rotary
    kind's ``layout`` option, read as :class:`~peregistry.RotaryEncoder` reads it)."""
    rotary_dim = values.shape[-1]
    if enc.options.get("layout", "half") == "interleaved":
        return values[..., 0::2]
    return values[..., : rotary_dim // 2]


def _second_members(enc: Encoder, values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The columns of each pair's second feature (the same angles as the first's unless the
    encoder turns a pair's two features by different axes, as M-RoPE's ``feature_axes``)."""
    rotary_dim = values.shape[-1]
    if enc.options.get("layout", "half") == "interleaved":
        return values[..., 1::2]
    return values[..., rotary_dim // 2: rotary_dim]


def _text_positions(enc: Encoder, positions: Any) -> Any:
    return enc.text_positions(positions)  # type: ignore[attr-defined]


def _position_axes(enc: Encoder) -> int:
    """How many position axes a rotary encoder turns by: 0 for one position per token, else
    the rows of its text positions (``(axes, n)``, e.g. M-RoPE's temporal, height, width)."""
    import numpy as np

    if enc.kind != "rotary":
        return 0
    probe = np.asarray(_text_positions(enc, np.arange(1)))
    return int(probe.shape[0]) if probe.ndim == 2 else 0


def _sequence(enc: Encoder, n: int) -> tuple[Any, str]:
    """The encoder's first ``n`` positions in order (:meth:`Encoder.sequence_positions`) and the
    axis label that goes with them."""
    import numpy as np

    positions = np.asarray(enc.sequence_positions(n))
    return positions, "position" if positions.ndim == 1 else "position index (in order)"


# -- plot kinds -----------------------------------------------------------------------------------
def plot_heatmap(enc: Encoder, settings: PlotSettings) -> Any:
    """The absolute table ``encode(arange(n))`` as an image (position × feature); for a
    relative embedding, ``embed(q, k)`` for one query against every key (offset × feature)."""
    import numpy as np

    plt = _pyplot()
    n = settings.length or 64
    params = _params(enc, settings)
    if enc.kind == "absolute":
        positions, ylabel = _sequence(enc, n)
        table = np.asarray(enc.encode(positions, params=params))  # type: ignore[attr-defined]
        table = table.reshape(positions.shape[0], -1)
        what = "the table"
    elif enc.kind == "relative-embedding":
        q = np.asarray([n // 2])
        table = np.asarray(enc.embed(q, np.arange(n), params=params))[0]  # type: ignore[attr-defined]
        ylabel = f"key position (query at {n // 2})"
        what = "embed(q, k) for one query"
    else:
        raise ValueError(f"heatmap shows absolute and relative-embedding encoders, "
                         f"not {enc.kind} ({enc.name})")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    lim = float(np.max(np.abs(table))) or 1.0
    im = ax.imshow(table, aspect="auto", cmap="RdBu_r", vmin=-lim, vmax=lim,
                   interpolation="nearest")
    ax.set_xlabel("feature")
    ax.set_ylabel(ylabel)
    fig.colorbar(im, ax=ax)
    ax.set_title(_title(enc, settings, what), fontsize=10)
    fig.tight_layout()
    return fig


def _decay_values(enc: Encoder, n: int, settings: PlotSettings) -> tuple[Any, Any, str]:
    import numpy as np

    k = np.arange(n)
    if enc.kind == "absolute":
        positions, _ = _sequence(enc, n)
        table = np.asarray(enc.encode(positions, params=_params(enc, settings)))  # type: ignore[attr-defined]
        table = table.reshape(positions.shape[0], -1)
        dots = table @ table[0] / float(table[0] @ table[0])
        return k[: positions.shape[0]], dots, "PE(0)·PE(k) / PE(0)·PE(0)"
    if enc.kind == "rotary":
        cos, _sin = enc.cos_sin(_text_positions(enc, k))  # type: ignore[attr-defined]
        cos = _rotary_pairs(enc, np.asarray(cos))
        # q = k = all ones: <R(0)q, R(k)k> = 2·Σ cos(k·ω_i) (the RoFormer long-term decay)
        dots = cos.sum(axis=-1) / cos[0].sum()
        return k, dots, "<R(0)q, R(k)q> / |q|² for q = (1, …, 1)"
    raise ValueError(f"decay shows absolute and rotary encoders, not {enc.kind} ({enc.name})")


def plot_decay(enc: Encoder, settings: PlotSettings) -> Any:
    """The dot product against distance: ``PE(0)·PE(k)`` for an absolute encoder, ``<R(0)q,
    R(k)q>`` for a rotary one (q all ones, Su et al. 2021 §3.4.3), normalized to 1 at ``k=0``."""
    plt = _pyplot()
    n = settings.length or 512
    k, dots, label = _decay_values(enc, n, settings)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.plot(k, dots, lw=1.2, color="#1f4e79")
    ax.axhline(0.0, color="#999999", lw=0.6)
    ax.set_xlabel("distance k")
    ax.set_ylabel(label)
    ax.grid(alpha=0.3)
    ax.set_title(_title(enc, settings, "dot product against distance"), fontsize=10)
    fig.tight_layout()
    return fig


def plot_angles(enc: Encoder, settings: PlotSettings) -> Any:
    """The rotation angle of each pair per unit of position (``ω_i``, log scale), read from
    ``cos_sin`` (scalings included). A multi-axis encoder (M-RoPE) gets one series per axis,
    advancing that axis alone: its sections (contiguous or interleaved) become visible; where
    a pair's second feature turns by another axis (``feature_axes``) it is marked apart."""
    import numpy as np

    if enc.kind != "rotary":
        raise ValueError(f"angles shows rotary encoders, not {enc.kind} ({enc.name})")
    plt = _pyplot()
    n = settings.length or 64
    p = np.arange(n)

    def omega(positions: Any, columns: Any = _rotary_pairs) -> Any:
        cos, sin = enc.cos_sin(positions)  # type: ignore[attr-defined]
        ang = np.arctan2(columns(enc, np.asarray(sin)), columns(enc, np.asarray(cos)))
        return np.unwrap(ang, axis=0)[-1] / (n - 1)

    fig, ax = plt.subplots(figsize=(7, 3.8))
    axes = _position_axes(enc)
    if axes:
        for axis, label in zip(range(axes), ("temporal", "height", "width", "axis 3"),
                               strict=False):
            pos = np.zeros((axes, n), dtype=np.int64)
            pos[axis] = p
            w, w2 = omega(pos), omega(pos, _second_members)
            split = not np.array_equal(w, w2)  # a pair's second feature on its own axis
            idx, idx2 = np.flatnonzero(w > 0), np.flatnonzero(w2 > 0)
            color = None
            if len(idx) or not split:
                line = ax.plot(idx, w[idx], "o", ms=3.5, label=f"{label} ({len(idx)} pairs)")
                color = line[0].get_color()
            if split and len(idx2):
                ax.plot(idx2, w2[idx2], "x", ms=4.5, color=color,
                        label=f"{label}, second features ({len(idx2)} pairs)")
        ax.legend(fontsize=9)
    else:
        w = omega(_text_positions(enc, p))
        ax.plot(np.arange(w.shape[0]), w, "o-", ms=3, lw=1, color="#1f4e79")
    ax.set_yscale("log")
    ax.set_xlabel("pair i")
    ax.set_ylabel("angle per position ω_i (rad)")
    ax.grid(alpha=0.3, which="both")
    ax.set_title(_title(enc, settings, "rotation angle per pair"), fontsize=10)
    fig.tight_layout()
    return fig


def plot_bias(enc: Encoder, settings: PlotSettings) -> Any:
    """The additive bias ``bias(arange(n), arange(n))``, one panel per head (at most 8)."""
    import numpy as np

    if enc.kind != "bias":
        raise ValueError(f"bias shows bias encoders, not {enc.kind} ({enc.name})")
    plt = _pyplot()
    n = settings.length or 64
    pos = np.arange(n)
    bias = np.asarray(enc.bias(pos, pos, params=_params(enc, settings)))  # type: ignore[attr-defined]
    heads = min(bias.shape[0], 8)
    cols = min(heads, 4)
    rows = math.ceil(heads / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.4 * cols + 0.8, 2.4 * rows + 0.9),
                             squeeze=False)
    for h in range(rows * cols):
        ax = axes[h // cols][h % cols]
        if h >= heads:
            ax.axis("off")
            continue
        im = ax.imshow(bias[h], cmap="viridis", interpolation="nearest")
        ax.set_title(f"head {h}", fontsize=9)
        ax.set_xlabel("k", fontsize=8)
        ax.set_ylabel("q", fontsize=8)
        ax.tick_params(labelsize=7)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04).ax.tick_params(labelsize=7)
    fig.suptitle(_title(enc, settings, "bias[head, q, k]"), fontsize=10)
    fig.tight_layout()
    return fig


def example_segments() -> list[Any]:
    """The sequence of the ``ids`` plot: text, an image of 2x3 tokens, text, and a video of
    3 grids of 2x2 tokens one second apart."""
    from .multimodal import Image, Text, Video

    return [Text(3), Image((1, 4, 6)), Text(2), Video((3, 4, 4), seconds_per_grid=1.0)]


def plot_ids(enc: Encoder | None, settings: PlotSettings) -> Any:
    """The M-RoPE position ids (temporal, height, width) of "text, image, text, video" against
    token index, and where generated tokens continue (:func:`peregistry.multimodal.position_ids`)."""
    import numpy as np

    from .multimodal import position_ids, segment_spans

    plt = _pyplot()
    conv: Any = settings.convention  # validated by position_ids, naming the conventions
    segments = example_segments()
    generated = 3
    ids, next_offset = position_ids(segments, convention=conv)
    ids = np.asarray(ids)
    n = ids.shape[1]
    spans = segment_spans(segments, convention=conv)
    names = [kind for kind, _, _ in spans]
    bounds = [(a, b) for _, a, b in spans]
    colors = {"text": "#f2f2f2", "image": "#dbe9f6", "video": "#fde2cc"}
    gen_x = np.arange(n, n + generated)
    gen_y = np.arange(next_offset, next_offset + generated)
    fig, axes = plt.subplots(3, 1, figsize=(9, 6.5), sharex=True, sharey=True)
    for axis, (ax, label) in enumerate(zip(axes, ("temporal", "height", "width"), strict=True)):
        for (a, b), name in zip(bounds, names, strict=True):
            ax.axvspan(a - 0.5, b - 0.5, color=colors[name], zorder=0)
            if axis == 0:
                ax.text((a + b - 1) / 2, 1.02, name, ha="center", va="bottom",
                        transform=ax.get_xaxis_transform(), fontsize=10)
        ax.axvspan(n - 0.5, n + generated - 0.5, color="#e3f3e0", zorder=0)
        ax.step(np.arange(n), ids[axis], where="mid", color="#555555", lw=0.8, zorder=1)
        ax.plot(np.arange(n), ids[axis], "o", ms=5, color="#1f4e79", zorder=2)
        ax.plot(gen_x, gen_y, "o", ms=5, mfc="white", color="#2e7d32", zorder=2)
        ax.set_ylabel(f"{label} id")
        ax.grid(axis="y", alpha=0.3)
    axes[0].text(n + (generated - 1) / 2, 1.02, "generated", ha="center", va="bottom",
                 transform=axes[0].get_xaxis_transform(), fontsize=10)
    axes[-1].set_xlabel("token index")
    axes[-1].set_xticks(np.arange(0, n + generated, 2))
    title = settings.title or (f"M-RoPE position ids, {conv}: text, image, text, video\n"
                               f"generated tokens continue at next_offset = {next_offset}")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


PlotFunction = Callable[["Encoder", PlotSettings], Any]

#: The plot functions by ``--kind``.
PLOTS: dict[str, PlotFunction] = {
    "heatmap": plot_heatmap,
    "decay": plot_decay,
    "angles": plot_angles,
    "bias": plot_bias,
    "ids": plot_ids,
}

#: The plot kinds that apply to each encoder kind; the first is the default.
PLOT_KINDS_BY_KIND: dict[str, tuple[str, ...]] = {
    "absolute": ("heatmap", "decay"),
    "rotary": ("angles", "decay", "ids"),  # ids: multi-axis ones only
    "bias": ("bias",),
    "relative-embedding": ("heatmap",),
}


def default_plot_kind(enc: Encoder) -> str:
    """The first plot kind of :data:`PLOT_KINDS_BY_KIND` for the encoder's kind."""
    kinds = PLOT_KINDS_BY_KIND.get(enc.kind)
    if not kinds:
        raise ValueError(f"no plot for {enc.kind} encoders ({enc.name})")
    return kinds[0]


def make_figure(enc: Encoder, kind: str | None = None,
                settings: PlotSettings | None = None) -> Any:
    """The matplotlib figure of plot ``kind`` (default: :func:`default_plot_kind`) for ``enc``.

    :raises ValueError: if ``kind`` is unknown or does not apply to the encoder's kind.
    :raises PlotUnavailable: if matplotlib is not installed.
    """
    settings = settings or PlotSettings()
    kind = kind or default_plot_kind(enc)
    if kind not in PLOTS:
        raise ValueError(f"plot kind must be one of {', '.join(PLOTS)}, got {kind!r}")
    allowed = PLOT_KINDS_BY_KIND.get(enc.kind, ())
    multi_axis = _position_axes(enc) > 0
    if kind not in allowed or (kind == "ids" and not multi_axis):
        fits = [k for k in allowed if k != "ids" or multi_axis]
        raise ValueError(f"plot kind {kind!r} does not apply to {enc.name} ({enc.kind}); "
                         f"it has: {', '.join(fits) or 'none'}")
    fig = PLOTS[kind](enc, settings)
    fit_titles(fig)  # a long title wraps inside the picture
    return fig


def plot_to_file(enc: Encoder, path: str | Path, kind: str | None = None,
                 settings: PlotSettings | None = None, *, dpi: int = 110) -> Path:
    """Write the figure of :func:`make_figure` to ``path`` (PNG, or what the suffix says)."""
    fig = make_figure(enc, kind, settings)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fig.savefig(path, dpi=dpi)
    finally:
        _pyplot().close(fig)
    return path
