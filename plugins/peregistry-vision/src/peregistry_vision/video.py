"""3-D (frame, height, width) rotary embeddings of video diffusion transformers, as diffusers
0.42.1 builds them: ``wan-rope`` (Wan 2.1/2.2, ``WanRotaryPosEmbed``), ``hunyuan-video-rope``
(HunyuanVideo, ``HunyuanVideoRotaryPosEmbed``) and ``cogvideox-rope`` (CogVideoX 1.0/1.5,
``get_3d_rotary_pos_embed``): axial RoPE with one band of interleaved pairs per axis, each model
with its own split of the head into bands and its own θ; positions are ``(3, ...)`` rows ``(t,
h, w)``, and :func:`video_positions` / :func:`cogvideox_positions` build the grids the models use.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import peregistry as per
from peregistry.plugin import Frequencies, MultiAxisRotary

__all__ = [
    "CogVideoXRope",
    "HunyuanVideoRope",
    "WanRope",
    "cogvideox_crop_region",
    "cogvideox_positions",
    "video_positions",
]


# -- position grids --------------------------------------------------------------------------------
def _positive_ints(owner: str, what: str, value: Any, count: int) -> tuple[int, ...]:
    """``value`` as ``count`` positive Python ints, or an error naming the function ``owner``,
    the argument ``what`` and ``value``."""
    try:
        if any(isinstance(v, bool) for v in value):
            raise TypeError
        items = tuple(operator.index(v) for v in value)  # NumPy integers too
    except TypeError:
        items = ()
    if len(items) != count or not all(v > 0 for v in items):
        raise ValueError(f"{owner}: {what}={value!r}, but should be {count} positive integers")
    return items


def video_positions(num_frames: int, height: int, width: int, *,
                    patch_size: tuple[int, int, int] = (1, 1, 1)) -> Any:
    """``(3, F·H·W)`` NumPy int64 positions ``(t, h, w)`` of the patch grid of a latent video of
    ``num_frames × height × width``, with ``F = num_frames // p_t``, ``H = height // p_h``,
    ``W = width // p_w`` (floor, as the models' ``forward`` takes them), in token order: frame
    by frame, each row-major (``Conv3d`` patches flattened, ``hidden_states.flatten(2)``).

    Wan: ``video_positions(*latents.shape[2:], patch_size=(1, 2, 2))`` are the ids of
    ``WanRotaryPosEmbed.forward``; HunyuanVideo: ``patch_size=(patch_size_t, patch_size,
    patch_size)`` those of ``HunyuanVideoRotaryPosEmbed.forward``; CogVideoX 1.5's ``"slice"``
    grid is ``video_positions(temporal_size, *grid_size)``."""
    import numpy as np

    f, h, w = _positive_ints("video_positions", "(num_frames, height, width)",
                             (num_frames, height, width), 3)
    pt, ph, pw = _positive_ints("video_positions", "patch_size", patch_size, 3)
    t, r, c = np.meshgrid(np.arange(f // pt), np.arange(h // ph), np.arange(w // pw),
                          indexing="ij")
    return np.stack([t.ravel(), r.ravel(), c.ravel()]).astype(np.int64)


def cogvideox_crop_region(grid_size: tuple[int, int], base_width: int,
                          base_height: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The ``crops_coords`` CogVideoX 1.0 passes to :func:`cogvideox_positions`: the grid
    ``(height, width)`` resized to cover ``base_height × base_width`` (the training grid,
    ``sample_height // patch_size`` × ``sample_width // patch_size``, 60 × 90 for CogVideoX)
    keeping its aspect ratio and centred: ``((top, left), (bottom, right))``. diffusers
    ``pipelines/cogvideo/pipeline_cogvideox.py`` ``get_resize_crop_region_for_grid``."""
    h, w = _positive_ints("cogvideox_crop_region", "grid_size", grid_size, 2)
    tw, th = _positive_ints("cogvideox_crop_region", "(base_width, base_height)",
                            (base_width, base_height), 2)
    if h / w > th / tw:
        resize_height, resize_width = th, round(th / h * w)
    else:
        resize_width, resize_height = tw, round(tw / w * h)
    top = round((th - resize_height) / 2.0)
    left = round((tw - resize_width) / 2.0)
    return (top, left), (top + resize_height, left + resize_width)


def cogvideox_positions(grid_size: tuple[int, int], temporal_size: int, *,
                        crops_coords: Any = None, grid_type: str = "linspace",
                        max_size: tuple[int, int] | None = None) -> Any:
    """``(3, T·H·W)`` NumPy positions ``(t, h, w)`` of the token grid of diffusers'
    ``get_3d_rotary_pos_embed(embed_dim, crops_coords, grid_size, temporal_size, grid_type=,
    max_size=)`` (``models/embeddings.py``), in its token order (frame by frame, row-major);
    ``grid_size = (H, W)``, ``T = temporal_size``.

    * ``grid_type="linspace"`` (CogVideoX 1.0; ``crops_coords = ((top, left), (bottom,
      right))``, :func:`cogvideox_crop_region`): float64 positions ``t_k = k``, ``h_i =
      linspace(top, bottom·(H-1)/H, H)[i]``, ``w_j = linspace(left, right·(W-1)/W, W)[j]``, so
      a grid smaller than the training grid is stretched over it. diffusers computes these
      with ``torch.linspace`` in float32 (its positions are these, rounded to float32).
    * ``grid_type="slice"`` (CogVideoX 1.5; ``max_size = (max_h, max_w)``, the training grid):
      int64 positions ``(k, i, j)``, the first ``H × W`` rows of a ``max_h × max_w`` grid; a
      grid larger than ``max_size`` is an error (diffusers fails to concatenate the tables).
    """
    import numpy as np

    h, w = _positive_ints("cogvideox_positions", "grid_size", grid_size, 2)
    try:
        t = -1 if isinstance(temporal_size, bool) else operator.index(temporal_size)
    except TypeError:
        t = -1
    if t < 1:
        raise ValueError(f"cogvideox_positions: temporal_size={temporal_size!r}, but should be "
                         f"a positive integer (the number of latent frames)")
    rows: Any
    cols: Any
    frames: Any
    if grid_type == "linspace":
        if crops_coords is None:
            raise ValueError("cogvideox_positions: crops_coords=None, but grid_type='linspace' "
                             "needs ((top, left), (bottom, right)), e.g. from "
                             "cogvideox_crop_region(grid_size, base_width, base_height)")
        try:
            (top, left), (bottom, right) = crops_coords
            corners = [float(v) for v in (top, left, bottom, right)]
        except (TypeError, ValueError):
            raise ValueError(f"cogvideox_positions: crops_coords={crops_coords!r}, but should "
                             f"be ((top, left), (bottom, right)) numbers") from None
        if not all(math.isfinite(v) for v in corners):
            raise ValueError(f"cogvideox_positions: crops_coords={crops_coords!r}, but should "
                             f"be finite numbers")
        top_f, left_f, bottom_f, right_f = corners
        # diffusers' stops: stop * (size - 1) / size, the crop's far edge less one cell.
        rows = np.linspace(top_f, bottom_f * (h - 1) / h, h, dtype=np.float64)
        cols = np.linspace(left_f, right_f * (w - 1) / w, w, dtype=np.float64)
        frames = np.arange(t, dtype=np.float64)
    elif grid_type == "slice":
        if max_size is None:
            raise ValueError("cogvideox_positions: max_size=None, but grid_type='slice' needs "
                             "(max_h, max_w), the training grid")
        mh, mw = _positive_ints("cogvideox_positions", "max_size", max_size, 2)
        if h > mh or w > mw:
            raise ValueError(f"cogvideox_positions: grid_size={(h, w)} exceeds max_size="
                             f"{(mh, mw)}; grid_type='slice' takes the first rows and columns "
                             f"of the max_size grid")
        rows, cols, frames = np.arange(h), np.arange(w), np.arange(t)
    else:
        raise ValueError(f"cogvideox_positions: grid_type={grid_type!r}, but should be "
                         f"'linspace' or 'slice'")
    tt, rr, cc = np.meshgrid(frames, rows, cols, indexing="ij")
    out = np.stack([tt.ravel(), rr.ravel(), cc.ravel()])
    return out.astype(np.int64 if grid_type == "slice" else np.float64)


# -- the encoders ----------------------------------------------------------------------------------
def _theta_ok(t: float) -> bool:
    return t > 0 and t != 1.0 and math.isfinite(t)


_THETA_ALLOWED = "a finite number > 0 (and != 1)"


class _VideoRope(MultiAxisRotary):
    """Axial RoPE on ``(t, h, w)`` with one band per axis of interleaved pairs, as diffusers'
    ``get_1d_rotary_pos_embed(d_a, pos, theta, use_real=True, repeat_interleave_real=True)``
    per axis, concatenated: a subclass gives the band widths :attr:`axes_dims`."""

    family = "vision"
    properties = frozenset({"multi-axis"})
    exempt_checks: ClassVar[Mapping[str, str]] = MappingProxyType({
        "check_mrope_equals_rotary_on_equal_axes":
            "each axis's band restarts the frequencies (θ^(-2j/d_a) for j < d_a/2), so with "
            "every axis at one position no single-axis rotary encoder is equal to it; the "
            "per-axis relative law (check_mrope_relative_per_axis) applies and is checked",
    })
    __slots__ = ()

    @property
    def axes_dims(self) -> tuple[int, int, int]:
        """The features rotated by the ``t``, ``h`` and ``w`` positions, in that order."""
        raise NotImplementedError

    @property
    def num_axes(self) -> int:
        return 3

    def axis_frequencies(self) -> tuple[Frequencies, ...]:
        """Per axis, its ``d_a/2`` frequencies ``1 / θ^(2j/d_a)`` (host float64 constants)."""
        freqs: tuple[Frequencies, ...] | None = self._cache.get("axis_freqs")
        if freqs is None:
            theta = float(self._values["theta"])
            # diffusers' expression, 1.0 / (theta ** (arange(0, d, 2) / d)): θ^(-2j/d) may be
            # one float64 ulp away from it, and Wan's float64 tables are compared bit for bit.
            freqs = tuple(
                Frequencies.from_omega(1.0 / theta ** ((2 * j) / d) for j in range(d // 2))
                for d in self.axes_dims)
            self._cache["axis_freqs"] = freqs
        return freqs

    # -- hooks of RotaryEncoder and MultiAxisRotary --------------------------------------------
    def _head_dim(self) -> int:
        return sum(self.axes_dims)

    def _rotary_dim(self) -> int:
        return sum(self.axes_dims)

    def _interleaved(self) -> bool:
        return True  # every model pairs (2i, 2i+1): x.unflatten(-1, (-1, 2))

    def _axes_description(self) -> str:
        t, h, w = self.axes_dims
        return f"(t, h, w) with {t}, {h}, {w} features"

    def _axis_frequencies(self, seq_len: int | None) -> tuple[Frequencies, ...]:
        return self.axis_frequencies()


class WanRope(_VideoRope):
    """Wan's 3-D RoPE (Wan 2.1/2.2; diffusers ``WanRotaryPosEmbed`` in
    ``models/transformers/transformer_wan.py``, the original ``rope_params``/``rope_apply``).

    A head of ``dim`` features is split into bands ``(d_t, d_h, d_w)`` with ``d_h = d_w =
    2·⌊dim/6⌋`` and ``d_t = dim - d_h - d_w`` (``dim=128``: ``(44, 42, 42)``). Pair ``j`` of
    axis ``a`` (features ``(2i, 2i+1)``, axis ``t``'s pairs first) turns by ``p_a·ω_{a,j}``::

        ω_{a,j} = 1 / θ^(2j/d_a),  j < d_a/2,  θ = 10000
        x'_{2i} = x_{2i}·cos - x_{2i+1}·sin,   x'_{2i+1} = x_{2i}·sin + x_{2i+1}·cos

    diffusers computes the tables in float64 (except on MPS) and rounds them to float32, as
    this encoder's ``cos_sin(..., dtype=float32)`` does: the same bits on torch (whose float64
    ``cos``/``sin`` both use; another library's may differ in the last float64 bit). The
    token at frame ``f``, row ``r``, column ``c`` of the patch grid has positions ``(f, r, c)``:
    :func:`video_positions` with ``patch_size=(1, 2, 2)``; diffusers' table stops at
    ``rope_max_seq_len=1024`` positions per axis, this encoder does not.
    """

    name = "wan-rope"
    summary = "Wan 2.1/2.2 3-D video RoPE (diffusers WanRotaryPosEmbed), (t, h, w) positions"
    __slots__ = ()

    dim = per.Option(int, 128, allowed="an even integer >= 6 (below 6 the h and w bands, "
                                       "2·(dim // 6) each, are empty)",
                     check=lambda d: d >= 6 and d % 2 == 0,
                     doc="attention head dim (attention_head_dim; 128 in every Wan 2.1/2.2)")
    theta = per.Option(float, 10000.0, allowed=_THETA_ALLOWED, check=_theta_ok,
                       doc="frequency base θ of every axis")

    @property
    def axes_dims(self) -> tuple[int, int, int]:
        d = int(self.dim)
        hw = 2 * (d // 6)
        return d - 2 * hw, hw, hw


class HunyuanVideoRope(_VideoRope):
    """HunyuanVideo's 3-D RoPE (diffusers ``HunyuanVideoRotaryPosEmbed`` in
    ``models/transformers/transformer_hunyuan_video.py``; the original ``get_nd_rotary_pos_embed``).

    The head is ``rope_axes_dim = (d_t, d_h, d_w)`` features (``(16, 56, 56)``, head dim 128),
    axis ``t``'s band first; pair ``j`` of axis ``a`` (features ``(2i, 2i+1)``) turns by
    ``p_a·ω_{a,j}`` with ``ω_{a,j} = 1 / θ^(2j/d_a)``, ``θ = 256`` (``rope_theta``). The
    positions of the token at frame ``f``, row ``r``, column ``c`` are ``(f, r, c)``:
    :func:`video_positions` with ``patch_size=(patch_size_t, patch_size, patch_size)``. diffusers
    computes the angles in float32; these are float64 (where the backend has it) rounded once.
    """

    name = "hunyuan-video-rope"
    summary = "HunyuanVideo 3-D video RoPE (diffusers HunyuanVideoRotaryPosEmbed), theta 256"
    __slots__ = ()

    rope_axes_dim = per.Option(
        tuple, (16, 56, 56), allowed="three positive even integers (t, h, w)",
        check=lambda s: len(s) == 3 and all(v > 0 and v % 2 == 0 for v in s),
        doc="features per axis (t, h, w); their sum is the head dim")
    theta = per.Option(float, 256.0, allowed=_THETA_ALLOWED, check=_theta_ok,
                       doc="frequency base θ (rope_theta)")

    @property
    def axes_dims(self) -> tuple[int, int, int]:
        t, h, w = self.rope_axes_dim
        return int(t), int(h), int(w)


class CogVideoXRope(_VideoRope):
    """CogVideoX's 3-D RoPE (diffusers ``get_3d_rotary_pos_embed`` in ``models/embeddings.py``,
    applied by ``apply_rotary_emb(use_real_unbind_dim=-1)``; CogVideoX 1.0 and 1.5).

    A head of ``dim`` features is split into bands ``(dim/4, 3·dim/8, 3·dim/8)`` (``dim=64``:
    ``(16, 24, 24)``), axis ``t``'s first; pair ``j`` of axis ``a`` (features ``(2i, 2i+1)``)
    turns by ``p_a·ω_{a,j}`` with ``ω_{a,j} = 1 / θ^(2j/d_a)``, ``θ = 10000``. The positions
    are those of its grid: CogVideoX 1.0 stretches the token grid over the crop of the training
    grid (``grid_type="linspace"``, real positions), 1.5 takes integer positions
    (``grid_type="slice"``): :func:`cogvideox_positions`. diffusers computes the angles in
    float32; these are float64 (where the backend has it) rounded once.
    """

    name = "cogvideox-rope"
    summary = "CogVideoX 3-D video RoPE (diffusers get_3d_rotary_pos_embed), (t, h, w) positions"
    __slots__ = ()

    dim = per.Option(int, 64, allowed="a positive multiple of 16 (so that dim/4 and 3·dim/8 "
                                      "are even and sum to dim)",
                     check=lambda d: d > 0 and d % 16 == 0,
                     doc="attention head dim (attention_head_dim; 64 in CogVideoX 1.0/1.5)")
    theta = per.Option(float, 10000.0, allowed=_THETA_ALLOWED, check=_theta_ok,
                       doc="frequency base θ of every axis")

    @property
    def axes_dims(self) -> tuple[int, int, int]:
        d = int(self.dim)
        return d // 4, d // 8 * 3, d // 8 * 3
