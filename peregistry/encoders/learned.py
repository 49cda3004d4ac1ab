"""Learned absolute position tables: ``learned`` (1-D, BERT/GPT-2 style) and ``learned-2d``
(DETR-style separable row/column tables).

``learned``:  ``encode(p) = table[p]``, params ``{"table": (num_positions, dim)}``.

``learned-2d``: positions ``(..., 2)`` as ``(row, col)``,
``encode((r, c)) = concat(col[c], row[r])`` of length ``2·dim`` — column half first, as DETR's
``DetrLearnedPositionEmbedding`` (Carion et al. 2020, ``torch.cat([x_emb, y_emb])`` with ``x``
the column). ``grid(h, w, params=...)`` is the ``(h, w, 2·dim)`` image of every cell.

Params are plain ``dict[str, array]`` from ``enc.init(xp, seed=...)`` (the same numbers on every
backend for one seed); torch autograd and ``jax.grad`` flow through every method, and nothing
derived from the params is cached, so an optimizer step is always seen by the next call.

Positions must be integers in the table's range. In eager mode a position outside it is a
``ValueError`` naming the range. Under ``jax.jit`` / ``torch.compile`` the values are unknown
when the function is traced, so no error can be raised: the rows of out-of-range positions are
NaN instead (on every backend alike; never clamped or wrapped around, unlike a bare
``jnp.take``, which wraps ``-1`` to the last row).

Changing the resolution (ViT/DETR fine-tuning at a new image size, a longer context):
``enc.resize(params, num_positions=N)`` returns a new encoder and its table, linearly
interpolated with the conventions of ``torch.nn.functional.interpolate`` (``align_corners=False``
by default); for ``learned-2d`` the row and column tables are resized separately, which is
exactly bilinear interpolation of the grid (each half of a cell depends on one axis only).

This module is a plugin like any other: it is the ``learned`` entry point of the
``peregistry`` distribution.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

from .._markers import hookimpl
from .._options import Option
from ..backends._base import Ctx
from ..kinds.base import AbsoluteEncoder
from .learned_params import LearnedParams, check_param_arrays
from .pairs import index_dtype
from .tables import check_index_range, linear_resize, nan_where

__all__ = ["Learned", "Learned2D"]


def _positive_int(owner: str, what: str, value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{owner}: {what} must be a positive int, got {value!r}")
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{owner}: {what} must be a positive int, got {value!r}") from None
    if n <= 0:
        raise ValueError(f"{owner}: {what} must be a positive int, got {n}")
    return n


def _check_align(owner: str, align_corners: Any) -> bool:
    if not isinstance(align_corners, bool):
        raise TypeError(f"{owner}: align_corners must be True or False, got {align_corners!r}")
    return align_corners


class _LearnedBase(LearnedParams, AbsoluteEncoder):
    __slots__ = ()

    def _param_context(self, params: Any, what: str) -> tuple[Ctx, Mapping[str, Any]]:
        """Namespace and validated params for methods whose only arrays are the params."""
        if params is None:
            raise TypeError(f"{self.name}: {what} needs params (from enc.init(xp)); got None")
        check_param_arrays(self.name, params)
        if not isinstance(params, Mapping):
            raise TypeError(f"{self.name}: params must be a dict of arrays, got "
                            f"{type(params).__name__}")
        ctx, _ = self._context(*params.values())
        return ctx, self._check_params(params, ctx)

    def _lookup(self, table: Any, positions: Any, n: int, *, what: str, option: str,
                ctx: Ctx) -> Any:
        """``table[positions]`` of shape ``(*positions.shape, dim)``, range-checked."""
        xp = ctx.xp
        idt = index_dtype(ctx)
        idx = positions if positions.dtype == idt else xp.astype(positions, idt)
        idx, invalid = check_index_range(self.name, idx, n, what=what, option=option, ctx=ctx)
        # the adapter's N-d gather: one op where the framework has it (the standard's take is
        # 1-D: flatten, take, reshape cost more than the lookup itself on small inputs)
        out = ctx.backend.take(table, idx, axis=0)
        return nan_where(invalid, out, ctx=ctx)


class Learned(_LearnedBase):
    """Learned absolute position table (BERT, GPT-2): ``encode(p) = table[p]``."""

    name = "learned"
    __slots__ = ()

    num_positions = Option(int, allowed="a positive integer", check=lambda n: n > 0,
                           doc="rows of the table: positions 0 .. num_positions-1")
    dim = Option(int, allowed="a positive integer", check=lambda n: n > 0,
                 doc="length of each position's vector")

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"table": (int(self._values["num_positions"]), int(self._values["dim"]))}

    def example_positions(self, rng: Any, shape: tuple[int, ...]) -> Any:
        import numpy as np

        return np.asarray(rng.integers(0, self._values["num_positions"], size=shape),
                          dtype=np.int64)

    def position_range(self) -> tuple[int, int]:
        """Valid positions ``0 <= p < num_positions``: the table has no other rows."""
        return 0, int(self._values["num_positions"])

    def sequence_positions(self, n: int) -> Any:
        """At most ``num_positions``: the table has no rows beyond."""
        return super().sequence_positions(min(n, int(self._values["num_positions"])))

    def _encode(self, positions: Any, *, params: Mapping[str, Any], ctx: Ctx) -> Any:
        n = int(self._values["num_positions"])
        return self._lookup(params["table"], positions, n, what="positions",
                            option="num_positions", ctx=ctx)

    def resize(self, params: Mapping[str, Any], num_positions: int, *,
               align_corners: bool = False) -> tuple[Learned, dict[str, Any]]:
        """A ``learned`` encoder of ``num_positions`` rows and its table, linearly interpolated
        from ``params`` (as ``F.interpolate(table.T[None], size=num_positions, mode="linear",
        align_corners=align_corners)``), in the params' namespace, dtype and device.
        Differentiable; ``params`` are not modified."""
        n = _positive_int(self.name, "num_positions", num_positions)
        align = _check_align(self.name, align_corners)
        ctx, p = self._param_context(params, "resize")
        table = linear_resize(p["table"], n, align_corners=align, ctx=ctx)
        new = self.replace(num_positions=n)
        assert isinstance(new, Learned)
        return new, {"table": table}


class Learned2D(_LearnedBase):
    """DETR-style learned 2-D table: ``encode((r, c)) = concat(col[c], row[r])``."""

    name = "learned-2d"
    __slots__ = ()

    height = Option(int, allowed="a positive integer", check=lambda n: n > 0,
                    doc="rows of the row table: row positions 0 .. height-1", example=8)
    width = Option(int, allowed="a positive integer", check=lambda n: n > 0,
                   doc="rows of the column table: column positions 0 .. width-1", example=8)
    dim = Option(int, allowed="a positive integer", check=lambda n: n > 0,
                 doc="length of each half (the output has 2*dim)")

    @property
    def out_dim(self) -> int:
        """``2·dim``: the column half, then the row half."""
        return 2 * int(self._values["dim"])

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        d = int(self._values["dim"])
        return {"row": (int(self._values["height"]), d), "col": (int(self._values["width"]), d)}

    def example_positions(self, rng: Any, shape: tuple[int, ...]) -> Any:
        """``(*shape, 2)`` integer ``(row, col)`` pairs inside the grid."""
        import numpy as np

        r = rng.integers(0, self._values["height"], size=shape)
        c = rng.integers(0, self._values["width"], size=shape)
        return np.stack([r, c], axis=-1).astype(np.int64)

    def sequence_positions(self, n: int) -> Any:
        """The grid's cells in row-major order (at most ``height·width``), as ``(n, 2)``
        ``(row, col)`` pairs."""
        import numpy as np

        w = int(self._values["width"])
        i = np.arange(min(n, int(self._values["height"]) * w), dtype=np.int64)
        return np.stack([i // w, i % w], axis=-1)

    def _position_batch_shape(self, positions: Any) -> tuple[int, ...]:
        """The trailing ``(row, col)`` axis is consumed: output ``(*positions.shape[:-1],
        2·dim)``."""
        return tuple(positions.shape[:-1])

    def _encode(self, positions: Any, *, params: Mapping[str, Any], ctx: Ctx) -> Any:
        xp = ctx.xp
        shape = tuple(positions.shape)
        if len(shape) == 0 or shape[-1] != 2:
            raise ValueError(f"{self.name}: positions.shape={shape}, but should be (..., 2): "
                             f"(row, col) pairs on the last axis")
        h, w = int(self._values["height"]), int(self._values["width"])
        col = self._lookup(params["col"], positions[..., 1], w, what="column positions",
                           option="width", ctx=ctx)
        row = self._lookup(params["row"], positions[..., 0], h, what="row positions",
                           option="height", ctx=ctx)
        return xp.concat((col, row), axis=-1)

    def grid(self, h: int, w: int, *, params: Mapping[str, Any], dtype: Any = None) -> Any:
        """The ``(h, w, 2·dim)`` encodings of every cell of an ``h × w`` grid:
        ``out[r, c] = concat(col[c], row[r])`` (DETR's ``pos`` before its permute to
        ``(2·dim, h, w)``), in the params' namespace and device, of ``dtype`` (default: the
        params' dtype)."""
        h = _positive_int(self.name, "h", h)
        w = _positive_int(self.name, "w", w)
        H, W = int(self._values["height"]), int(self._values["width"])
        if h > H or w > W:
            raise ValueError(f"{self.name}: grid({h}, {w}) exceeds the tables: h must be in "
                             f"[1, {H}] (height={H}) and w in [1, {W}] (width={W}); resize the "
                             f"tables (enc.resize) for larger grids")
        ctx, p = self._param_context(params, "grid")
        out_dtype = self._output_dtype(dtype, p, ctx)
        xp = ctx.xp
        d = int(self._values["dim"])
        col = xp.broadcast_to(xp.expand_dims(p["col"][:w, :], axis=0), (h, w, d))
        row = xp.broadcast_to(xp.expand_dims(p["row"][:h, :], axis=1), (h, w, d))
        out = xp.concat((col, row), axis=-1)
        return out if out.dtype == out_dtype else xp.astype(out, out_dtype)

    def resize(self, params: Mapping[str, Any], height: int | None = None,
               width: int | None = None, *,
               align_corners: bool = False) -> tuple[Learned2D, dict[str, Any]]:
        """A ``learned-2d`` encoder of the new ``height``/``width`` (None keeps one) and its
        tables. Row and column tables are resized separately by linear interpolation, which makes
        ``grid`` exactly the bilinear interpolation (``F.interpolate(mode="bilinear",
        align_corners=align_corners)``) of the old grid. Differentiable; the returned arrays
        are new (never the caller's ``params``), also for an axis whose size does not change."""
        H, W = int(self._values["height"]), int(self._values["width"])
        nh = H if height is None else _positive_int(self.name, "height", height)
        nw = W if width is None else _positive_int(self.name, "width", width)
        align = _check_align(self.name, align_corners)
        ctx, p = self._param_context(params, "resize")
        # An axis of unchanged size gets a copy: new params never alias the caller's, so an
        # in-place optimizer step on one cannot change the other (differentiable, like a clone).
        xp = ctx.xp
        row = (xp.astype(p["row"], p["row"].dtype, copy=True) if nh == H
               else linear_resize(p["row"], nh, align_corners=align, ctx=ctx))
        col = (xp.astype(p["col"], p["col"].dtype, copy=True) if nw == W
               else linear_resize(p["col"], nw, align_corners=align, ctx=ctx))
        new = self.replace(height=nh, width=nw)
        assert isinstance(new, Learned2D)
        return new, {"row": row, "col": col}


@hookimpl
def peregistry_encoders() -> list[type[AbsoluteEncoder]]:
    """This family's encoders, ``learned`` and ``learned-2d`` (hook ``peregistry_encoders``)."""
    return [Learned, Learned2D]
