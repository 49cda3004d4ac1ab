"""Sphinx configuration of the peregistry docs.

The Markdown pages are read by myst-parser as they are, so they render the same on the
repository's web page. Their pictures are tracked in ``docs/images/`` and embedded by relative
path; ``docs/draw_images.py`` draws them with :mod:`peregistry.plot` (``--check``, run by
``tox -e docs``, says which are stale). Build:
``sphinx-build -W --keep-going -b html docs docs/_build/html`` (or ``tox -e docs``).
"""

from __future__ import annotations

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
html_theme_options = {"description": "Positional encoders for NumPy, PyTorch and JAX"}
