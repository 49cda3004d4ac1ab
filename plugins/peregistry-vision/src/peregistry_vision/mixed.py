"""RoPE-Mixed: 2-D rotary position embedding with learnable frequencies per head (Heo et al.
2024, "Rotary Position Embedding for Vision Transformer", arXiv:2403.13298, §3; timm
``RotaryEmbeddingMixed``; naver-ai/rope-vit ``rope_mixed``).

Pair ``j`` of head ``h`` of a token at ``(x, y)`` (column, row of the patch grid) rotates by

.. math::

    θ_{h,j}(x, y) = x·f^x_{h,j} + y·f^y_{h,j}

where ``f^x``, ``f^y`` are learned: the parameter ``freqs`` of shape ``(2, num_heads,
head_dim/2)``, ``freqs[0] = f^x``, ``freqs[1] = f^y`` (timm's ``freqs[:, block]`` of one block).
The paper initializes them with magnitudes ``m_k = temperature^(-4k/head_dim)``, ``k <
head_dim/4``, turned by a random angle ``φ_h`` per head::

    f^x_h = [m·cos φ_h, m·cos(φ_h + π/2)],   f^y_h = [m·sin φ_h, m·sin(φ_h + π/2)]

``x`` is ``(..., seq, dim)`` with all heads on the last axis, ``dim = num_heads·head_dim`` (as
timm's ``forward`` takes the ``dim`` channels before splitting heads): head ``h`` owns features
``[h·head_dim, (h+1)·head_dim)`` and rotates the pairs ``(2j, 2j+1)`` inside them (timm's
``rot``, rope-vit's complex pairs)::

    # x: [x0 x1 x2 x3] -> [-x1 x0 -x3 x2]

Without ``params`` the frequencies are those of the initialization with every ``φ_h = 0``:
``f^x = [m, 0]``, ``f^y = [0, m]``, the paper's RoPE-Axial, i.e. ``axial-rotary`` with
``dims=(head_dim/2, head_dim/2)`` and ``theta=temperature`` in every head.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import peregistry as per
from peregistry.plugin import Ctx, Frequencies, LearnedParams, MultiAxisRotary, RotaryTables
from peregistry.rope import full_width

__all__ = ["RopeMixed", "xy_positions"]


def xy_positions(height: int, width: int) -> Any:
    """``(2, height·width)`` NumPy int64 positions ``(x, y)`` = (column, row) of a patch grid,
    row-major (a ViT's token order; rope-vit's ``init_t_xy``, timm's ``get_mixed_grid``)."""
    import numpy as np

    y, x = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    return np.stack([x.ravel(), y.ravel()]).astype(np.int64)


def _head_dim_ok(d: int) -> bool:
    return d > 0 and d % 4 == 0


class RopeMixed(LearnedParams, MultiAxisRotary):
    """RoPE-Mixed: 2-D RoPE with learned frequencies per head (Heo et al. 2024, timm)."""

    name = "rope-mixed"
    family = "vision"
    summary = "RoPE-Mixed, learned 2-D frequencies per head (Heo et al. 2024, timm)"
    __slots__ = ()

    dim = per.Option(int, allowed="a positive integer: num_heads × head_dim, head_dim a multiple "
                     "of 4", check=lambda d: d > 0, example=32,
                     doc="x.shape[-1]: every head's features (timm's dim)")
    num_heads = per.Option(int, 1, allowed="a positive integer dividing dim", check=lambda h: h > 0,
                           doc="heads; each has its own frequencies")
    temperature = per.Option(float, 10.0, allowed="a finite number > 0 (and != 1)",
                             check=lambda t: t > 0 and t != 1.0,
                             doc="base of the initial magnitudes m_k = temperature^(-4k/head_dim)")

    def _validate(self) -> None:
        dim, heads = self.dim, self.num_heads
        if dim % heads or not _head_dim_ok(dim // heads):
            raise self._invalid("dim", dim, f"num_heads ({heads}) × head_dim with head_dim a "
                                            f"positive multiple of 4")

    @property
    def head_dim(self) -> int:
        return int(self.dim) // int(self.num_heads)

    @property
    def num_axes(self) -> int:
        return 2

    def magnitudes(self) -> list[float]:
        """The ``head_dim/4`` initial magnitudes ``m_k = temperature^(-4k/head_dim)``."""
        hd, t = self.head_dim, float(self.temperature)
        return [t ** (-4.0 * k / hd) for k in range(hd // 4)]

    # -- learned parameters ---------------------------------------------------------------------
    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"freqs": (2, int(self.num_heads), self.head_dim // 2)}

    def init(self, xp: Any, *, seed: int = 0, dtype: Any = None,
             device: Any = None) -> dict[str, Any]:
        """The paper's initialization: ``φ_h`` uniform in ``[0, 2π)`` from NumPy's PCG64 with
        ``seed`` (the same numbers on every backend), computed in float64, rounded to float32,
        then cast to ``dtype`` (default: the namespace's default float) on ``device``."""
        import numpy as np

        backend = self.services.backend_of_namespace(xp)
        out = _float_dtype(self.name, backend, dtype, device)
        phi = np.random.default_rng(seed).random((int(self.num_heads), 1)) * 2 * math.pi
        m = np.asarray(self.magnitudes())[None, :]
        fx = np.concatenate([m * np.cos(phi), m * np.cos(phi + math.pi / 2)], axis=-1)
        fy = np.concatenate([m * np.sin(phi), m * np.sin(phi + math.pi / 2)], axis=-1)
        freqs = np.stack([fx, fy]).astype(np.float32)  # float32-exact, as peregistry's inits
        return {"freqs": backend.from_numpy(freqs, dtype=out, device=device)}

    def _check_params(self, params: Any, ctx: Ctx) -> Any:
        # None: the axial frequencies (module docstring); anything else is checked as usual.
        return {} if params is None else super()._check_params(params, ctx)

    # -- params=None: RoPE-Axial through MultiAxisRotary ----------------------------------------
    def _head_dim(self) -> int:
        return int(self.dim)

    def _rotary_dim(self) -> int:
        return int(self.dim)

    def _interleaved(self) -> bool:
        return True

    def _axes_description(self) -> str:
        return "2 axes (x, y): column, row"

    def _axis_frequencies(self, seq_len: int | None) -> tuple[Frequencies, ...]:
        freqs = self._cache.get("axial")
        if freqs is None:  # per axis, every head's m_k in turn
            one = Frequencies.from_omega(self.magnitudes() * int(self.num_heads))
            freqs = self._cache["axial"] = (one, one)
        return freqs

    def _pair_order(self) -> tuple[int, ...]:
        # pair j of head h: x for j < head_dim/4, else y; grouped x pairs of every head first
        q, heads = self.head_dim // 4, int(self.num_heads)
        return tuple((h * q + j) if j < q else (heads * q + h * q + j - q)
                     for h in range(heads) for j in range(2 * q))

    def example_positions(self, rng: Any, shape: tuple[int, ...]) -> Any:
        """(x, y) on a 4 × 4 patch grid: the suite checks gradients by finite differences of
        the frequencies, whose truncation error grows as the positions cubed."""
        import numpy as np

        return np.asarray(rng.integers(0, 4, size=(2, *shape)), dtype=np.int64)

    # -- public methods: with params, the learned frequencies -----------------------------------
    def rotate(self, x: Any, positions: Any = None, *, offset: Any = 0,
               params: Mapping[str, Any] | None = None, seq_len: int | None = None) -> Any:
        """``x`` ``(..., seq, dim)`` rotated at ``positions`` ``(2, ...)`` (rows ``x``, ``y``;
        ``None``: both ``offset + arange(seq)``) by the frequencies ``params["freqs"]`` (without
        params: the axial ones). Same shape, dtype, namespace and device as ``x``; gradients
        reach ``params`` (torch autograd, ``jax.grad``)."""
        if params is None:
            return super().rotate(x, positions, offset=offset, seq_len=seq_len)
        ctx, cos, sin = self._learned_half(positions, params, x=x, offset=offset)
        return RotaryTables(cos, sin, layout="interleaved", head_dim=int(self.dim),
                            owner=self.name, ctx=ctx).rotate(x)

    def cos_sin(self, positions: Any, *, dtype: Any = None, seq_len: int | None = None,
                params: Mapping[str, Any] | None = None) -> tuple[Any, Any]:
        """``(cos θ, sin θ)``, each ``(*positions.shape[1:], dim)`` interleaved (``[c0 c0 c1 c1
        ..]``), of ``dtype`` (default: the params' dtype; without params the namespace's
        default float)."""
        if params is None:
            return super().cos_sin(positions, dtype=dtype, seq_len=seq_len)
        ctx, cos, sin = self._learned_half(positions, params)
        xp = ctx.xp
        out = (params["freqs"].dtype if dtype is None
               else _float_dtype(self.name, ctx.backend, dtype, ctx.device))
        return (xp.astype(full_width(cos, layout="interleaved", xp=xp), out),
                xp.astype(full_width(sin, layout="interleaved", xp=xp), out))

    def tables(self, positions: Any, *, seq_len: int | None = None,
               params: Mapping[str, Any] | None = None) -> RotaryTables:
        """The half-width tables of ``positions`` (see ``RotaryEncoder.tables``), with the
        learned frequencies when ``params`` are given."""
        if params is None:
            return super().tables(positions, seq_len=seq_len)
        ctx, cos, sin = self._learned_half(positions, params)
        return RotaryTables(cos, sin, layout="interleaved", head_dim=int(self.dim),
                            owner=self.name, ctx=ctx)

    def _learned_half(self, positions: Any, params: Mapping[str, Any], *, x: Any = None,
                      offset: Any = 0) -> tuple[Ctx, Any, Any]:
        """Validated positions (``offset + arange(seq)`` on both axes for None) and params, and
        ``cos θ``, ``sin θ`` of ``θ = x·f^x + y·f^y`` per pair, ``(*positions.shape[1:],
        dim/2)`` in the wide dtype (float64 where the backend has it)."""
        if offset is None or isinstance(offset, bool | str | bytes):
            raise TypeError(f"{self.name}: offset must be an int or an integer/real array, got "
                            f"{offset!r}")
        off = None if isinstance(offset, int) else offset
        ctx, (pos, off, xa) = self._context(positions, off, x)
        prepared = self._check_params(params, ctx)
        xp = ctx.xp
        if pos is None:
            if xa is None or len(xa.shape) < 2:
                raise ValueError(f"{self.name}: positions=None needs x of shape (..., seq, dim)")
            if off is not None:
                off = self._positions(off, ctx, what="offset")
            pos = self._default_positions(int(xa.shape[-2]), offset if off is None else off,
                                          ctx=ctx)
        else:
            if off is not None or offset != 0:
                raise ValueError(f"{self.name}: offset={offset!r} is only used with "
                                 f"positions=None; add it to the positions instead")
            pos = self._positions(pos, ctx)
        self._position_batch_shape(pos)  # (2, ...): names the axes when it is not
        f = xp.reshape(xp.astype(prepared["freqs"], ctx.wide), (2, int(self.dim) // 2))
        p = xp.astype(pos, ctx.wide)
        terms = [p[0, ..., None] * f[0, :], p[1, ..., None] * f[1, :]]
        if ctx.has_float64:
            theta = terms[0] + terms[1]
            return ctx, xp.cos(theta), xp.sin(theta)
        return (ctx, *_cos_sin_f32(p, f, xp=xp))


def _cos_sin_f32(p: Any, f: Any, *, xp: Any) -> tuple[Any, Any]:
    """``cos θ``, ``sin θ`` of ``θ = p[0]·f[0] + p[1]·f[1]`` in float32 (float32-only backends,
    JAX without x64) without float32's ``|θ|·eps`` angle error: each frequency is split in two
    halves of 12 significant bits (Veltkamp), so that the products with integer positions below
    4096 are exact; the four exact terms are summed into ``hi + lo`` (Knuth's TwoSum), and
    ``cos(hi + lo) = cos hi - lo·sin hi`` (``|lo| <= ulp(hi)/2``). Autodiff sees ``θ = p·f``:
    the splits carry the gradient of ``f`` in ``f_hi``. Other positions lose only accuracy."""
    split = 4097.0  # 2**12 + 1
    parts = []
    for a in (0, 1):
        c = f[a, :] * split
        hi = c - (c - f[a, :])
        pa = p[a, ..., None]
        parts += [pa * hi, pa * (f[a, :] - hi)]
    hi, lo = parts[0], xp.zeros_like(parts[0])
    for t in parts[1:]:
        s = hi + t
        bb = s - hi
        lo = lo + ((hi - (s - bb)) + (t - bb))
        hi = s
    c, s_ = xp.cos(hi), xp.sin(hi)
    return c - lo * s_, s_ + lo * c


def _float_dtype(owner: str, backend: Any, dtype: Any, device: Any) -> Any:
    """``dtype`` as a real floating dtype of ``backend`` (None: its default; names accepted)."""
    if dtype is None:
        return backend.default_float_dtype(device)
    floats = backend.float_dtypes()
    if isinstance(dtype, str) and dtype in floats:
        return floats[dtype]
    if not isinstance(dtype, str) and backend.is_float_dtype(dtype):
        return dtype
    raise TypeError(f"{owner}: dtype={dtype!r} is not a real floating dtype of {backend.name}; "
                    f"allowed: None, {', '.join(floats)}")
