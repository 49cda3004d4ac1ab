"""Encoder base classes: options declared once, with validation, immutability, hashing and repr
for free, and the public methods of the kinds ``absolute`` (``encode``), ``bias`` (``bias``) and
``relative-embedding`` (``embed``); ``rotary`` lives in :mod:`peregistry.rope`. A public method
finds the caller's namespace and device once (:mod:`.context`), validates positions and dtypes,
hands a :class:`Ctx` to the subclass's private hook (``_encode``, ...), which computes in
``ctx.wide`` with Array API calls only, and casts the result to the requested dtype once.
"""

from __future__ import annotations

import inspect
from collections.abc import Hashable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from .._options import Option, freeze, thaw
from .._services import current_services, use_services
from ._overrides import guard_overrides
from .context import Ctx, check_positions, make_context, params_dtype, resolve_dtype, run_hook

if TYPE_CHECKING:
    from .._services import Services

__all__ = [
    "KINDS",
    "AbsoluteEncoder",
    "BiasEncoder",
    "Ctx",
    "Encoder",
    "RelativeEmbedding",
    # from .context, for older imports
    "check_positions",
    "make_context",
    "resolve_dtype",
]

KINDS = ("absolute", "rotary", "bias", "relative-embedding")


def _class_label(cls: type) -> str:
    """How an encoder class is named in errors about its declaration: registry name and the
    class's module (which names the plugin)."""
    where = f"class {cls.__module__}.{cls.__qualname__}"
    name = getattr(cls, "name", "")
    return f"encoder {name!r} ({where})" if name else where


def _check_defaults(cls: type[Encoder]) -> None:
    """Every declared default must be a value its option accepts (see
    :meth:`Option.check_default`)."""
    for spec in cls._option_specs.values():
        spec.check_default(_class_label(cls))


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
        the laws it obeys beyond its kind's (e.g. ``"alibi-slopes"``).
    ``exempt_checks``
        ``{check name: reason}``: laws of its kind it legitimately breaks (docs/conformance.md).
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
    exempt_checks: ClassVar[Mapping[str, str]] = MappingProxyType({})
    continuous: ClassVar[bool] = False
    _option_specs: ClassVar[dict[str, Option]] = {}

    __slots__ = ("_cache", "_hash", "_key", "_services", "_values")
    _values: dict[str, Any]
    _key: tuple[tuple[str, Any], ...]
    _hash: int
    _services: Services
    #: Derived host constants (frequencies, ...): filled lazily, never part of identity.
    _cache: dict[Hashable, Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        specs: dict[str, Option] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                if isinstance(value, Option):
                    specs.pop(attr, None)
                    specs[attr] = value
        cls._option_specs = specs
        _check_defaults(cls)  # a bad default would make every instance invalid: refuse it
        guard_overrides(cls)  # a plugin's public-method override keeps the output guarantees
        if cls.name and not cls.family:
            cls.family = cls.name
        if cls.name and not cls.summary:
            cls.summary = (inspect.getdoc(cls) or "").strip().partition("\n")[0]

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
    def _context(self, *arrays: Any,
                 names: tuple[str, ...] | None = None) -> tuple[Ctx, list[Any]]:
        """Namespace, backend, device and wide dtype of the inputs; Python numbers and sequences
        become NumPy arrays. All array inputs must belong to one backend. ``names`` (the
        arguments' names, e.g. ``("positions",)``) make the errors say which input is wrong."""
        return make_context(self.name, arrays, services=self._services, names=names)

    def _positions(self, positions: Any, ctx: Ctx, what: str = "positions") -> Any:
        """Check that positions are numeric (integer, or real for continuous encoders)."""
        return check_positions(self.name, positions, ctx, what=what, continuous=self.continuous)

    def _finish(self, out: Any, dtype: Any, ctx: Ctx, *, hook: str) -> Any:
        """The result of private hook ``hook`` cast once to ``dtype``, after checking that it is
        an array of the inputs' backend (a plugin computing with another framework would
        otherwise compare dtypes across namespaces, or hand the caller foreign arrays)."""
        backend = self._services.backend_of(out)
        if backend is not ctx.backend:
            got = (f"{backend.name} array" if backend is not None
                   else f"{type(out).__module__}.{type(out).__qualname__}")
            raise TypeError(
                f"{self.name}: {type(self).__name__}.{hook} returned a {got} for "
                f"{ctx.backend.name} inputs, but must return an array of the inputs' namespace "
                f"({ctx.backend.name}): compute with ctx.xp, never with a fixed framework"
            )
        return out if out.dtype == dtype else ctx.xp.astype(out, dtype)

    def _output_dtype(self, dtype: Any, params: Mapping[str, Any], ctx: Ctx) -> Any:
        """The dtype of the result: ``dtype`` if given; else the params' dtype for an encoder
        with learned params (as ``torch.nn.functional.embedding`` returns its weight's dtype:
        float64 params give float64, bfloat16 params bfloat16), else the namespace's default
        real floating dtype. ``params`` are the validated ones (empty without learned params)."""
        if dtype is None and params:
            return params_dtype(params, ctx)
        return resolve_dtype(self.name, ctx.backend, dtype, ctx.device)


def check_encoder_class(obj: Any) -> str | None:
    """Why ``obj`` is not a registrable encoder class, or None if it is."""
    if not (isinstance(obj, type) and issubclass(obj, Encoder)):
        return f"{obj!r}, not an Encoder subclass"
    if not isinstance(obj.name, str) or not obj.name:
        return f"{obj.__qualname__} without a name"
    if obj.kind not in KINDS:
        return f"{obj.__qualname__} of unknown kind {obj.kind!r} (kinds: {', '.join(KINDS)})"
    try:  # checked at class definition too; again here for defaults changed since
        _check_defaults(obj)
    except (TypeError, ValueError) as exc:
        return str(exc)
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
        namespace and on their device, of ``dtype`` (default: the params' dtype for learned
        encoders, else the namespace's default float)."""
        ctx, (pos,) = self._context(positions, names=("positions",))
        pos = self._positions(pos, ctx)
        params = self._check_params(params, ctx)
        out_dtype = self._output_dtype(dtype, params, ctx)
        out = run_hook(self, "_encode", ctx, pos, params=params)
        return self._finish(out, out_dtype, ctx, hook="_encode")

    def _encode(self, positions: Any, *, params: Mapping[str, Any], ctx: Ctx) -> Any:
        """Compute the encoding (any float dtype; the caller casts once)."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement _encode")


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
        params' dtype for learned encoders, else the namespace's default float), in the inputs'
        namespace and on their device."""
        from .pairs import pair_inputs

        ctx, q, k, prepared, _ = pair_inputs(self, q_positions, k_positions, params)
        out_dtype = self._output_dtype(dtype, prepared, ctx)
        out = run_hook(self, "_bias", ctx, q, k, params=prepared, dtype=out_dtype)
        return self._finish(out, out_dtype, ctx, hook="_bias")

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
        params' dtype for learned encoders, else the namespace's default float), in the inputs'
        namespace and on their device."""
        from .pairs import pair_inputs

        ctx, q, k, prepared, _ = pair_inputs(self, q_positions, k_positions, params)
        out_dtype = self._output_dtype(dtype, prepared, ctx)
        out = run_hook(self, "_embed", ctx, q, k, params=prepared, dtype=out_dtype)
        return self._finish(out, out_dtype, ctx, hook="_embed")

    def _embed(self, q: Any, k: Any, *, params: Mapping[str, Any], ctx: Ctx, dtype: Any) -> Any:
        """Compute the embeddings for validated ``q`` ``(..., Q)`` and ``k`` ``(..., K)``."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement _embed")


def __getattr__(name: str) -> Any:
    """``RotaryEncoder`` and ``apply_rotation`` live in :mod:`peregistry.rope` (the engine that
    builds on this module); found here too, imported on first use, for older imports."""
    if name in ("RotaryEncoder", "apply_rotation"):
        import importlib

        return getattr(importlib.import_module("peregistry.rope"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
