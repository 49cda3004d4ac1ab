"""Sphinx configuration of the peregistry docs.

The Markdown pages are read by myst-parser as they are. The pictures are not committed: the
``builder-inited`` hook below draws every entry of :data:`GALLERY` with :mod:`peregistry.plot`
into ``docs/_generated/`` (gitignored) before the pages are read, so each plot shows what the
code of this checkout computes. Build: ``sphinx-build -W --keep-going -b html docs docs/_build/html``
(or ``tox -e docs``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import peregistry

project = "peregistry"
author = "peregistry developers"
copyright = "peregistry developers"
release = version = peregistry.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.mathjax"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "examples", "README.md"]
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options: dict[str, Any] = {}
# The public classes are re-exported (peregistry.Encoder is peregistry.encoders.base.Encoder and
# peregistry.plugin.Encoder): type hints naming them have several targets, all the same class.
suppress_warnings = ["ref.python"]
napoleon_google_docstring = False
html_theme = "alabaster"
html_static_path = ["_static"]
html_theme_options = {"description": "Positional encoders for NumPy, PyTorch and JAX"}

HERE = Path(__file__).resolve().parent
GENERATED = HERE / "_generated"

#: (file name, encoder name, options, plot kind, length): the plots the pages embed.
GALLERY: list[tuple[str, str, dict[str, Any], str, int | None]] = [
    ("sinusoidal_heatmap.png", "sinusoidal", {"dim": 64}, "heatmap", 128),
    ("sinusoidal_decay.png", "sinusoidal", {"dim": 64}, "decay", 512),
    ("rotary_angles.png", "rotary", {"dim": 128}, "angles", None),
    ("rotary_angles_yarn.png", "rotary",
     {"dim": 128, "scaling": {"type": "yarn", "factor": 4.0,
                              "original_max_position_embeddings": 4096}}, "angles", None),
    ("rotary_decay.png", "rotary", {"dim": 128}, "decay", 2048),
    ("mrope_angles.png", "mrope", {"dim": 128, "sections": (16, 24, 24)}, "angles", None),
    ("mrope_angles_interleaved.png", "mrope",
     {"dim": 128, "sections": (24, 20, 20), "interleaved": True}, "angles", None),
    ("mrope_ids.png", "mrope", {"dim": 128, "sections": (16, 24, 24)}, "ids", None),
    ("alibi_bias.png", "alibi", {"num_heads": 8}, "bias", 32),
    ("t5_bias.png", "t5", {"num_heads": 4, "num_buckets": 8, "max_distance": 16}, "bias", 32),
    ("shaw_heatmap.png", "shaw", {"max_distance": 8, "dim": 32}, "heatmap", 32),
    ("transformer_xl_heatmap.png", "transformer-xl", {"dim": 64}, "heatmap", 64),
    ("learned_heatmap.png", "learned", {"num_positions": 64, "dim": 32}, "heatmap", None),
]


def _draw_gallery(app: Any) -> None:
    """Draw every :data:`GALLERY` plot into ``docs/_generated/`` (the pages embed them)."""
    from peregistry.plot import PlotSettings, plot_to_file

    GENERATED.mkdir(exist_ok=True)
    for fname, name, options, kind, length in GALLERY:
        enc = peregistry.get_encoder(name, **options)
        plot_to_file(enc, GENERATED / fname, kind, PlotSettings(length=length), dpi=90)


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", _draw_gallery)
    return {"parallel_read_safe": True}
