"""peregistry-vision: vision positional encoders as a peregistry plugin.

Nothing to import: once installed, ``peregistry.get_encoder("axial-rotary", dims=(16, 56, 56))``,
``"sincos-2d"``, ``"detr-sine"``, ``"rope-mixed"`` and the video RoPEs ``"wan-rope"``,
``"hunyuan-video-rope"`` and ``"cogvideox-rope"`` are found through the ``peregistry`` entry point
group.
"""

from __future__ import annotations

from .mixed import RopeMixed, xy_positions
from .plugin import AxialRotary, DetrSine, SinCos2D, grid_positions
from .video import (
    CogVideoXRope,
    HunyuanVideoRope,
    WanRope,
    cogvideox_crop_region,
    cogvideox_positions,
    video_positions,
)

__version__ = "0.1.0"
__all__ = ["AxialRotary", "CogVideoXRope", "DetrSine", "HunyuanVideoRope", "RopeMixed", "SinCos2D",
           "WanRope", "__version__", "cogvideox_crop_region", "cogvideox_positions", "grid_positions",
           "video_positions", "xy_positions"]
