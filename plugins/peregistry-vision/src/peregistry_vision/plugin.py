"""Vision positional encoders for peregistry: N-D axial RoPE and 2-D sine-cosine tables.

Registered through the ``peregistry`` entry point group only (``[project.entry-points.peregistry]
peregistry-vision = "peregistry_vision.plugin"``), using nothing but peregistry's public plugin
API: :mod:`peregistry` and :mod:`peregistry.plugin`.

* ``axial-rotary`` — RoPE with one band of features per axis (FLUX ``EmbedND``, EVA-02's 2-D
  RoPE): positions ``(len(dims), ...)``.
* ``sincos-2d`` — MAE's fixed 2-D sine-cosine table (``get_2d_sincos_pos_embed``): positions
  ``(..., 2)`` as ``(row, col)``.
* ``detr-sine`` — DETR's ``PositionEmbeddingSine``, optionally normalized to ``[0, scale]``:
  positions ``(..., 2)`` as ``(row, col)``.
* ``rope-mixed`` — RoPE-Mixed (Heo et al. 2024, timm ``RotaryEmbeddingMixed``): 2-D RoPE with
  learned frequencies per head, in :mod:`.mixed`; positions ``(2, ...)`` as ``(x, y)``.
* ``wan-rope``, ``hunyuan-video-rope``, ``cogvideox-rope`` — the 3-D RoPE of the video
  diffusion transformers Wan, HunyuanVideo and CogVideoX (diffusers), in :mod:`.video`;
  positions ``(3, ...)`` as ``(t, h, w)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import peregistry as per
from peregistry.plugin import Ctx, Frequencies, MultiAxisRotary, cos_sin

from .mixed import RopeMixed
from .video import CogVideoXRope, HunyuanVideoRope, WanRope

__all__ = ["AxialRotary", "DetrSine", "RopeMixed", "SinCos2D", "grid_positions"]


def grid_positions(height: int, width: int) -> Any:
    """``(height, width, 2)`` NumPy int64 ``(row, col)`` positions of a patch grid, row-major
    (the token order of a ViT): ``grid_positions(h, w).reshape(-1, 2)`` lists the patches."""
    import numpy as np

    r, c = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    return np.stack([r, c], axis=-1).astype(np.int64)


def _row_col(name: str, positions: Any) -> tuple[Any, Any]:
    shape = tuple(positions.shape)
    if len(shape) == 0 or shape[-1] != 2:
        raise ValueError(f"{name}: positions.shape={shape}, but should be (..., 2): (row, col) "
                         f"pairs on the last axis")
    return positions[..., 0], positions[..., 1]


# -- N-D axial RoPE --------------------------------------------------------------------------------
def _even_positive(values: tuple[int, ...]) -> bool:
    return len(values) > 0 and all(v > 0 and v % 2 == 0 for v in values)


class AxialRotary(MultiAxisRotary):
    """N-D axial RoPE: one band of features per axis (FLUX EmbedND, EVA-02 2-D RoPE).

    Axis ``a`` rotates ``dims[a]`` features, i.e. ``dims[a]/2`` pairs with its own frequencies
    ``ω_{a,j} = theta^(-2j/dims[a])`` (``j < dims[a]/2``) at its own position ``p_a``. The pairs
    of axis 0 come first, then those of axis 1, ... — FLUX's ``EmbedND`` concatenates
    ``rope(ids[..., a], axes_dim[a], theta)`` over the axes in this order, and pairs features
    ``(2i, 2i+1)`` (``layout="interleaved"``, the default here)::

        # dims (4, 4), interleaved: x = [x0 x1 | x2 x3 | x4 x5 | x6 x7]
        #                        pair:  a0,j0   a0,j1   a1,j0   a1,j1

    FLUX.1 uses ``dims=(16, 56, 56)``, ``theta=10000`` on ids ``(t, row, col)``; EVA-02 uses two
    axes ``dims=(d/2, d/2)``. ``layout="half"`` pairs ``(i, i + rotary_dim/2)`` instead
    (GPT-NeoX style). Features past ``sum(dims)`` (if ``dim`` is larger) pass through.

    ``positions`` is ``(len(dims), ...)``: one row per axis, as M-RoPE (both build on
    :class:`peregistry.plugin.MultiAxisRotary`, which handles the positions and the per-axis
    tables). ``positions=None`` puts every axis at ``offset + arange(seq)`` (text tokens).
    Integer or real positions.
    """

    name = "axial-rotary"
    family = "vision"
    summary = "N-D axial RoPE, one feature band per axis (FLUX EmbedND, EVA-02)"
    __slots__ = ()

    dims = per.Option(tuple, allowed="a non-empty sequence of positive even integers",
                      check=_even_positive,
                      doc="features rotated per axis, e.g. 16,56,56 (FLUX) or 32,32 (EVA-02)",
                      example=(4, 6, 6))
    dim = per.Option(int, None, nullable=True,
                     allowed="None (= sum(dims)) or an even integer >= sum(dims)",
                     check=lambda d: d > 0 and d % 2 == 0,
                     doc="head dimension x.shape[-1]; default sum(dims)")
    theta = per.Option(float, 10000.0, allowed="a finite number > 0 (and != 1)",
                       check=lambda t: t > 0 and t != 1.0 and math.isfinite(t),
                       doc="frequency base θ of every axis")
    layout = per.Option(str, "interleaved", choices=("interleaved", "half"),
                        doc="'interleaved': pairs (2i, 2i+1), FLUX/EVA-02; 'half': (i, i+d/2)")

    def _validate(self) -> None:
        dims, dim = self.dims, self.dim
        if dim is not None and dim < sum(dims):
            raise self._invalid("dim", dim, f"None or an even integer >= sum(dims) = {sum(dims)}")

    @property
    def num_axes(self) -> int:
        return len(self.dims)

    def axis_frequencies(self) -> tuple[Frequencies, ...]:
        """Per axis, the ``dims[a]/2`` frequencies ``theta^(-2j/dims[a])`` (host constants)."""
        freqs = self._cache.get("axis_freqs")
        if freqs is None:
            theta = float(self.theta)
            freqs = self._cache["axis_freqs"] = tuple(
                Frequencies.from_omega(theta ** (-2.0 * j / d) for j in range(d // 2))
                for d in self.dims
            )
        return freqs  # type: ignore[no-any-return]

    # -- hooks of RotaryEncoder and MultiAxisRotary --------------------------------------------
    def _head_dim(self) -> int:
        return int(self.dim) if self.dim is not None else sum(self.dims)

    def _rotary_dim(self) -> int:
        return sum(self.dims)

    def _interleaved(self) -> bool:
        return bool(self.layout == "interleaved")

    def _axes_description(self) -> str:
        return f"dims={self.dims}"

    def _axis_frequencies(self, seq_len: int | None) -> tuple[Frequencies, ...]:
        return self.axis_frequencies()


# -- MAE 2-D sine-cosine ---------------------------------------------------------------------------
class SinCos2D(per.AbsoluteEncoder):
    """MAE's fixed 2-D sine-cosine embedding (He et al. 2021; ``get_2d_sincos_pos_embed``).

    Half of the ``dim`` features encode one coordinate with the 1-D table
    ``[sin(p·ω), cos(p·ω)]`` (sines first), ``ω_i = base^(-i/(dim/4))`` for ``i < dim/4``. As in
    MAE's ``util/pos_embed.py`` — whose ``np.meshgrid(grid_w, grid_h)`` makes ``grid[0]`` the
    *column* — the column half comes first::

        PE(row, col) = [sin(col·ω), cos(col·ω), sin(row·ω), cos(row·ω)]

    ``positions`` is ``(..., 2)`` as ``(row, col)``; output ``(..., dim)``. MAE's table for a
    ``g × g`` grid is ``enc.encode(grid_positions(g, g)).reshape(g*g, dim)``. Real positions are
    accepted (interpolated grids).
    """

    name = "sincos-2d"
    family = "vision"
    summary = "MAE 2-D sine-cosine table, (row, col) positions"
    continuous = True
    __slots__ = ()

    dim = per.Option(int, allowed="a positive multiple of 4", check=lambda d: d > 0 and d % 4 == 0,
                     doc="length of the embedding (MAE: the ViT width)")
    base = per.Option(float, 10000.0, allowed="a finite number > 0 (and != 1)",
                      check=lambda b: b > 0 and b != 1.0 and math.isfinite(b),
                      doc="wavelength base (10000 in MAE)")

    @property
    def frequencies(self) -> Frequencies:
        freqs = self._cache.get("freqs")
        if freqs is None:
            q = self.dim // 4
            freqs = self._cache["freqs"] = Frequencies.from_omega(
                float(self.base) ** (-i / q) for i in range(q))
        return freqs  # type: ignore[no-any-return]

    def _position_batch_shape(self, positions: Any) -> tuple[int, ...]:
        return tuple(positions.shape[:-1])

    def _encode(self, positions: Any, *, params: Mapping[str, Any], ctx: Ctx) -> Any:
        row, col = _row_col(self.name, positions)
        cc, cs = cos_sin(col, self.frequencies, ctx=ctx)
        rc, rs = cos_sin(row, self.frequencies, ctx=ctx)
        return ctx.xp.concat((cs, cc, rs, rc), axis=-1)

    def example_positions(self, rng: Any, shape: tuple[int, ...]) -> Any:
        import numpy as np

        return np.asarray(rng.integers(0, 256, size=(*shape, 2)), dtype=np.int64)


# -- DETR sine -------------------------------------------------------------------------------------
class DetrSine(per.AbsoluteEncoder):
    """DETR's ``PositionEmbeddingSine`` (Carion et al. 2020, ``models/position_encoding.py``).

    For a pixel at ``(row, col)`` (0-based) of an unpadded ``height × width`` feature map DETR
    takes ``y = row + 1``, ``x = col + 1`` (the cumulative sum of the mask) and, with
    ``normalize=True``, ``y ← y / (height + 1e-6) · scale``, ``x ← x / (width + 1e-6) · scale``.
    Each coordinate gets ``num_pos_feats`` features, sine and cosine interleaved with
    ``ω_j = temperature^(-2j/num_pos_feats)``::

        pos_y = [sin(y·ω0), cos(y·ω0), sin(y·ω1), cos(y·ω1), ...]
        PE(row, col) = [pos_y, pos_x]           # (..., 2·num_pos_feats), y half first

    DETR uses ``num_pos_feats=128`` (d_model 256), ``normalize=True``, ``scale=2π``. Positions
    are ``(..., 2)`` as ``(row, col)``; real positions are accepted (continuous). Padding masks
    are not modelled: for a padded image pass the unpadded ``height``/``width``.
    """

    name = "detr-sine"
    family = "vision"
    summary = "DETR PositionEmbeddingSine, optionally normalized, (row, col) positions"
    continuous = True
    __slots__ = ()

    num_pos_feats = per.Option(int, 64, allowed="a positive even integer",
                               check=lambda d: d > 0 and d % 2 == 0,
                               doc="features per coordinate; output has 2·num_pos_feats")
    temperature = per.Option(float, 10000.0, allowed="a finite number > 0 (and != 1)",
                             check=lambda t: t > 0 and t != 1.0 and math.isfinite(t),
                             doc="wavelength base")
    normalize = per.Option(bool, False, doc="divide by the map size and multiply by scale")
    scale = per.Option(float, None, nullable=True, allowed="None (= 2π) or a finite number > 0",
                       check=lambda s: s > 0 and math.isfinite(s),
                       doc="range of normalized coordinates (2π); only with normalize=True")
    height = per.Option(int, None, nullable=True, allowed="None or a positive integer",
                        check=lambda h: h > 0, doc="feature map height (normalize=True)")
    width = per.Option(int, None, nullable=True, allowed="None or a positive integer",
                       check=lambda w: w > 0, doc="feature map width (normalize=True)")

    def _validate(self) -> None:
        if not self.normalize:
            for opt in ("scale", "height", "width"):
                if getattr(self, opt) is not None:
                    raise self._invalid(opt, getattr(self, opt),
                                        "None unless normalize=True (DETR: 'normalize should be "
                                        "True if scale is passed')")
        else:
            for opt in ("height", "width"):
                if getattr(self, opt) is None:
                    raise self._invalid(opt, None, "a positive integer when normalize=True (the "
                                                   "size that coordinates are normalized by)")

    @property
    def out_dim(self) -> int:
        return 2 * int(self.num_pos_feats)

    def _axis_frequencies(self, size: int | None) -> Frequencies:
        """``ω_j``, with the normalization ``scale / (size + 1e-6)`` folded in (exact angles)."""
        key = ("freqs", size)
        freqs = self._cache.get(key)
        if freqs is None:
            f, t = int(self.num_pos_feats), float(self.temperature)
            norm = 1.0
            if size is not None:
                scale = 2 * math.pi if self.scale is None else float(self.scale)
                norm = scale / (size + 1e-6)
            freqs = self._cache[key] = Frequencies.from_omega(
                norm * t ** (-2.0 * j / f) for j in range(f // 2))
        return freqs  # type: ignore[no-any-return]

    def _position_batch_shape(self, positions: Any) -> tuple[int, ...]:
        return tuple(positions.shape[:-1])

    def _encode(self, positions: Any, *, params: Mapping[str, Any], ctx: Ctx) -> Any:
        xp = ctx.xp
        row, col = _row_col(self.name, positions)
        norm = bool(self.normalize)
        halves = []
        for p, size in ((row, self.height), (col, self.width)):
            # DETR's cumsum counts from 1; +1 is exact in ctx.wide for every integer position.
            c, s = cos_sin(xp.astype(p, ctx.wide) + 1, self._axis_frequencies(size if norm
                                                                               else None), ctx=ctx)
            # [s0 s1 ..], [c0 c1 ..] -> [s0 c0 s1 c1 ..]
            halves.append(xp.reshape(xp.stack((s, c), axis=-1), (*p.shape, self.num_pos_feats)))
        return xp.concat(halves, axis=-1)

    def example_positions(self, rng: Any, shape: tuple[int, ...]) -> Any:
        import numpy as np

        h = self.height if self.height is not None else 256
        w = self.width if self.width is not None else 256
        r = rng.integers(0, h, size=shape)
        c = rng.integers(0, w, size=shape)
        return np.stack([r, c], axis=-1).astype(np.int64)


@per.hookimpl
def peregistry_encoders() -> list[type[per.Encoder]]:
    return [AxialRotary, SinCos2D, DetrSine, RopeMixed, WanRope, HunyuanVideoRope, CogVideoXRope]
