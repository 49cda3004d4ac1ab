"""The base of every encoder: options declared once, with validation, immutability, hashing and
repr for free, and the kind ``absolute`` (``encode``); the pair kinds ``bias`` and
``relative-embedding`` are in :mod:`.pairs`, ``rotary``'s declaration in :mod:`.rotary` and its
methods in the engine (:mod:`peregistry.rope.encoder`). A public method
asks the backend adapter of its inputs for the :class:`Ctx` (namespace, device, wide dtype),
validates positions, params and the dtype asked for, hands the :class:`Ctx` to the subclass's
private hook (``_encode``, ...), which computes in ``ctx.wide`` with Array API calls only, and
casts the result to the requested dtype once. Inputs that mix Python values with arrays, and
every error message, take the slower path of :mod:`.context`.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Hashable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from .._namespaces import JAX_NAMES
from .._options import Option, freeze, thaw
from ._declaration import KINDS, check_defaults, guard_overrides
from ._examples import Examples
from ._params import Params
from ._services import _current as _building
from ._services import current_services, use_services
from .context import Ctx, check_positions, devices_differ, hook_arguments, make_context, params_dtype, resolve_dtype

if TYPE_CHECKING:
    from ._services import Services

__all__ = ["KINDS", "AbsoluteEncoder", "Ctx", "Encoder"]

_NO_DTYPE: Any = object()  # Encoder._run: the hook takes no dtype (``_encode``)
#: dtype -> (integral, real floating): facts of the dtype, asked of every positions array
#: (``isdtype`` costs more than the rest of a small call's checks on NumPy).
_DTYPE_KINDS: dict[tuple[Any, type, Any], tuple[bool, bool]] = {}


def _construct(cls: type[Encoder], options: dict[str, Any]) -> Encoder:
    return cls(**options)


class Encoder(Examples, Params):
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
    ``float64_reference``
        optional ``(self, inputs, params) -> ndarray``: the output in float64 NumPy by code
        independent of the encoder's (the paper's formula), checked by ``check_matches_reference``.

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
    float64_reference: ClassVar[Callable[..., Any] | None] = None
    _option_specs: ClassVar[dict[str, Option]] = {}

    __slots__ = ("_cache", "_hash", "_key", "_services", "_values")
    _values: dict[str, Any]
    _key: tuple[tuple[str, Any], ...]
    _hash: int
    _services: Services
    #: Host constants derived from the options alone (frequencies, lookup tables), made at
    #: construction or on first use: never arrays, never anything of a call's inputs.
    _cache: dict[Hashable, Any]
    #: Params must have a real floating dtype (set by :class:`LearnedParams`).
    _params_real_floating: ClassVar[bool] = False
    _defaults: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        specs: dict[str, Option] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                if isinstance(value, Option):
                    specs.pop(attr, None)
                    specs[attr] = value
        cls._option_specs = specs
        check_defaults(cls)  # a bad default would make every instance invalid: refuse it
        cls._defaults = {k: freeze(s.default) for k, s in specs.items() if not s.required}
        guard_overrides(cls)  # a plugin's public-method override keeps the output guarantees
        if cls.name and not cls.family:
            cls.family = cls.name
        if cls.name and not cls.summary:
            cls.summary = (inspect.getdoc(cls) or "").strip().partition("\n")[0]

    def __init__(self, **options: Any) -> None:
        owner = self.name or type(self).__name__
        values: dict[str, Any] = {}
        defaults, given = self._defaults, 0
        for key, spec in self._option_specs.items():
            if key in options:
                values[key] = spec.convert(owner, options[key])
                given += 1
            elif key in defaults:
                values[key] = defaults[key]
        if given < len(options) or len(values) < len(self._option_specs):
            raise self._bad_options(owner, options)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_cache", {})
        services = _building.get()  # the registry building it, if one is
        if services is None:
            services = current_services()
            object.__setattr__(self, "_services", services)
            with use_services(services):  # lookups while validating (scaling types) ask it
                self._validate()
        else:
            object.__setattr__(self, "_services", services)
            self._validate()
        identity = tuple(values.items())
        object.__setattr__(self, "_key", identity)
        object.__setattr__(self, "_hash", hash((self.name, identity)))

    def _bad_options(self, owner: str, options: Mapping[str, Any]) -> TypeError:
        """The error for unknown or missing options."""
        specs = self._option_specs
        unknown = [k for k in options if k not in specs]
        if unknown:
            return TypeError(f"{owner}: unknown option{'s' if len(unknown) > 1 else ''} "
                             f"{', '.join(repr(k) for k in unknown)}; valid options: "
                             f"{', '.join(specs) or 'none'}")
        missing = [k for k, s in specs.items() if s.required and k not in options]
        described = ", ".join(f"{k!r} ({specs[k].allowed})" for k in missing)
        return TypeError(f"{owner}: missing required option{'s' if len(missing) > 1 else ''} "
                         f"{described}")

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

    # -- shared helpers for the public methods -------------------------------------------------
    def _context(self, *arrays: Any, names: tuple[str, ...] | Callable[[], tuple[str, ...]] | None
                 = None) -> tuple[Ctx, list[Any]]:
        """Namespace, backend, device and wide dtype of the inputs; Python numbers and sequences
        become NumPy arrays. All array inputs must belong to one backend. ``names`` (the
        arguments' names, e.g. ``("positions",)``, or a function giving them) make the errors
        say which input is wrong."""
        services, backend, lead = self._services, None, None
        # each array's adapter: one dict get, the registry's answer by type (not under
        # torch.compile: Dynamo would guard on the dict); else the registry asks its adapters
        compiler = getattr(sys.modules.get("torch"), "compiler", None)
        by_type = (services.backend_by_type if compiler is None or not compiler.is_compiling()
                   else {})
        for a in arrays:  # the usual call: arrays of one backend (and Nones)
            if a is None:
                continue
            b = by_type.get(type(a))
            if b is None:
                b = services.backend_of(a)
            if b is None or (backend is not None and b is not backend):
                backend = None
                break
            if backend is None:
                backend, lead = b, a
        if backend is None:
            return make_context(self.name, arrays, services=services,
                                names=names() if callable(names) else names)
        return backend.context(lead), list(arrays)

    def _positions(self, positions: Any, ctx: Ctx, what: str = "positions") -> Any:
        """Check that positions are numeric (integer, or real for continuous encoders)."""
        dtype = getattr(positions, "dtype", None)
        # (the namespace too: NumPy and JAX share dtype objects, not their answers)
        key = (getattr(ctx.xp, "__name__", None), type(dtype), dtype)
        try:
            kind = _DTYPE_KINDS.get(key)
        except TypeError:  # a dtype that cannot be hashed
            kind = None
        if kind is None:
            try:
                kind = (bool(ctx.xp.isdtype(dtype, "integral")),
                        bool(ctx.xp.isdtype(dtype, "real floating")))
            except Exception:  # None, or no numeric dtype: the error below says which
                kind = (False, False)
            # (not torch's dtypes: a global changed while TorchDynamo traces costs a recompile)
            if len(_DTYPE_KINDS) < 64 and "torch" not in type(dtype).__module__:
                _DTYPE_KINDS[key] = kind
        if kind[0] or (kind[1] and self.continuous):
            return positions
        return check_positions(self.name, positions, ctx, what=what, continuous=self.continuous)

    def _run(self, hook: str, ctx: Ctx, *arrays: Any, params: Any, dtype: Any = _NO_DTYPE) -> Any:
        """``getattr(self, hook)(*arrays, params=params, ctx=ctx[, dtype=dtype])``: the
        computation after validation. The one dispatch to a framework: on eager JAX, a hook
        whose class declares ``_compile_hook_eagerly`` runs as one compiled program per shape,
        with the bits of running it op by op (:mod:`peregistry._jax_eager`)."""
        xp = ctx.xp
        try:
            if getattr(xp, "__name__", None) in JAX_NAMES and (
                    dtype is _NO_DTYPE or dtype in (xp.float32, xp.float64)):
                from .._jax_eager import compiled_hook

                static = {} if dtype is _NO_DTYPE else {"dtype": dtype}
                out = compiled_hook(self, hook, arrays, {"params": dict(params)}, **static)
                if out is not None:
                    return out
            if dtype is _NO_DTYPE:
                return getattr(self, hook)(*arrays, params=params, ctx=ctx)
            return getattr(self, hook)(*arrays, params=params, ctx=ctx, dtype=dtype)
        except Exception as exc:  # a framework's error for arrays on two devices names neither
            err = devices_differ(self.name, ctx.backend, hook_arguments(hook, arrays, params))
            if err is None:
                raise
            raise err from exc

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
        backend = ctx.backend
        if dtype is None:
            if not params:
                return backend.default_float_dtype(ctx.device)
            first = None
            for v in params.values():
                if first is None:
                    first = v.dtype
                elif v.dtype != first:  # several dtypes: promoted
                    return params_dtype(params, ctx)
            return first if backend.is_float_dtype(first) else backend.default_float_dtype(
                ctx.device)
        if not isinstance(dtype, str) and backend.is_float_dtype(dtype):
            return dtype
        return resolve_dtype(self.name, backend, dtype, ctx.device)


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
        encoders, else the namespace's default float).

        >>> import numpy as np
        >>> import peregistry as per
        >>> enc = per.get_encoder("sinusoidal", dim=8)
        >>> out = enc.encode(np.arange(4))
        >>> out.shape, out.dtype
        ((4, 8), dtype('float64'))
        >>> print(np.round(out[2], 4))  # [sin p·ω_0, cos p·ω_0, sin p·ω_1, ...] at p = 2
        [ 0.9093 -0.4161  0.1987  0.9801  0.02    0.9998  0.002   1.    ]
        >>> enc.encode(np.arange(4), dtype=np.float32).dtype
        dtype('float32')
        """
        ctx, (pos,) = self._context(positions, names=("positions",))
        pos = self._positions(pos, ctx)
        params = self._check_params(params, ctx)
        out_dtype = self._output_dtype(dtype, params, ctx)
        out = self._run("_encode", ctx, pos, params=params)
        return self._finish(out, out_dtype, ctx, hook="_encode")

    def _encode(self, positions: Any, *, params: Mapping[str, Any], ctx: Ctx) -> Any:
        """Compute the encoding (any float dtype; the caller casts once)."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement _encode")
