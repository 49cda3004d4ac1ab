"""Encoder base classes: options declared once; validation, immutability, hashing and repr for free.

Every encoder is a subclass of one of the four *kinds*:

=====================  =========================================================================
kind                   public method(s)
=====================  =========================================================================
``absolute``           ``encode(positions, *, params=None, dtype=None)``
``rotary``             ``rotate(x, positions=None, *, offset=0, params=None)``, ``cos_sin(...)``
``bias``               ``bias(q_positions, k_positions, *, params=None, dtype=None)``
``relative-embedding`` ``embed(q_positions, k_positions, *, params=None, dtype=None)``
=====================  =========================================================================

The public methods live here, in the base classes: they find the caller's namespace and device
once, validate positions and dtypes, and hand a :class:`Ctx` to the subclass's private hook
(``_encode``, ...), which computes in the wide dtype ``ctx.wide`` with Array API calls only. The
result is cast to the requested dtype exactly once, here.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from .._options import Option, freeze, thaw
from .._services import current_services, use_services

if TYPE_CHECKING:
    from .._services import Services
    from ..backends._base import Backend

__all__ = [
    "KINDS",
    "AbsoluteEncoder",
    "BiasEncoder",
    "Ctx",
    "Encoder",
    "RelativeEmbedding",
    "RotaryEncoder",
]

KINDS = ("absolute", "rotary", "bias", "relative-embedding")


@dataclass(frozen=True, slots=True)
class Ctx:
    """What a private hook needs to know about the caller's arrays.

    :ivar xp: the Array API namespace of the inputs.
    :ivar backend: the adapter of that namespace.
    :ivar device: the inputs' device (None inside a tracer, or for a sharded array).
    :ivar wide: the float dtype to compute in (float64 where the backend offers it).
    """

    xp: Any
    backend: Backend
    device: Any
    wide: Any

    @property
    def has_float64(self) -> bool:
        return bool(self.wide == getattr(self.xp, "float64", None))

    def constant(self, values: Any, dtype: Any = None) -> Any:
        """A host constant (a Python number or list) as an array on the inputs' device."""
        return self.xp.asarray(values, dtype=self.wide if dtype is None else dtype,
                               device=self.device)


def _construct(cls: type[Encoder], options: dict[str, Any]) -> Encoder:
    return cls(**options)


class Encoder:
    """Base of all encoders. Subclass one of the four kind classes, not this one.

    Class attributes a subclass sets:

    ``name``
        the registry name (``"sinusoidal"``); unique across all plugins.
    ``family``
        the family it belongs to (defaults to ``name``).
    ``summary``
        one line for ``peregistry list`` (defaults to the first line of the docstring).
    ``properties``
        the laws it obeys, which select conformance checks (e.g. ``"shift-linear"``).
    ``continuous``
        True if real-valued positions are meaningful.

    Options: attributes that are :class:`~peregistry.Option` instances.

    Every encoder holds the :attr:`services` (backend adapters, rope scalings, other encoders) of
    the registry that built it; an encoder built outside a registry, or unpickled, uses the
    default registry's.
    """

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    family: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    properties: ClassVar[frozenset[str]] = frozenset()
    continuous: ClassVar[bool] = False
    _option_specs: ClassVar[dict[str, Option]] = {}

    __slots__ = ("_cache", "_hash", "_key", "_services", "_values")
    _values: dict[str, Any]
    _key: tuple[tuple[str, Any], ...]
    _hash: int
    _services: Services
    #: Derived host constants (frequencies, ...): filled lazily, never part of identity.
    _cache: dict[str, Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        specs: dict[str, Option] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                if isinstance(value, Option):
                    specs.pop(attr, None)
                    specs[attr] = value
        cls._option_specs = specs
        if cls.name and not cls.family:
            cls.family = cls.name
        if cls.name and not cls.summary:
            doc = inspect.getdoc(cls) or ""
            cls.summary = doc.strip().splitlines()[0] if doc.strip() else ""

    def __init__(self, **options: Any) -> None:
        owner = self.name or type(self).__name__
        specs = self._option_specs
        unknown = [k for k in options if k not in specs]
        if unknown:
            valid = ", ".join(specs) or "none"
            raise TypeError(
                f"{owner}: unknown option{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(repr(k) for k in unknown)}; valid options: {valid}"
            )
        missing = [k for k, s in specs.items() if s.required and k not in options]
        if missing:
            described = ", ".join(
                f"{k!r} ({specs[k].allowed})" for k in missing
            )
            raise TypeError(f"{owner}: missing required option{'s' if len(missing) > 1 else ''} "
                            f"{described}")
        values: dict[str, Any] = {}
        for key, spec in specs.items():
            if key in options:
                values[key] = spec.convert(owner, options[key])
            else:
                values[key] = freeze(spec.default)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_cache", {})
        services = current_services()
        object.__setattr__(self, "_services", services)
        with use_services(services):  # lookups while validating (scaling types) ask it too
            self._validate()
        identity = tuple(values.items())
        object.__setattr__(self, "_key", identity)
        object.__setattr__(self, "_hash", hash((self.name, identity)))

    # -- validation ----------------------------------------------------------------------------
    def _validate(self) -> None:
        """Cross-option checks; override and call :meth:`_invalid` for a bad combination."""

    def _invalid(self, option: str, value: Any, allowed: str) -> ValueError:
        """The standard error for a bad option value: names encoder, option, value, allowed."""
        return ValueError(f"{self.name}: option {option!r} must be {allowed}, got {value!r}")

    # -- identity ------------------------------------------------------------------------------
    @property
    def options(self) -> dict[str, Any]:
        """Every option, defaults included, as a fresh dict (changing it changes nothing)."""
        return {k: thaw(v) for k, v in self._values.items()}

    def replace(self, **changes: Any) -> Encoder:
        """A new encoder of the same class with some options changed (validated again), served
        by the same registry."""
        with use_services(self._services):
            return type(self)(**{**self.options, **changes})

    @property
    def services(self) -> Services:
        """The registry that built this encoder, as the lookups an encoder may use
        (``backend_of``, ``backend_of_namespace``, ``backend``, ``backends``, ``scalings``,
        ``get_encoder``): not part of the encoder's identity, and not pickled."""
        return self._services

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            f"{self.name} encoders are immutable; use enc.replace({name}=...) for a new one"
        )

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{self.name} encoders are immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Encoder):
            return NotImplemented
        return self.name == other.name and self._key == other._key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return f"get_encoder({self.name!r}{opts})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_construct, (type(self), self.options))

    def __copy__(self) -> Encoder:
        return self.replace()  # a new equal encoder, served by the same registry

    def __deepcopy__(self, memo: dict[int, Any]) -> Encoder:
        return self.replace()

    # -- conformance-suite support -------------------------------------------------------------
    def example_positions(self, rng: Any, shape: tuple[int, ...]) -> Any:
        """Typical valid positions of ``shape`` as a NumPy array, for the conformance suite.

        The default draws integers in ``[0, 1024)``; encoders with other position conventions
        (bounded tables, 2-D or multi-axis positions) override it.
        """
        import numpy as np

        return np.asarray(rng.integers(0, 1024, size=shape), dtype=np.int64)

    @classmethod
    def example_options(cls) -> dict[str, Any]:
        """Options that build a small, typical instance: what ``peregistry check`` and
        ``peregistry plot`` give the required options the user leaves out.

        The default takes each required option's :meth:`Option.example_value` (its declared
        ``example``, else a generic value of its type) and leaves out an option that has none
        (the caller reports it). Override it when required options depend on each other.
        """
        from .._options import NO_EXAMPLE

        examples = {key: spec.example_value() for key, spec in cls._option_specs.items()
                    if spec.required}
        return {key: value for key, value in examples.items() if value is not NO_EXAMPLE}

    def sequence_positions(self, n: int) -> Any:
        """The first ``n`` positions of a sequence, in order, as a NumPy array (``peregistry
        plot`` draws the encoder along them): ``arange(n)``; encoders with bounded tables or
        positions of another shape override it."""
        import numpy as np

        return np.arange(n, dtype=np.int64)

    # -- learned parameters --------------------------------------------------------------------
    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Names and shapes of the learned parameters (empty for fixed encoders)."""
        return {}

    @property
    def learned(self) -> bool:
        return bool(self.param_shapes())

    def init_std(self, name: str) -> float:
        """Standard deviation of the normal initialisation of parameter ``name``."""
        return 0.02

    def init(self, xp: Any, *, seed: int = 0, dtype: Any = None, device: Any = None) -> dict[str, Any]:
        """Fresh parameters as a plain ``dict[str, array]`` of namespace ``xp``.

        Values come from NumPy's PCG64 generator, so one seed gives the same numbers on every
        backend. ``xp`` is a module (``numpy``, ``torch``, ``jax.numpy``, ``array_api_strict``)
        or a backend name.
        """
        shapes = self.param_shapes()
        if not shapes:
            raise TypeError(f"{self.name} has no learned parameters; nothing to init")
        backend = self._services.backend_of_namespace(xp)
        dtype = resolve_dtype(self.name, backend, dtype, device)
        return {
            key: backend.random_normal(shape, seed=seed + i, std=self.init_std(key),
                                       dtype=dtype, device=device)
            for i, (key, shape) in enumerate(shapes.items())
        }

    def _check_params(self, params: Mapping[str, Any] | None, ctx: Ctx) -> Mapping[str, Any]:
        shapes = self.param_shapes()
        if not shapes:
            if params is not None:
                raise TypeError(f"{self.name} has no learned parameters; got params={params!r}")
            return {}
        if params is None:
            raise TypeError(f"{self.name} needs params (from enc.init(xp)); got None")
        if not isinstance(params, Mapping):
            raise TypeError(f"{self.name}: params must be a dict of arrays, got "
                            f"{type(params).__name__}")
        if set(params) != set(shapes):
            raise ValueError(f"{self.name}: params must have keys {sorted(shapes)}, got "
                             f"{sorted(params)}")
        for key, shape in shapes.items():
            got = tuple(params[key].shape)
            if got != shape:
                raise ValueError(f"{self.name}: params[{key!r}].shape={got}, but should be {shape}")
        return ctx.backend.prepare_params(params)

    # -- shared helpers for the public methods -------------------------------------------------
    def _context(self, *arrays: Any) -> tuple[Ctx, list[Any]]:
        """Namespace, backend, device and wide dtype of the inputs; Python numbers and sequences
        become NumPy arrays. All array inputs must belong to one backend."""
        return make_context(self.name, arrays, services=self._services)

    def _positions(self, positions: Any, ctx: Ctx, what: str = "positions") -> Any:
        """Check that positions are numeric (integer, or real for continuous encoders)."""
        return check_positions(self.name, positions, ctx, what=what, continuous=self.continuous)


def make_context(owner: str, arrays: tuple[Any, ...], *,
                 services: Services | None = None) -> tuple[Ctx, list[Any]]:
    """The :class:`Ctx` of ``arrays`` (None entries skipped) and the arrays, Python numbers and
    sequences made arrays of the others' backend (NumPy if there are none). Backends are looked
    up in ``services`` (default: :func:`peregistry._services.current_services`)."""
    registry = current_services() if services is None else services
    backend = None
    owners = []
    for a in arrays:
        b = None if a is None else registry.backend_of(a)
        owners.append(b)
        if a is None:
            continue
        if b is None:
            if isinstance(a, int | float | list | tuple) and not isinstance(a, bool):
                continue
            raise TypeError(
                f"{owner}: expected an array of a registered backend "
                f"({', '.join(x.name for x in registry.backends())}) or a Python "
                f"number/sequence, got {type(a).__module__}.{type(a).__qualname__}"
            )
        if backend is None:
            backend = b
        elif b is not backend:
            raise TypeError(
                f"{owner}: inputs mix arrays of {backend.name} and {b.name}; pass all arrays "
                f"from one framework (peregistry.convert moves arrays between frameworks)"
            )
    if backend is None:
        import numpy  # noqa: F401 - Python inputs are NumPy's

        backend = registry.backend("numpy")
    xp = backend.namespace()
    device = None
    out = []
    for a, b in zip(arrays, owners, strict=True):
        if a is not None and b is None:
            a = _from_python(owner, a, backend)
        elif a is not None and device is None:
            device = backend.device(a)
        out.append(a)
    return Ctx(xp=xp, backend=backend, device=device, wide=backend.wide_float_dtype(device)), out


def _from_python(owner: str, a: Any, backend: Backend) -> Any:
    import numpy as np

    arr = np.asarray(a)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{owner}: positions must be numbers, got {a!r}")
    return backend.from_numpy(arr)


def check_positions(owner: str, positions: Any, ctx: Ctx, *, what: str, continuous: bool) -> Any:
    xp = ctx.xp
    dtype = positions.dtype
    try:
        integral = xp.isdtype(dtype, "integral")
        real = xp.isdtype(dtype, "real floating")
    except Exception:  # NumPy str/object dtypes and other non-numeric arrays
        integral = real = False
    if integral:
        return positions
    if real:
        if continuous:
            return positions
        raise TypeError(
            f"{owner}: {what} must have an integer dtype (this encoder is defined at integer "
            f"positions only), got {ctx.backend.dtype_name(dtype)}"
        )
    allowed = "an integer or real floating dtype" if continuous else "an integer dtype"
    raise TypeError(f"{owner}: {what} must have {allowed}, got dtype {dtype}")


def resolve_dtype(owner: str, backend: Backend, dtype: Any, device: Any) -> Any:
    """``dtype=None`` → the namespace's default real floating dtype; names like ``"bfloat16"``
    are accepted; anything not a real floating dtype of ``backend`` is a ``TypeError``."""
    if dtype is None:
        return backend.default_float_dtype(device)
    floats = backend.float_dtypes()
    if isinstance(dtype, str):
        if dtype in floats:
            return floats[dtype]
    elif backend.is_float_dtype(dtype):
        return dtype
    raise TypeError(
        f"{owner}: dtype={dtype!r} is not a real floating dtype of {backend.name}; "
        f"allowed: None, {', '.join(floats)}"
    )


def check_encoder_class(obj: Any) -> str | None:
    """Why ``obj`` is not a registrable encoder class, or None if it is."""
    if not (isinstance(obj, type) and issubclass(obj, Encoder)):
        return f"{obj!r}, not an Encoder subclass"
    if not isinstance(obj.name, str) or not obj.name:
        return f"{obj.__qualname__} without a name"
    if obj.kind not in KINDS:
        return f"{obj.__qualname__} of unknown kind {obj.kind!r} (kinds: {', '.join(KINDS)})"
    return None


class AbsoluteEncoder(Encoder):
    """Maps positions to vectors: ``encode(positions) -> (*positions.shape, out_dim)``."""

    kind = "absolute"
    __slots__ = ()

    @property
    def out_dim(self) -> int:
        """Length of one position's vector (``options["dim"]`` unless a subclass says else)."""
        return int(self._values["dim"])

    def encode(self, positions: Any, *, params: Mapping[str, Any] | None = None,
               dtype: Any = None) -> Any:
        """The encoding of every position: ``(*positions.shape, out_dim)``, in the positions'
        namespace and on their device, of ``dtype`` (default: the namespace's default float)."""
        ctx, (pos,) = self._context(positions)
        pos = self._positions(pos, ctx)
        out_dtype = resolve_dtype(self.name, ctx.backend, dtype, ctx.device)
        params = self._check_params(params, ctx)
        out = self._encode(pos, params=params, ctx=ctx)
        return out if out.dtype == out_dtype else ctx.xp.astype(out, out_dtype)

    def _encode(self, positions: Any, *, params: Mapping[str, Any], ctx: Ctx) -> Any:
        """Compute the encoding (any float dtype; the caller casts once)."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement _encode")


class RotaryEncoder(Encoder):
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
    itself (:meth:`_apply_rotation`) is shared.

    Angles and tables are computed in ``ctx.wide`` (float64 where the backend has it, else
    float32 with exact range reduction); the rotation runs in ``x``'s dtype for float32/float64
    inputs and in float32 for narrower ones (bfloat16, float16), with one cast at the end.
    Tables for ``positions=None`` and an integer ``offset`` are cached per encoder in eager mode
    (never while tracing under ``jax.jit`` / ``torch.compile``).
    """

    kind = "rotary"
    continuous = True
    __slots__ = ()

    #: Upper bound on cached eager-mode cos/sin tables per encoder.
    _TABLE_CACHE_SIZE: ClassVar[int] = 16
    #: Bytes the cos and sin position tables together may take (per device and dtype).
    _POSITION_TABLE_BYTES: ClassVar[int] = 32 << 20
    #: Declared (in its own body) by a subclass that overrides :meth:`_default_positions` when
    #: the tables of ``positions=None, offset=o`` are still rows ``o..o+seq-1`` of the tables of
    #: ``0..n-1``, so that the position table may serve them (M-RoPE: its text positions are one
    #: position per token). Classes keeping ours need not; see :func:`_table_use`.
    _offset_rows_are_positions: ClassVar[bool] = False

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        # Created once here, so tracing never sees the outer cache dict change.
        self._cache.setdefault("freqs", {})
        self._cache["tables"] = {}

    # -- what a subclass may override ----------------------------------------------------------
    def _head_dim(self) -> int:
        """Length of the feature axis ``x.shape[-1]`` (the ``dim`` option)."""
        return int(self._values["dim"])

    def _rotary_dim(self) -> int:
        """How many leading features are rotated (``rotary_dim`` option, default ``dim``)."""
        rd = self._values.get("rotary_dim")
        return self._head_dim() if rd is None else int(rd)

    def _interleaved(self) -> bool:
        """True if pairs are ``(2i, 2i+1)``, False for ``(i, i + rotary_dim/2)``."""
        return bool(self._values.get("layout", "half") == "interleaved")

    @property
    def attention_factor(self) -> float:
        """Factor on ``cos`` and ``sin`` (1.0 unless a scaling type sets one)."""
        return 1.0

    def _seq_len_dependence(self) -> tuple[str, tuple[int, ...]]:
        """How the angles depend on the sequence length: ``("none", ())``, ``("piecewise",
        breakpoints)`` or ``("continuous", ())`` (see :mod:`.rope_scaling`)."""
        return "none", ()

    def _position_batch_shape(self, positions: Any) -> tuple[int, ...]:
        """The shape positions contribute to the output's leading axes."""
        return tuple(positions.shape)

    def _default_positions(self, seq: int, offset: Any, *, ctx: Ctx) -> Any:
        """Positions for ``positions=None``: ``offset + arange(seq)``."""
        xp = ctx.xp
        if isinstance(offset, int):
            return xp.arange(offset, offset + seq, device=ctx.device)
        ar = xp.arange(seq, dtype=offset.dtype, device=ctx.device)
        return offset + ar

    def text_positions(self, positions: Any) -> Any:
        """Positions for tokens at the scalar ``positions`` (text): the positions themselves;
        multi-axis encoders (M-RoPE) put one copy per axis in front."""
        return positions

    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> tuple[Any, Any]:
        """``(cos θ_i, sin θ_i)`` times the attention factor, each ``(*batch_shape,
        rotary_dim/2)`` in ``ctx.wide``, for the sequence length ``seq_len`` (None: unknown)."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement _half_cos_sin")

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
        """
        ctx, (pos,) = self._context(positions)
        pos = self._positions(pos, ctx)
        out_dtype = resolve_dtype(self.name, ctx.backend, dtype, ctx.device)
        cos, sin = self._table(pos, ctx=ctx, seq_len=self._check_seq_len(seq_len),
                               tracing=ctx.backend.is_tracing(pos), static_len=None)
        xp = ctx.xp
        shape = (*self._position_batch_shape(pos), self._rotary_dim())
        if self._interleaved():  # [c0 c1 ..] -> [c0 c0 c1 c1 ..]
            cos = xp.reshape(xp.stack((cos, cos), axis=-1), shape)
            sin = xp.reshape(xp.stack((sin, sin), axis=-1), shape)
        else:  # [c0 c1 ..] -> [c0 c1 .. c0 c1 ..]
            cos = xp.concat((cos, cos), axis=-1)
            sin = xp.concat((sin, sin), axis=-1)
        return xp.astype(cos, out_dtype), xp.astype(sin, out_dtype)

    def rotate(self, x: Any, positions: Any = None, *, offset: Any = 0,
               params: Mapping[str, Any] | None = None, seq_len: int | None = None) -> Any:
        """``x`` rotated at ``positions``: same shape, dtype, namespace and device as ``x``.

        :param x: ``(..., seq, dim)`` queries or keys (any real floating dtype).
        :param positions: broadcasts against ``x.shape[:-1]`` (shared ``(seq,)``, per batch
            ``(batch, 1, seq)``, ...); integer or real. ``None`` means ``offset + arange(seq)``.
        :param offset: int or integer array added to ``arange(seq)`` when ``positions`` is None
            (the number of cached tokens while decoding).
        :param params: must be None (rotary encoders have no learned parameters).
        :param seq_len: sequence length for ``dynamic``/``longrope`` scaling (see
            :meth:`cos_sin`); with ``positions=None`` and an int ``offset`` it defaults to
            ``offset + seq``, known without looking at data.
        """
        return self._rotate(x, positions, offset=offset, params=params, seq_len=seq_len,
                            native=True)

    # -- machinery -----------------------------------------------------------------------------
    def _rotate(self, x: Any, positions: Any, *, offset: Any, params: Mapping[str, Any] | None,
                seq_len: int | None, native: bool) -> Any:
        """:meth:`rotate`; ``native=False`` forces the generic Array API rotation (the
        reference the conformance suite compares backend fast paths with)."""
        if offset is None or isinstance(offset, bool | str | bytes):
            raise TypeError(f"{self.name}: offset must be an int, a real number or an "
                            f"integer/real array, got {offset!r}")
        offset_arr = None if isinstance(offset, int) else offset
        ctx, (x, pos, offset_arr) = self._context(x, positions, offset_arr)
        self._check_params(params, ctx)
        xp = ctx.xp
        if not xp.isdtype(x.dtype, "real floating"):
            raise TypeError(f"{self.name}: x must have a real floating dtype, got {x.dtype}")
        dim = self._head_dim()
        xshape = tuple(x.shape)
        if len(xshape) == 0 or xshape[-1] != dim:
            raise ValueError(f"{self.name}: x.shape={xshape}, but x.shape[-1] should be dim="
                             f"{dim} (x is (..., seq, dim))")
        seq_len = self._check_seq_len(seq_len)
        tracing = ctx.backend.is_tracing(x) or any(
            a is not None and ctx.backend.is_tracing(a) for a in (pos, offset_arr))
        static_len = None
        # Compute in x's dtype if it is float32 or wider, else in float32; cast once at the end.
        cdt = x.dtype if xp.finfo(x.dtype).bits >= 32 else xp.float32
        key = None
        if pos is None:
            if len(xshape) < 2:
                raise ValueError(f"{self.name}: x.shape={xshape} has no sequence axis; x is "
                                 f"(..., seq, dim), or pass positions")
            if offset_arr is not None:
                self._positions(offset_arr, ctx, what="offset")
                off: Any = offset_arr
            elif isinstance(offset, bool) or not isinstance(offset, int):
                raise TypeError(f"{self.name}: offset must be an int, a real number or an "
                                f"integer/real array, got {offset!r}")
            else:
                off = offset
                static_len = offset + xshape[-2]
                if not tracing:  # decoding: rows of the position table, before any other work
                    rows = self._table_rows(offset, xshape[-2], ctx=ctx, cdt=cdt)
                    if rows is not None:
                        return self._apply_rotation(x, *rows, cdt=cdt, ctx=ctx, native=native)
                    key = (offset, xshape[-2], seq_len, str(ctx.device), cdt)
                    cached = self._cache["tables"].get(key)
                    if cached is not None:
                        return self._apply_rotation(x, *cached, cdt=cdt, ctx=ctx, native=native)
            pos = self._default_positions(xshape[-2], off, ctx=ctx)
        else:
            if offset_arr is not None or offset != 0:
                raise ValueError(f"{self.name}: offset={offset!r} is only used with "
                                 f"positions=None; add it to the positions instead")
            pos = self._positions(pos, ctx)
            if not tracing and _table_use(type(self))[1]:
                gathered = self._gather_rows(pos, xshape, ctx=ctx, cdt=cdt)
                if gathered is not None:
                    return self._apply_rotation(x, *gathered, cdt=cdt, ctx=ctx, native=native)
        batch = self._position_batch_shape(pos)
        target = xshape[:-1]
        if not _broadcasts_into(batch, target):
            raise ValueError(f"{self.name}: positions of shape {batch} do not broadcast against "
                             f"x.shape[:-1]={target}; use (seq,) shared or e.g. (batch, 1, seq)")
        cos, sin = self._table(pos, ctx=ctx, seq_len=seq_len, tracing=tracing,
                               static_len=static_len)
        # One table per position, shared by every head: a compiler must not recompute it for
        # each element of x (XLA would fuse it into the rotation loop).
        cos, sin = ctx.backend.materialize(xp.astype(cos, cdt), xp.astype(sin, cdt))
        if key is not None and ctx.backend.cacheable(cos):
            tables = self._cache["tables"]
            if len(tables) >= self._TABLE_CACHE_SIZE:
                tables.pop(next(iter(tables)))
            tables[key] = (cos, sin)
        return self._apply_rotation(x, cos, sin, cdt=cdt, ctx=ctx, native=native)

    def _position_table(self, end: int, *, ctx: Ctx, cdt: Any) -> tuple[Any, Any] | None:
        """Half-width ``(cos, sin)`` of positions ``0 .. n-1`` (``n >= end``, a power of two),
        computed once per device and dtype and kept while they fit in
        :data:`_POSITION_TABLE_BYTES`; None if they would not, or if the tables depend on the
        sequence length (``dynamic``/``longrope`` scalings). Each row is what computing that
        position alone gives (the angles are elementwise), so rows taken from it equal a fresh
        computation: decoding then costs a slice instead of trigonometry."""
        tables = self._cache.setdefault("positions", {})
        key = (_device_key(ctx.device), cdt)
        have = tables.get(key)
        if have is not None and 0 < end <= have[0].shape[-2]:  # the decode step's path
            return have  # type: ignore[no-any-return]
        if end <= 0 or self._seq_len_dependence()[0] != "none" or not _table_use(type(self))[0]:
            return None
        itemsize = ctx.xp.finfo(cdt).bits // 8
        half = self._rotary_dim() // 2
        n = 1 << max(10, (end - 1).bit_length())
        if 2 * n * half * itemsize > self._POSITION_TABLE_BYTES:
            return None
        if have is not None:
            n = max(n, 2 * have[0].shape[-2])
            if 2 * n * half * itemsize > self._POSITION_TABLE_BYTES:
                n = 1 << (end - 1).bit_length()
        xp = ctx.xp
        with ctx.backend.cache_scope():
            pos = self._default_positions(n, 0, ctx=ctx)
            cos, sin = self._table(pos, ctx=ctx, seq_len=None, tracing=False, static_len=n)
            table = (xp.astype(cos, cdt), xp.astype(sin, cdt))
        if ctx.backend.cacheable(table[0]):  # not inside a trace (JAX stages even constants)
            tables[key] = table
        return table

    def _table_rows(self, offset: int, seq: int, *, ctx: Ctx,
                    cdt: Any) -> tuple[Any, Any] | None:
        """Rows ``offset .. offset+seq-1`` of :meth:`_position_table` (views), or None."""
        if offset < 0:
            return None
        table = self._position_table(offset + seq, ctx=ctx, cdt=cdt)
        if table is None:
            return None
        cos, sin = table
        return cos[..., offset:offset + seq, :], sin[..., offset:offset + seq, :]

    def _gather_rows(self, pos: Any, xshape: tuple[int, ...], *, ctx: Ctx,
                     cdt: Any) -> tuple[Any, Any] | None:
        """Integer ``positions`` in the range of :meth:`_position_table`: its rows at them
        (one gather instead of trigonometry); None otherwise (the caller computes)."""
        xp = ctx.xp
        shape = tuple(pos.shape)
        if (pos.dtype not in (xp.int32, xp.int64) or not _broadcasts_into(shape, xshape[:-1])
                or tuple(self._position_batch_shape(pos)) != shape
                or not ctx.backend.reads_cheaply(pos)):
            return None
        size = 1
        for n in pos.shape:
            size *= int(n)
        if size == 0:
            return None
        if size == 1:  # one decode position: a slice
            one = xp.reshape(pos, ())
            if ctx.backend.is_tracing(one):  # staged by an enclosing trace
                return None
            p = int(one)
            rows = self._table_rows(p, 1, ctx=ctx, cdt=cdt) if p >= 0 else None
            if rows is None or len(shape) == 1:
                return rows
            return xp.reshape(rows[0], (*shape, rows[0].shape[-1])), xp.reshape(
                rows[1], (*shape, rows[1].shape[-1]))
        bounds = ctx.backend.int_bounds(pos)
        if bounds is None:  # staged by an enclosing trace: values unknown
            return None
        lo, hi = bounds
        if lo < 0:
            return None
        table = self._position_table(hi + 1, ctx=ctx, cdt=cdt)
        if table is None:
            return None
        cos, sin = table
        return ctx.backend.take(cos, pos, axis=0), ctx.backend.take(sin, pos, axis=0)

    def _check_seq_len(self, seq_len: Any) -> int | None:
        if seq_len is None:
            return None
        if isinstance(seq_len, bool) or not isinstance(seq_len, int):
            try:
                import operator

                seq_len = operator.index(seq_len)
            except TypeError:
                raise TypeError(f"{self.name}: seq_len must be None or a Python int (the "
                                f"sequence length, static under jit), got {seq_len!r}") from None
        if seq_len < 0:
            raise ValueError(f"{self.name}: seq_len must be >= 0, got {seq_len}")
        return int(seq_len)

    def _table(self, pos: Any, *, ctx: Ctx, seq_len: int | None, tracing: bool,
               static_len: int | None) -> tuple[Any, Any]:
        """Half-width ``(cos, sin)`` with the sequence length resolved (see :meth:`cos_sin`)."""
        dependence, breakpoints = self._seq_len_dependence()
        if dependence == "none":
            return self._half_cos_sin(pos, ctx=ctx, seq_len=None)
        if seq_len is None:
            seq_len = static_len
        if seq_len is None and not tracing:
            size = 1
            for n in pos.shape:
                size *= int(n)
            if size:
                seq_len = math.floor(float(ctx.xp.max(pos))) + 1
        if seq_len is not None or not tracing:
            return self._half_cos_sin(pos, ctx=ctx, seq_len=seq_len)
        if dependence == "piecewise":
            xp = ctx.xp
            s = xp.max(pos) + 1
            cos, sin = self._half_cos_sin(pos, ctx=ctx, seq_len=breakpoints[0] if breakpoints
                                          else None)
            for t in breakpoints:
                c, si = self._half_cos_sin(pos, ctx=ctx, seq_len=t + 1)
                cos = xp.where(s > t, c, cos)
                sin = xp.where(s > t, si, sin)
            return cos, sin
        raise ValueError(
            f"{self.name}: this scaling depends on the sequence length, which cannot be read "
            f"from traced positions (jax.jit / torch.compile); pass seq_len=<int> (Hugging "
            f"Face uses max(positions) + 1), or positions=None with an int offset"
        )

    def _apply_rotation(self, x: Any, cos: Any, sin: Any, *, cdt: Any, ctx: Ctx,
                        native: bool) -> Any:
        """Rotate the pairs of ``x`` by half-width tables ``cos``/``sin`` (of dtype ``cdt``);
        the result has ``x``'s dtype. A backend fast path is used if ``native`` and offered."""
        rd, interleaved = self._rotary_dim(), self._interleaved()
        if native:
            out = ctx.backend.apply_rotary(x, cos, sin, rotary_dim=rd, interleaved=interleaved)
            if out is not None:
                return out
        return apply_rotation(x, cos, sin, rotary_dim=rd, interleaved=interleaved, cdt=cdt,
                              xp=ctx.xp)


def _device_key(device: Any) -> Any:
    """A dict key for a device: itself if hashable (torch, JAX), else its string."""
    try:
        hash(device)
    except TypeError:
        return str(device)
    return device


_TABLE_USE: dict[type, tuple[bool, bool]] = {}


def _table_use(cls: type) -> tuple[bool, bool]:
    """For a rotary encoder class: (offset rows of the position table are the tables of
    ``positions=None``, integer position ids index the position table), decided once per class.
    The first holds if the class keeps our default positions (``offset + arange(seq)``) and
    batch shape, or the class defining its default positions declares
    ``_offset_rows_are_positions``; the second only if the default positions are ours."""
    use = _TABLE_USE.get(cls)
    if use is None:
        owner = next(c for c in cls.__mro__ if "_default_positions" in c.__dict__)
        ours = owner is RotaryEncoder and (
            cls._position_batch_shape is RotaryEncoder._position_batch_shape)  # type: ignore[attr-defined]
        use = (ours or bool(owner.__dict__.get("_offset_rows_are_positions", False)), ours)
        _TABLE_USE[cls] = use
    return use


def _broadcasts_into(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """True if ``shape`` broadcasts to exactly ``target`` (never enlarging it)."""
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(reversed(shape), reversed(target), strict=False))


def apply_rotation(x: Any, cos: Any, sin: Any, *, rotary_dim: int, interleaved: bool, cdt: Any,
                   xp: Any) -> Any:
    """The generic (Array API) rotation, the reference for backend fast paths.

    ``cos``/``sin`` are ``(..., rotary_dim/2)`` per pair and broadcast against
    ``x.shape[:-1]``; the rotation runs in ``cdt`` and the result is cast to ``x.dtype`` once.
    """
    dim = x.shape[-1]
    h = rotary_dim // 2
    xc = x if x.dtype == cdt else xp.astype(x, cdt)
    xr = xc[..., :rotary_dim] if rotary_dim < dim else xc
    if interleaved:
        # x: [x0 x1 x2 x3] -> [x0·c0 - x1·s0, x1·c0 + x0·s0, x2·c1 - x3·s1, x3·c1 + x2·s1]
        pairs = xp.reshape(xr, (*xr.shape[:-1], h, 2))
        a, b = pairs[..., 0], pairs[..., 1]
        out = xp.reshape(xp.stack((a * cos - b * sin, b * cos + a * sin), axis=-1), xr.shape)
    else:
        # x: [x0 x1 | x2 x3] -> [x0·c0 - x2·s0, x1·c1 - x3·s1 | x2·c0 + x0·s0, x3·c1 + x1·s1]
        a, b = xr[..., :h], xr[..., h:]
        out = xp.concat((a * cos - b * sin, b * cos + a * sin), axis=-1)
    if rotary_dim < dim:
        out = xp.concat((out, xc[..., rotary_dim:]), axis=-1)
    return out if out.dtype == x.dtype else xp.astype(out, x.dtype)


class BiasEncoder(Encoder):
    """Additive attention bias from query and key positions: ``(..., num_heads, Q, K)``.

    ``bias(q, k)[..., h, i, j]`` is added to the attention logit of query ``i`` (at position
    ``q[..., i]``) and key ``j`` (at ``k[..., j]``) in head ``h``. A subclass declares a
    ``num_heads`` option and implements :meth:`_bias`; the public method here finds the
    namespace (of positions and params), validates positions and params, broadcasts the leading
    axes of ``(..., Q)`` and ``(..., K)``, and casts once to the requested dtype.
    """

    kind = "bias"
    __slots__ = ()

    @property
    def heads(self) -> int:
        """Number of attention heads of the output (``options["num_heads"]``)."""
        return int(self._values["num_heads"])

    def bias(self, q_positions: Any, k_positions: Any, *,
             params: Mapping[str, Any] | None = None, dtype: Any = None) -> Any:
        """The additive bias ``(*batch, num_heads, Q, K)`` where ``batch`` is the broadcast of
        ``q_positions.shape[:-1]`` and ``k_positions.shape[:-1]``; of ``dtype`` (default: the
        namespace's default float), in the inputs' namespace and on their device."""
        from .pairs import pair_inputs

        ctx, q, k, prepared, _ = pair_inputs(self, q_positions, k_positions, params)
        out_dtype = resolve_dtype(self.name, ctx.backend, dtype, ctx.device)
        out = self._bias(q, k, params=prepared, ctx=ctx, dtype=out_dtype)
        return out if out.dtype == out_dtype else ctx.xp.astype(out, out_dtype)

    def _bias(self, q: Any, k: Any, *, params: Mapping[str, Any], ctx: Ctx, dtype: Any) -> Any:
        """Compute the bias for validated positions ``q`` ``(..., Q)`` and ``k`` ``(..., K)``
        (any float dtype of at least the precision of ``dtype``; the caller casts once)."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement _bias")


class RelativeEmbedding(Encoder):
    """Embeddings of relative positions: ``(..., Q, K, dim)``.

    ``embed(q, k)[..., i, j, :]`` is the vector of the pair (query ``i``, key ``j``), used inside
    attention (Shaw et al. 2018 add it to keys/values; Transformer-XL projects it). A subclass
    declares a ``dim`` option and implements :meth:`_embed`; validation, broadcasting of the
    leading axes and the final cast live here, as for :meth:`BiasEncoder.bias`.
    """

    kind = "relative-embedding"
    __slots__ = ()

    @property
    def out_dim(self) -> int:
        """Length of one pair's vector (``options["dim"]``)."""
        return int(self._values["dim"])

    def embed(self, q_positions: Any, k_positions: Any, *,
              params: Mapping[str, Any] | None = None, dtype: Any = None) -> Any:
        """The embeddings ``(*batch, Q, K, dim)`` where ``batch`` is the broadcast of
        ``q_positions.shape[:-1]`` and ``k_positions.shape[:-1]``; of ``dtype`` (default: the
        namespace's default float), in the inputs' namespace and on their device."""
        from .pairs import pair_inputs

        ctx, q, k, prepared, _ = pair_inputs(self, q_positions, k_positions, params)
        out_dtype = resolve_dtype(self.name, ctx.backend, dtype, ctx.device)
        out = self._embed(q, k, params=prepared, ctx=ctx, dtype=out_dtype)
        return out if out.dtype == out_dtype else ctx.xp.astype(out, out_dtype)

    def _embed(self, q: Any, k: Any, *, params: Mapping[str, Any], ctx: Ctx, dtype: Any) -> Any:
        """Compute the embeddings for validated ``q`` ``(..., Q)`` and ``k`` ``(..., K)``."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement _embed")

