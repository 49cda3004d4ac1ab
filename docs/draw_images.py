"""Draw the pictures of the docs pages into ``docs/images/`` (tracked in git), or check them.

The pages embed these PNGs by relative path (``![…](images/NAME.png)``), which resolves both on
the repository's web page and in the Sphinx build, so the pictures must be in the repository:
:data:`IMAGES` lists each one with the :mod:`peregistry.plot` call that draws it. Drawing uses
matplotlib's Agg backend, its default style and no ``Software`` metadata, so a redraw of unchanged
code with the same matplotlib gives the same pixels. ``--check`` redraws into a temporary
directory and compares decoded pixels, not bytes (the bytes also depend on the zlib that Pillow
was built with), and names every image that is stale, missing or not drawn here::

    python docs/draw_images.py           # redraw docs/images/*.png, then commit them
    python docs/draw_images.py --check   # exit 1 if a tracked image is not what the code draws

tox's ``docs`` env runs ``--check`` with the matplotlib version it pins; redraw with that version.
"""

from __future__ import annotations

import argparse
import configparser
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
IMAGES_DIR = DOCS / "images"

@dataclass(frozen=True)
class DocImage:
    """One picture: ``peregistry.plot.make_figure(get_encoder(encoder, **options), kind, settings)``."""

    file: str
    encoder: str
    options: dict[str, Any]
    kind: str
    settings: dict[str, Any] = field(default_factory=dict)
    dpi: int = 90


#: Every picture the pages embed, by file name in ``docs/images/``.
IMAGES: list[DocImage] = [
    DocImage("sinusoidal_heatmap.png", "sinusoidal", {"dim": 64}, "heatmap", {"length": 128}),
    DocImage("sinusoidal_decay.png", "sinusoidal", {"dim": 64}, "decay", {"length": 512}),
    DocImage("rotary_angles.png", "rotary", {"dim": 128}, "angles"),
    DocImage("rotary_angles_yarn.png", "rotary",
             {"dim": 128, "scaling": {"type": "yarn", "factor": 4.0,
                                      "original_max_position_embeddings": 4096}}, "angles",
             # the generated title prints every option of the scaling and overflows the figure
             {"title": "rotary with YaRN: rotation angle per pair\n(dim=128, scaling: type='yarn', "
                       "factor=4.0, original_max_position_embeddings=4096)"}),
    DocImage("rotary_decay.png", "rotary", {"dim": 128}, "decay", {"length": 2048}),
    DocImage("mrope_angles.png", "mrope", {"dim": 128, "sections": (16, 24, 24)}, "angles"),
    DocImage("mrope_angles_interleaved.png", "mrope",
             {"dim": 128, "sections": (24, 20, 20), "interleaved": True}, "angles"),
    # mrope.md and multimodal.md (docs/examples/plot_mrope_ids.py draws the same figure)
    DocImage("mrope_ids.png", "mrope", {"dim": 128, "sections": (16, 24, 24)}, "ids",
             {"convention": "qwen2.5-vl"}, dpi=120),
    DocImage("alibi_bias.png", "alibi", {"num_heads": 8}, "bias", {"length": 32}),
    DocImage("t5_bias.png", "t5", {"num_heads": 4, "num_buckets": 8, "max_distance": 16}, "bias",
             {"length": 32}),
    DocImage("shaw_heatmap.png", "shaw", {"max_distance": 8, "dim": 32}, "heatmap", {"length": 32}),
    DocImage("transformer_xl_heatmap.png", "transformer-xl", {"dim": 64}, "heatmap", {"length": 64}),
    DocImage("learned_heatmap.png", "learned", {"num_positions": 64, "dim": 32}, "heatmap"),
]


#: Pictures of recorded study results: file name → the tracked JSON it is drawn from (the
#: study itself needs torch and minutes; its output is the record, the picture is drawn here).
STUDY_IMAGES: dict[str, str] = {"extrapolation.png": "extrapolation.json"}


def draw(out_dir: Path, images: list[DocImage] = IMAGES,
         studies: dict[str, str] = STUDY_IMAGES) -> list[Path]:
    """Draw ``images`` and ``studies`` into ``out_dir``; return the written paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import peregistry
    from peregistry.plot import PlotSettings, make_figure

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    # "default" is matplotlib's own style, so a matplotlibrc on the machine changes nothing; the
    # fonts are the ones matplotlib bundles, whatever the machine has.
    with (matplotlib.style.context("default"),
          matplotlib.rc_context({"font.family": "DejaVu Sans", "mathtext.fontset": "dejavusans"})):
        for image in images:
            enc = peregistry.get_encoder(image.encoder, **image.options)
            fig = make_figure(enc, image.kind, PlotSettings(**image.settings))
            try:
                path = out_dir / image.file
                fig.savefig(path, dpi=image.dpi, metadata={"Software": None})
            finally:
                plt.close(fig)
            written.append(path)
        written += _draw_studies(out_dir, studies)
    return written


def _draw_studies(out_dir: Path, studies: dict[str, str]) -> list[Path]:
    import json

    import matplotlib.pyplot as plt

    from peregistry.study import ExtrapolationResult
    from peregistry.study.plot import figure

    written = []
    for name, record in studies.items():
        result = ExtrapolationResult.from_dict(json.loads((DOCS / record).read_text()))
        fig = figure(result)
        try:
            fig.savefig(out_dir / name, dpi=110, metadata={"Software": None})
        finally:
            plt.close(fig)
        written.append(out_dir / name)
    return written


def _pixels(path: Path) -> Any:
    """The decoded RGBA pixels of a PNG, as a ``(height, width, 4)`` uint8 array."""
    import numpy as np
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGBA"))


def _difference(tracked: Path, drawn: Path) -> str | None:
    """Why ``tracked`` is not the picture ``drawn`` (``None``: same pixels)."""
    if tracked.read_bytes() == drawn.read_bytes():
        return None
    old, new = _pixels(tracked), _pixels(drawn)
    if old.shape != new.shape:
        return f"size {old.shape[1]}x{old.shape[0]}, the code draws {new.shape[1]}x{new.shape[0]}"
    differ = (old != new).any(axis=-1)
    if not differ.any():
        return None
    return f"{int(differ.sum())} of {differ.size} pixels differ from what the code draws"


def pinned_matplotlib() -> str | None:
    """The matplotlib version tox's ``docs`` env pins (``None`` if tox.ini does not say)."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ROOT / "tox.ini")
    deps = parser.get("testenv:docs", "deps", fallback="")
    for line in deps.split():
        if line.startswith("matplotlib=="):
            return line.removeprefix("matplotlib==")
    return None


def _show(path: Path) -> str:
    """``path`` relative to the repository when it is inside."""
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def _redraw_hint() -> str:
    python = Path(sys.executable)
    if python.is_relative_to(Path.cwd()):
        python = python.relative_to(Path.cwd())
    pin = pinned_matplotlib()
    with_pin = f" with matplotlib=={pin} (what tox's docs env pins)" if pin else ""
    return f"redraw with `{python} {_show(Path(__file__).resolve())}`{with_pin} and commit {_show(IMAGES_DIR)}/"


def check(images_dir: Path = IMAGES_DIR, images: list[DocImage] = IMAGES,
          studies: dict[str, str] = STUDY_IMAGES) -> list[str]:
    """Redraw ``images`` into a temporary directory: one message per tracked image that is
    stale or missing, and per PNG in ``images_dir`` that no entry draws (empty: all current)."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="peregistry-doc-images-") as tmp:
        for drawn in draw(Path(tmp), images, studies):
            tracked = images_dir / drawn.name
            if not tracked.is_file():
                problems.append(f"{_show(tracked)}: missing")
            elif (why := _difference(tracked, drawn)) is not None:
                problems.append(f"{_show(tracked)}: stale, {why}")
    names = {image.file for image in images} | set(studies)
    for extra in sorted(images_dir.glob("*.png")):
        if extra.name not in names:
            problems.append(f"{_show(extra)}: not drawn by docs/draw_images.py "
                            "(add it to IMAGES or delete it)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="do not write: exit 1 if a tracked image differs from what the code draws")
    args = parser.parse_args(argv)
    if args.check:
        problems = check()
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print(_redraw_hint(), file=sys.stderr)
            return 1
        print(f"{len(IMAGES) + len(STUDY_IMAGES)} images in {_show(IMAGES_DIR)}/ are current")
        return 0
    import matplotlib

    pin = pinned_matplotlib()
    if pin and matplotlib.__version__ != pin:
        print(f"note: matplotlib {matplotlib.__version__}, but tox's docs env pins {pin} and "
              "checks the images with it: other versions may draw other pixels", file=sys.stderr)
    for path in draw(IMAGES_DIR):
        print(f"wrote {_show(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
