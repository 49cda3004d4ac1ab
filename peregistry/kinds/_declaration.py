"""The declaration of an encoder: the options a class declares, collected and checked when the
class is made (:meth:`Declared.__init_subclass__`, :func:`check_defaults`), converted and
validated when an instance is made, stored immutably, and the identity they give (equality,
hash, repr, pickling, ``replace``): :class:`Declared`, the base of
:class:`~peregistry.Encoder`. Making an instance runs no family code but the family's own
``_validate`` and, for learned encoders, ``param_shapes`` (kept: every call checks params by it).

A plugin implements the private hooks (``_encode``, ``_bias``, ``_embed``, rotary's tables);
validation, the final cast and the namespace check live in the public methods. A plugin may still
override a public method (to add behaviour around ``super()``); the override is then wrapped so
that what it returns is checked as the base class's own result would be: an array of the input's
framework, of the dtype asked for (rotary: ``x``'s). A violation is an :class:`OverrideError`
(a ``TypeError``) naming the class and the method, never a silently wrong result; the
conformance suite reports it as a failure of the check that made the call.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

from .._options import Option, freeze, thaw
from ._params import Params
from ._services import _current as _building
from ._services import current_services, use_services

if TYPE_CHECKING:
    from ._services import Services

__all__ = ["KINDS", "Declared", "OverrideError", "check_defaults", "guard_overrides"]

#: The kinds of encoders, each with its public methods (:mod:`.base`, the engine's rotary).
KINDS = ("absolute", "rotary", "bias", "relative-embedding")


def _class_label(cls: type) -> str:
    """How an encoder class is named in errors about its declaration: registry name and the
    class's module (which names the plugin)."""
    where = f"class {cls.__module__}.{cls.__qualname__}"
    name = getattr(cls, "name", "")
    return f"encoder {name!r} ({where})" if name else where


def check_defaults(cls: Any) -> None:
    """Every declared default must be a value its option accepts (see
    :meth:`Option.check_default`)."""
    for spec in cls._option_specs.values():
        spec.check_default(_class_label(cls))


class OverrideError(TypeError):
    """A plugin's override of a public method returned what the base class never would."""


#: Public methods whose output guarantees an override keeps, by the argument holding the input.
PUBLIC = {"encode": "positions", "bias": "q_positions", "embed": "q_positions", "rotate": "x",
          "cos_sin": "positions"}


def guard_overrides(cls: type) -> None:
    """Wrap the public methods ``cls`` itself defines, if it is not one of peregistry's own."""
    if cls.__module__.split(".")[0] == "peregistry":
        return
    for name, arg in PUBLIC.items():
        method = cls.__dict__.get(name)
        if callable(method) and not getattr(method, "__peregistry_guarded__", False):
            setattr(cls, name, _guarded(method, name, arg))


def _guarded(method: Callable[..., Any], name: str, arg: str) -> Callable[..., Any]:
    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = method(self, *args, **kwargs)
        first = args[0] if args else kwargs.get(arg)
        _check(self, name, first, kwargs.get("dtype"), out)
        return out

    guarded.__peregistry_guarded__ = True  # type: ignore[attr-defined]
    return guarded


def _check(enc: Any, name: str, first: Any, dtype: Any, out: Any) -> None:
    services = enc.services
    backend = services.backend_of(first)
    if backend is None:  # Python numbers or lists: the framework comes from params
        return
    for o in out if isinstance(out, tuple) else (out,):
        owner = services.backend_of(o)
        where = f"{enc.name}: {type(enc).__qualname__}.{name} (an override of the base class's)"
        if owner is not backend:
            got = owner.name if owner is not None else f"{type(o).__module__}.{type(o).__name__}"
            raise OverrideError(f"{where} returned a {got} array for {backend.name} input, but must "
                            f"return an array of the input's framework ({backend.name})")
        want = first.dtype if name == "rotate" else None
        if want is None and dtype is not None and name != "cos_sin":
            from .context import resolve_dtype

            want = resolve_dtype(enc.name, backend, dtype, backend.device(first))
        if want is not None and o.dtype != want:
            raise OverrideError(f"{where} returned dtype {backend.dtype_name(o.dtype)}, but should "
                            f"return {backend.dtype_name(want)} (the dtype asked for)")

#: ``param_shapes`` of an encoder without learned params (nothing to keep).
_NO_PARAMS: Any = Params.param_shapes


def _construct(cls: type[Declared], options: dict[str, Any]) -> Declared:
    """An encoder of class ``cls`` with ``options`` (what unpickling calls)."""
    return cls(**options)


class Declared:
    """The declaration half of :class:`~peregistry.Encoder`: options collected from the class
    (:meth:`__init_subclass__`), converted and validated when an instance is made, stored
    immutably, and the identity built from them (equality, hash, repr, pickling, ``replace``).
    The kinds' public methods live on :class:`~peregistry.Encoder` (:mod:`.base`)."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    family: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    _option_specs: ClassVar[dict[str, Option]] = {}
    _defaults: ClassVar[dict[str, Any]] = {}

    __slots__ = ("_cache", "_hash", "_key", "_services", "_values")
    _values: dict[str, Any]
    _key: tuple[tuple[str, Any], ...]
    _hash: int
    _services: Services
    #: Host constants derived from the options alone (frequencies, lookup tables, the learned
    #: params' shapes), made at construction or on first use: never arrays, never anything of a
    #: call's inputs.
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
        shapes = getattr(type(self), "param_shapes", _NO_PARAMS)
        if shapes is not _NO_PARAMS:  # a fact of the options: each call checks params by it
            self._cache["param_shapes"] = shapes(self)
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

    def replace(self, **changes: Any) -> Self:
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
        if not isinstance(other, Declared):
            return NotImplemented
        return self.name == other.name and self._key == other._key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return f"get_encoder({self.name!r}{opts})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_construct, (type(self), self.options))

    def __copy__(self) -> Self:
        return self.replace()  # a new equal encoder, served by the same registry

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self.replace()
