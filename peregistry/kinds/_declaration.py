"""What is checked of an encoder class when it is declared: its declared defaults
(:func:`check_defaults`), and what a plugin that overrides a public method keeps: the base
class's output guarantees.

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
from collections.abc import Callable
from typing import Any

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
