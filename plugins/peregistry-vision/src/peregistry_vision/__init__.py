"""peregistry-vision: vision positional encoders as a peregistry plugin.

Nothing to import: once installed, ``peregistry.get_encoder("axial-rotary", dims=(16, 56, 56))``,
``"sincos-2d"``, ``"detr-sine"`` and ``"rope-mixed"`` are found through the ``peregistry`` entry
point group.
"""

from __future__ import annotations

from .mixed import RopeMixed, xy_positions
from .plugin import AxialRotary, DetrSine, SinCos2D, grid_positions

__version__ = "0.1.0"
__all__ = ["AxialRotary", "DetrSine", "RopeMixed", "SinCos2D", "__version__", "grid_positions",
           "xy_positions"]
