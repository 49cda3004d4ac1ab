"""peregistry-vision: vision positional encoders as a peregistry plugin.

Nothing to import: once installed, ``peregistry.get_encoder("axial-rotary", dims=(16, 56, 56))``,
``"sincos-2d"`` and ``"detr-sine"`` are found through the ``peregistry`` entry point group.
"""

from __future__ import annotations

from .plugin import AxialRotary, DetrSine, SinCos2D, grid_positions

__version__ = "0.1.0"
__all__ = ["AxialRotary", "DetrSine", "SinCos2D", "__version__", "grid_positions"]
