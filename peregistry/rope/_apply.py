"""Precomputed ``(cos, sin)`` applied to any number of tensors: :class:`RotaryTables`.

FLUX-style models build their rotary tables once per forward and rotate the queries and keys of
every block with them; rebuilding the tables in each call would repeat the trigonometry dozens of
times. A :class:`RotaryTables` holds half-width tables (one ``cos``/``sin`` per pair, in the
wide dtype they were computed in), validates each tensor it rotates, casts the tables to the
dtype the rotation runs in and rotates with the rotation the framework dispatch chose for their
namespace when they were made, so that ``enc.tables(p).rotate(x)`` equals ``enc.rotate(x, p)``
bit for bit. It keeps nothing but the tables it was given and what it learnt of them then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import peregistry.rope._delegation as _delegation

from ..kinds.context import compute_float
from ._funcs import Layout, broadcasts_into, check_arrays, check_layout

if TYPE_CHECKING:
    from ..backends._base import Ctx

__all__ = ["RotaryTables", "apply_rotary", "rotate_features"]

#: Which features of the head rotate when ``rotary_dim < dim``: the first (GPT-NeoX, Phi) or the
#: last (DeepSeek-V4's ``[nope | rope]`` heads).
ROTARY_FEATURES = ("first", "last")


def rotate_features(x: Any, cos: Any, sin: Any, *, rotary_dim: int, interleaved: bool,
                    last: bool, cdt: Any, xp: Any, native: bool = True) -> Any:
    """The rotation of the first ``rotary_dim`` features of ``x`` (``last=False``) or of the
    last ones (``last=True``, DeepSeek-V4's ``apply_rotary_pos_emb`` on ``x[..., -rd:]``); the
    others pass through. Through the framework dispatch; ``native=False`` forces the generic
    rotation."""
    try:
        dim = x.shape[-1]
    except AttributeError:
        check_arrays("rotate_features", x=x, cos=cos, sin=sin)
        raise
    if not last or rotary_dim >= dim:
        return _delegation.rotate(x, cos, sin, rotary_dim=rotary_dim, interleaved=interleaved,
                                  cdt=cdt, xp=xp, native=native)
    # x: [p0 p1 | r0 r1 r2 r3] -> [p0 p1 | rotated r]
    out = _delegation.rotate(x[..., dim - rotary_dim:], cos, sin, rotary_dim=rotary_dim,
                             interleaved=interleaved, cdt=cdt, xp=xp, native=native)
    return xp.concat((x[..., :dim - rotary_dim], out), axis=-1)


class RotaryTables:
    """Half-width rotary tables, made once and applied to any number of tensors.

    :param cos: ``cos θ_i`` per pair, ``(*batch, rotary_dim/2)``, attention factor included;
        ``batch`` broadcasts against ``x.shape[:-1]`` of the tensors rotated (``(seq,)``,
        ``(batch, 1, seq)``, ...).
    :param sin: ``sin θ_i``, the same shape, dtype and namespace.
    :param layout: ``"half"`` pairs features ``(i, i + rotary_dim/2)``, ``"interleaved"``
        pairs ``(2i, 2i+1)``; features from ``rotary_dim`` on pass through.
    :param head_dim: the length ``x.shape[-1]`` must have (None: any, at least
        ``rotary_dim``).
    :param rotary_features: ``"first"``: the first ``rotary_dim`` features rotate; ``"last"``:
        the last ones (DeepSeek-V4's ``[nope | rope]`` heads).
    :param constant: the tables depend on nothing differentiable (integer positions and
        constants, as an encoder's ``tables`` knows): under ``torch.compile`` they then pass an
        opaque op, others a differentiable stack; either keeps inductor from recomputing their
        trigonometry for every element (the op has no forward-mode rule).

    :meth:`peregistry.RotaryEncoder.tables` makes them from an encoder; tables of any other
    source (such as :func:`peregistry.rope.cos_sin`, or a model's own half-width tables) work
    the same. The rotation runs in ``x``'s dtype for float32 and wider, else in float32, and the
    result has ``x``'s dtype, namespace and device. The tables are taken as they are when the
    object is made (it casts them to float32 then): make new ones for new values.
    """

    __slots__ = ("_batch", "_constant", "_ctx", "_float32", "_floats", "_rotation", "_type",
                 "cos", "head_dim", "interleaved", "last", "owner", "rotary_dim", "sin")

    def __init__(self, cos: Any, sin: Any, *, layout: Layout = "half", head_dim: int | None = None,
                 owner: str = "RotaryTables", ctx: Ctx | None = None,
                 rotary_features: str = "first", constant: bool = False) -> None:
        if ctx is None:
            from ..kinds.context import make_context

            if cos is None or sin is None:  # (make_context skips None: an optional argument)
                check_arrays(owner, cos=cos, sin=sin)
            ctx, (cos, sin) = make_context(owner, (cos, sin), names=("cos", "sin"))
        if tuple(cos.shape) != tuple(sin.shape) or cos.dtype != sin.dtype:
            raise ValueError(f"{owner}: cos and sin must have one shape and dtype, got "
                             f"{tuple(cos.shape)} {cos.dtype} and {tuple(sin.shape)} {sin.dtype}")
        if len(cos.shape) == 0 or not ctx.backend.is_float_dtype(cos.dtype):
            raise ValueError(f"{owner}: cos and sin must be real floating arrays (..., pairs), "
                             f"got shape {tuple(cos.shape)} and dtype {cos.dtype}")
        self.cos, self.sin, self.owner = cos, sin, owner
        self.interleaved = check_layout(layout)
        if rotary_features not in ROTARY_FEATURES:
            raise ValueError(f"{owner}: rotary_features must be one of "
                             f"{', '.join(map(repr, ROTARY_FEATURES))}, got {rotary_features!r}")
        self.last = rotary_features == "last"
        self.rotary_dim = 2 * int(cos.shape[-1])
        if head_dim is not None and head_dim < self.rotary_dim:
            raise ValueError(f"{owner}: head_dim={head_dim} is smaller than the {self.rotary_dim} "
                             f"features the tables rotate")
        self.head_dim = head_dim
        self._ctx = ctx
        # Once for every tensor rotated: the tables kept apart from the rotations by a tracing
        # compiler (not recomputed for each element), and in float32 where they are wider.
        xp = ctx.xp
        self._float32: tuple[Any, Any] | None = None
        if cos.dtype == getattr(xp, "float64", None):
            cos, sin, cos32, sin32 = _delegation.materialize(
                cos, sin, xp.astype(cos, xp.float32), xp.astype(sin, xp.float32), xp=xp,
                constant=constant)
            self._float32 = (cos32, sin32)
        else:
            cos, sin = _delegation.materialize(cos, sin, xp=xp, constant=constant)
        self.cos, self.sin = cos, sin
        self._constant = constant
        # What every rotation asks of the tables, answered once: their array type (an ``x`` of
        # it is the adapter's), the floating dtypes of the namespace, the positions' shape.
        self._type = type(cos)
        self._floats = frozenset({cos.dtype, *(t.dtype for t in self._float32 or ()),
                                  *ctx.backend.float_dtypes().values()})
        self._batch = tuple(cos.shape[:-1])
        self._rotation = _delegation.rotation(xp)  # the one dispatch, asked once

    @property
    def layout(self) -> Layout:
        """``"interleaved"`` (pairs ``(x0, x1), (x2, x3), ...``) or ``"half"`` (pairs
        ``(x_i, x_{i+d/2})``, the Llama/GPT-NeoX convention)."""
        return "interleaved" if self.interleaved else "half"

    def __repr__(self) -> str:
        return (f"RotaryTables(shape={tuple(self.cos.shape)}, dtype={self.cos.dtype}, "
                f"layout={self.layout!r}, owner={self.owner!r})")

    def rotate_all(self, *xs: Any) -> tuple[Any, ...]:
        """Each of ``xs`` ``(..., head_dim)`` rotated (``q, k = tables.rotate_all(q, k)``):
        same shape, dtype, namespace and device.

        The tables were checked, and the rotation for their namespace chosen, when they were
        made; each ``x`` is checked here by comparisons with what the tables know (the slow
        answers only for an ``x`` they do not describe, and for the error)."""
        ctx, owner, rotation = self._ctx, self.owner, self._rotation
        xp = ctx.xp
        out = []
        for x in xs:
            if type(x) is not self._type and not ctx.backend.owns(x):
                got = "None" if x is None else f"{type(x).__module__}.{type(x).__qualname__}"
                raise TypeError(f"{owner}: x must be an array of {ctx.backend.name}, like the "
                                f"tables; got {got}")
            dtype = x.dtype
            if dtype not in self._floats and not ctx.backend.is_float_dtype(dtype):
                raise TypeError(f"{owner}: x must have a real floating dtype of "
                                f"{ctx.backend.name} ({', '.join(ctx.backend.float_dtypes())}), "
                                f"got {dtype}")
            shape = tuple(x.shape)
            if (len(shape) == 0 or (self.head_dim is not None and shape[-1] != self.head_dim)
                    or shape[-1] < self.rotary_dim):
                want = "" if self.head_dim is None else f" == {self.head_dim}"
                raise ValueError(f"{owner}: x.shape={shape}, but x.shape[-1] should be"
                                 f"{want or f' >= {self.rotary_dim}'} (x is (..., seq, dim))")
            batch = self._batch
            if shape[len(shape) - 1 - len(batch):-1] != batch and not broadcasts_into(
                    batch, shape[:-1]):
                raise ValueError(f"{owner}: tables of positions {batch} do not broadcast "
                                 f"against x.shape[:-1]={shape[:-1]}")
            # float32 and wider rotate in their own dtype (in the native byte order), narrower
            # ones in float32
            cdt = dtype if dtype in (xp.float32, xp.float64) else compute_float(dtype, xp)
            cos, sin = self.cos, self.sin
            if cdt != cos.dtype:  # the tables in the dtype the rotation runs in
                if self._float32 is not None and cdt == xp.float32:
                    cos, sin = self._float32
                else:
                    cos, sin = _delegation.materialize(xp.astype(cos, cdt), xp.astype(sin, cdt),
                                                       xp=xp, constant=self._constant)
            if self.last:
                out.append(rotate_features(x, cos, sin, rotary_dim=self.rotary_dim,
                                           interleaved=self.interleaved, last=True, cdt=cdt,
                                           xp=xp))
            else:
                out.append(rotation(x, cos, sin, rotary_dim=self.rotary_dim,
                                    interleaved=self.interleaved, cdt=cdt, xp=xp))
        return tuple(out)

    def rotate(self, x: Any) -> Any:
        """``x`` ``(..., head_dim)`` rotated: same shape, dtype, namespace and device
        (:meth:`rotate_all` of one tensor)."""
        return RotaryTables.rotate_all(self, x)[0]


def apply_rotary(x: Any, cos: Any, sin: Any, *, layout: Layout = "half") -> Any:
    """``x`` rotated by half-width tables ``cos``/``sin`` ``(..., rotary_dim/2)`` (broadcasting
    against ``x.shape[:-1]``) in ``layout``; features from ``rotary_dim`` on pass through.

    The fast way for one tensor and tables of any source; for several tensors sharing tables
    use :class:`RotaryTables` (it casts the tables once). Bit for bit
    :func:`peregistry.rope.apply_rotation`, through the framework fast paths."""
    return RotaryTables(cos, sin, layout=layout, owner="apply_rotary").rotate(x)
