"""The base class of rotary encoders: ``rotate(x, positions)`` reads validate → table → apply.

* **validate** (:meth:`RotaryEncoder._rotate_call`): the caller's namespace, device and
  dtypes, ``x``'s shape, ``offset`` and ``positions``; the dtype to rotate in.
* **table** (:meth:`RotaryEncoder._rotation_tables`): half-width ``(cos, sin)``: rows of the
  encoder's table of positions in the one store of computed tables (:mod:`._tables`), or
  computed by the subclass's one hook, :meth:`_half_cos_sin`.
* **apply**: the rotation of the encoder's layout, through the one framework dispatch
  (:func:`._delegation.rotate`).

Nothing of a call is remembered: each call validates its arguments and reads the values of its
positions. Reuse is the caller's: :meth:`RotaryEncoder.tables` stops after the table step and
returns a :class:`RotaryTables` that rotates any number of tensors (one per forward, in every
layer, as Hugging Face passes ``position_embeddings`` down).
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

import peregistry.rope._delegation as _delegation
import peregistry.rope._kernels as _kernels

from ..backends._base import Ctx
from ..kinds.context import compute_float, devices_differ, resolve_dtype
from ..kinds.rotary import RotaryKind
from ._apply import RotaryTables, rotate_features
from ._call import Call, Rotation
from ._funcs import Layout, broadcasts_into
from ._offsets import check_offset_range, concrete_len
from ._tables import PositionTables
from ._temperature import QueryScale

__all__ = ["RotaryEncoder"]


#: An array of any framework: ``rotate`` gives back the type it is given.
_Array = TypeVar("_Array")


class RotaryEncoder(PositionTables, QueryScale, RotaryKind):
    """Rotates query/key features by position-dependent angles (RoPE and relatives).

    Feature pairs ``(a_i, b_i)`` of the first ``rotary_dim`` features are rotated by the angle
    ``θ_i(p)`` of their position (RoFormer, Su et al. 2021, arXiv:2104.09864, eq. 34)::

        a_i' = a_i·cos θ_i - b_i·sin θ_i,    b_i' = b_i·cos θ_i + a_i·sin θ_i

    scaled by an attention factor where a scaling type asks for one. Which features pair up is
    the ``layout``: ``"half"`` pairs ``(i, i + rotary_dim/2)`` (GPT-NeoX, Llama),
    ``"interleaved"`` pairs ``(2i, 2i+1)`` (RoFormer, GPT-J); features past ``rotary_dim`` pass
    through unchanged.

    The public methods live here. A subclass provides the angles through one private hook,
    :meth:`_half_cos_sin` (``cos θ_i``, ``sin θ_i`` per pair, for given positions, in
    ``ctx.wide``), and may change how positions look (:meth:`_position_batch_shape`,
    :meth:`_default_positions`, e.g. M-RoPE's ``(len(sections), ...)`` positions); the rotation
    itself is shared (:mod:`peregistry.rope`).

    Angles and tables are computed in ``ctx.wide`` (float64 where the backend has it, else
    float32 with exact range reduction); the rotation runs in ``x``'s dtype for float32/float64
    inputs and in float32 for narrower ones (bfloat16, float16), with one cast at the end.
    In eager mode, integer positions (``positions=None`` at an int ``offset``, or integer ids)
    read rows of the encoder's table of positions ``0 .. n-1``, kept in the one store of
    computed tables (:func:`peregistry.rope.set_table_cache_bytes`): the bits of computing.
    """

    __slots__ = ("_rotation",)
    _rotation: Rotation

    #: Bytes the cos and sin tables of positions ``0 .. n-1`` may take (per device and dtype);
    #: 0: no such table.
    _POSITION_TABLE_BYTES: ClassVar[int] = 32 << 20
    #: Declared (in its own body) by a subclass that overrides :meth:`_default_positions` when
    #: the tables of ``positions=None, offset=o`` are still rows ``o..o+seq-1`` of the tables of
    #: ``0..n-1`` (M-RoPE: its text positions are one position per token).
    _offset_rows_are_positions: ClassVar[bool] = False
    #: Whether rows of the table of positions serve ``positions=None`` at an offset, and
    #: integer position ids (decided once per class, :meth:`__init_subclass__`).
    _rows_at_offsets: ClassVar[bool] = True
    _rows_at_ids: ClassVar[bool] = True
    #: Whether one multi-axis token with every axis at one position reads its row (decided by
    #: :class:`~.scaled.MultiAxisRotary`).
    _rows_at_tokens: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Rows serve a class that keeps these default positions and batch shape, or whose own
        # default positions declare that they are one position per token.
        owner = next(c for c in cls.__mro__ if "_default_positions" in c.__dict__)
        ours = (owner is RotaryEncoder
                and cls._position_batch_shape is RotaryEncoder._position_batch_shape)
        cls._rows_at_ids = ours
        cls._rows_at_offsets = ours or bool(owner.__dict__.get("_offset_rows_are_positions"))

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        object.__setattr__(self, "_rotation", Rotation(
            self._head_dim(), self._rotary_dim(), self._interleaved(), self._rotary_last()))
        if _kernels.ACTIVE is None:  # read now, eagerly: not first inside a compiled region
            _kernels.active()

    # -- what a subclass may override (besides RotaryKind's hooks) ----------------------------
    def _default_positions(self, seq: int, offset: Any, *, ctx: Ctx) -> Any:
        """Positions for ``positions=None``: ``offset + arange(seq)`` (``seq`` may be a symbolic
        length, as under ``torch.export``/``jax.export``: see :func:`._offsets.concrete_len`)."""
        xp = ctx.xp
        if isinstance(offset, int):
            n = concrete_len(seq)
            if n is not None and offset + n <= 2**31 - 1:  # usual; else the stop may not fit
                return xp.arange(offset, offset + n, device=ctx.device)
            # A symbolic length: arange(seq) in the dtype arange(offset, offset + seq) has.
            wide = _delegation.wide_int(xp)
            return (xp.asarray(offset, dtype=wide, device=ctx.device)
                    + xp.arange(seq, dtype=wide, device=ctx.device))
        if xp.isdtype(offset.dtype, "integral"):
            # In the widest integer dtype: an int32 offset near 2**31 must not wrap (the
            # validation has checked that the last position fits, where it can be read).
            wide = _delegation.wide_int(xp)
            off = offset if offset.dtype == wide else xp.astype(offset, wide)
            return off + xp.arange(seq, dtype=wide, device=ctx.device)
        return offset + xp.arange(seq, dtype=offset.dtype, device=ctx.device)

    # -- public methods ------------------------------------------------------------------------
    def cos_sin(self, positions: Any, *, dtype: Any = None,
                seq_len: int | None = None) -> tuple[Any, Any]:
        """``(cos, sin)``, each ``(*positions.shape, rotary_dim)`` in the encoder's layout
        (``[c0 .. c_{h-1} c0 .. c_{h-1}]`` for half, ``[c0 c0 c1 c1 ..]`` for interleaved),
        attention factor included, of ``dtype`` (default: the namespace's default float).

        ``seq_len`` matters only for scalings that depend on the sequence length (``dynamic``,
        ``longrope``); omitted, it is ``max(positions) + 1`` as in Hugging Face (read from the
        data in eager mode; under ``jax.jit``/``torch.compile`` piecewise scalings select on
        device and ``dynamic`` asks for it).

        >>> import numpy as np
        >>> import peregistry as per
        >>> enc = per.get_encoder("rotary", dim=8)
        >>> cos, sin = enc.cos_sin(np.arange(4))
        >>> cos.shape, sin.dtype
        ((4, 8), dtype('float64'))
        >>> print(np.round(cos[2], 4))  # cos(2·ω_i), ω_i = 10000^(-2i/8), half layout
        [-0.4161  0.9801  0.9998  1.     -0.4161  0.9801  0.9998  1.    ]
        """
        ctx, (pos,) = self._context(positions)
        pos = self._positions(pos, ctx)
        out_dtype = resolve_dtype(self.name, ctx.backend, dtype, ctx.device)
        seq_len, tracing = self._check_seq_len(seq_len), ctx.backend.is_tracing(pos)
        cos, sin = self._tables_at(pos, ctx=ctx, cdt=out_dtype, seq_len=seq_len, tracing=tracing)
        layout: Layout = "interleaved" if self._rotation.interleaved else "half"
        return _delegation.full_width_tables(cos, sin, layout=layout, dtype=out_dtype,
                                             xp=ctx.xp)

    def rotate(self, x: _Array, positions: Any = None, *, offset: Any = 0,
               params: Mapping[str, Any] | None = None, seq_len: int | None = None) -> _Array:
        """``x`` rotated at ``positions``: same shape, dtype, namespace and device as ``x`` (to
        a type checker, the type of ``x``).

        :param x: ``(..., seq, dim)`` queries or keys (any real floating dtype).
        :param positions: broadcasts against ``x.shape[:-1]`` (shared ``(seq,)``, per batch
            ``(batch, 1, seq)``, ...); integer or real. ``None`` means ``offset + arange(seq)``.
        :param offset: int or integer array added to ``arange(seq)`` when ``positions`` is None
            (the number of cached tokens while decoding).
        :param params: must be None (rotary encoders have no learned parameters).
        :param seq_len: sequence length for ``dynamic``/``longrope`` scaling (see
            :meth:`cos_sin`); with ``positions=None`` and an int ``offset`` it defaults to
            ``offset + seq``, known without looking at data.

        >>> import numpy as np
        >>> import peregistry as per
        >>> enc = per.get_encoder("rotary", dim=8)
        >>> q = np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32)
        >>> out = enc.rotate(q)  # positions 0..4
        >>> out.shape, out.dtype
        ((2, 5, 8), dtype('float32'))
        >>> bool(np.array_equal(out[:, 0], q[:, 0]))  # position 0 is the identity
        True
        >>> bool(np.allclose(np.linalg.norm(out, axis=-1), np.linalg.norm(q, axis=-1)))
        True
        >>> bool(np.array_equal(enc.rotate(q[:, 3:], offset=3), out[:, 3:]))  # decoding
        True
        """
        out: _Array = self._rotate(x, positions, offset=offset, params=params, seq_len=seq_len,
                                   native=True)
        return out

    def tables(self, positions: Any, *, seq_len: int | None = None) -> RotaryTables:
        """The half-width tables of ``positions``, computed once, as a :class:`RotaryTables`
        whose ``rotate(x)`` / ``rotate_all(q, k, ...)`` equal ``self.rotate(x, positions)`` bit
        for bit without recomputing them: build them once per forward, use them in every
        block. ``positions`` and ``seq_len`` as for :meth:`rotate`.

        >>> import numpy as np
        >>> import peregistry as per
        >>> enc = per.get_encoder("rotary", dim=8)
        >>> rng = np.random.default_rng(0)
        >>> q, k = (rng.standard_normal((2, 4, 5, 8)).astype(np.float32) for _ in range(2))
        >>> t = enc.tables(np.arange(5))  # once per forward
        >>> t.layout, t.cos.shape
        ('half', (5, 4))
        >>> q2, k2 = t.rotate_all(q, k)  # in every layer
        >>> bool(np.array_equal(q2, enc.rotate(q))), bool(np.array_equal(k2, enc.rotate(k)))
        (True, True)
        """
        ctx, (pos,) = self._context(positions)
        pos = self._positions(pos, ctx)
        cos, sin = self._table(pos, ctx=ctx, seq_len=self._check_seq_len(seq_len),
                               tracing=ctx.backend.is_tracing(pos), static_len=None)
        spec = self._rotation
        return RotaryTables(cos, sin, layout="interleaved" if spec.interleaved else "half",
                            head_dim=spec.head_dim, owner=self.name, ctx=ctx,
                            rotary_features="last" if spec.last else "first",
                            constant=not ctx.backend.is_float_dtype(pos.dtype))

    # -- machinery -----------------------------------------------------------------------------
    def _rotate(self, x: Any, positions: Any, *, offset: Any, params: Mapping[str, Any] | None,
                seq_len: int | None, native: bool) -> Any:
        """:meth:`rotate`; ``native=False`` forces the generic Array API rotation (the
        reference the conformance suite compares framework fast paths with)."""
        try:
            call = self._rotate_call(x, positions, offset, params, seq_len)
            cos, sin = self._rotation_tables(call)
            spec = self._rotation
            if not spec.last:
                return _delegation.rotate(call.x, cos, sin, rotary_dim=spec.rotary_dim,
                                          interleaved=spec.interleaved, cdt=call.cdt,
                                          xp=call.ctx.xp, native=native, eager=not call.tracing)
            return rotate_features(call.x, cos, sin, rotary_dim=spec.rotary_dim,
                                   interleaved=spec.interleaved, last=True, cdt=call.cdt,
                                   xp=call.ctx.xp, native=native)
        except Exception as exc:  # a framework's error for arrays on two devices names neither
            backend = self._services.backend_of(x)
            err = None if backend is None else devices_differ(self.name, backend, (
                ("x", x), ("positions", positions), ("offset", offset)))
            if err is None:
                raise
            raise err from exc

    def _rotation_tables(self, call: Call, cdt: Any = None, *,
                         fuse: bool = True) -> tuple[Any, Any]:
        """Half-width ``(cos, sin)`` of dtype ``cdt`` (default ``call.cdt``) for a validated
        call: rows of the table of positions (eager integer positions, or an int offset), else
        computed and, with ``fuse``, cast to ``cdt`` and materialized (``fuse=False``: in
        ``ctx.wide``, for a caller that mixes the tables first, as FoPE)."""
        ctx, xshape, pos = call.ctx, tuple(call.x.shape), call.positions
        cdt = call.cdt if cdt is None else cdt
        static_len = None
        if pos is None:
            if type(call.offset) is int:
                static_len = call.offset + xshape[-2]
                if not call.tracing and type(self)._rows_at_offsets and call.offset >= 0:
                    # rows offset .. offset+seq-1 of the table of positions (views)
                    table = self._position_table(static_len, ctx=ctx, cdt=cdt)
                    if table is not None:
                        return (table[0][..., call.offset:static_len, :],
                                table[1][..., call.offset:static_len, :])
            pos = self._default_positions(xshape[-2], call.offset, ctx=ctx)
        batch = self._position_batch_shape(pos)
        if not broadcasts_into(batch, xshape[:-1]):
            raise ValueError(f"{self.name}: positions of shape {batch} do not broadcast against "
                             f"x.shape[:-1]={xshape[:-1]}; use (seq,) shared or e.g. "
                             f"(batch, 1, seq)")
        if call.positions is not None and not call.tracing:
            rows = (self._gathered_rows(pos, ctx=ctx, cdt=cdt) if type(self)._rows_at_ids
                    else self._token_rows(pos, ctx=ctx, cdt=cdt) if type(self)._rows_at_tokens
                    else None)
            if rows is not None:
                return rows
        cos, sin = self._table(pos, ctx=ctx, seq_len=call.seq_len, tracing=call.tracing,
                               static_len=static_len)
        if not fuse:
            return cos, sin
        # One table per position, shared by every head: a compiler must not recompute it for
        # each element of x (XLA would fuse it into the rotation loop).
        xp = ctx.xp
        return _delegation.materialize(cos if cos.dtype == cdt else xp.astype(cos, cdt),
                                       sin if sin.dtype == cdt else xp.astype(sin, cdt), xp=xp,
                                       constant=not ctx.backend.is_float_dtype(pos.dtype))

    def _rotate_call(self, x: Any, positions: Any, offset: Any,
                     params: Mapping[str, Any] | None, seq_len: int | None) -> Call:
        """Validate the arguments of :meth:`rotate` (the errors name what is wrong)."""
        services = self._services
        # x's adapter: one dict get, the registry's answer by type (not under torch.compile:
        # Dynamo would guard on the dict); else the registry asks its adapters
        compiler = getattr(sys.modules.get("torch"), "compiler", None)
        backend = (services.backend_by_type.get(type(x))
                   if compiler is None or not compiler.is_compiling() else None)
        if backend is None:
            backend = services.backend_of(x)
        if backend is not None and type(offset) is int and (
                positions is None or services.backend_of(positions) is backend):
            ctx, offset_arr = backend.context(x), None  # arrays of one backend: the usual call
        else:
            if offset is None or isinstance(offset, bool | str | bytes):
                raise TypeError(f"{self.name}: offset must be an int, a real number or an "
                                f"integer/real array, got {offset!r}")
            offset_arr = None if isinstance(offset, int) else offset
            ctx, (x, positions, offset_arr) = self._context(x, positions, offset_arr)
        if params is not None:
            self._check_params(params, ctx)
        xp = ctx.xp
        # (float32 and float64 are floating: the adapter is asked only about other dtypes)
        if x.dtype not in (xp.float32, xp.float64) and not ctx.backend.is_float_dtype(x.dtype):
            raise TypeError(f"{self.name}: x must have a real floating dtype of "
                            f"{ctx.backend.name} ({', '.join(ctx.backend.float_dtypes())}), "
                            f"got {x.dtype}")
        xshape = tuple(x.shape)
        if not xshape or xshape[-1] != self._rotation.head_dim:
            raise ValueError(f"{self.name}: x.shape={xshape}, but x.shape[-1] should be dim="
                             f"{self._rotation.head_dim} (x is (..., seq, dim))")
        if seq_len is not None:
            seq_len = self._check_seq_len(seq_len)
        tracing = ctx.backend.is_tracing(x)
        for a in (positions, offset_arr):
            if a is not None and not tracing:
                tracing = ctx.backend.is_tracing(a)
        # Compute in x's dtype if it is float32 or wider, else in float32; cast once at the end
        # (a float64 of another byte order, NumPy's >f8, in the native float64: compute_float).
        cdt = x.dtype if x.dtype in (xp.float32, xp.float64) else compute_float(x.dtype, xp)
        if positions is None:
            if len(xshape) < 2:
                raise ValueError(f"{self.name}: x.shape={xshape} has no sequence axis; x is "
                                 f"(..., seq, dim), or pass positions")
            if offset_arr is not None:
                offset = self._positions(offset_arr, ctx, what="offset")
            n = xshape[-2] if isinstance(xshape[-2], int) else None  # (concrete_len, inline)
            if not (type(offset) is int and n is not None
                    and -(2**31) <= offset <= 2**31 - 1 - n):
                check_offset_range(self.name, offset, xshape[-2], ctx, tracing=tracing)
        else:
            if offset_arr is not None or offset != 0:
                raise ValueError(f"{self.name}: offset={offset!r} is only used with "
                                 f"positions=None; add it to the positions instead")
            positions = self._positions(positions, ctx)
        return Call(ctx, x, positions, offset, seq_len, tracing, cdt)

    def _check_seq_len(self, seq_len: Any) -> int | None:
        if seq_len is None:
            return None
        if not isinstance(seq_len, int) or isinstance(seq_len, bool):
            try:
                if isinstance(seq_len, bool):
                    raise TypeError
                seq_len = operator.index(seq_len)
            except TypeError:
                raise TypeError(f"{self.name}: seq_len must be None or a Python int (the "
                                f"sequence length, static under jit), got {seq_len!r}") from None
        if seq_len < 0:
            raise ValueError(f"{self.name}: seq_len must be >= 0, got {seq_len}")
        return int(seq_len)
