"""Names bound on first use: what a module needs only when it is called, not when imported.

Every plugin module is imported at the first registry question, so building a rotary encoder
imports the rotary engine; the part of it that only a *call* needs (the framework dispatch, the
torch fast paths, the C kernel's loader, the application of tables: ~1.5 ms of every start) waits
for the first call. A stand-in sits in the importing module's namespace under the name; on first
use it imports the real object (through a loader with a plain ``import`` statement) and puts it
in the namespace, so later uses cost nothing extra and the module's code reads as before
(``_delegation.cacheable(...)``, ``rotate_features(...)``).

Under ``torch.compile`` the namespace is left alone (TorchDynamo replays a write to module
globals made while tracing badly); the stand-in then simply forwards, which Dynamo traces like
any Python code (the loader's ``import`` statement included), and the first eager use binds the
name. :func:`bind` binds names ahead of time: ``RotaryEncoder`` does so when it is built in a
process that has imported torch, so that compiled code never meets a stand-in there.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

__all__ = ["FirstUse", "bind", "bind_for_torch", "delegation", "first_call"]

#: The namespaces holding stand-ins (module globals), for :func:`bind_for_torch`.
_namespaces: list[dict[str, Any]] = []
_all_bound = False


def _register(namespace: dict[str, Any]) -> None:
    if not any(ns is namespace for ns in _namespaces):
        _namespaces.append(namespace)


def _dynamo_tracing() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.compiler.is_compiling())


class FirstUse:
    """A stand-in for the module ``load()`` returns, at ``namespace[key]``."""

    __slots__ = ("_key", "_load", "_namespace")

    def __init__(self, load: Callable[[], Any], namespace: dict[str, Any], key: str) -> None:
        self._load, self._namespace, self._key = load, namespace, key
        _register(namespace)

    def __getattr__(self, attr: str) -> Any:
        value = self._load()
        if not _dynamo_tracing():
            self._namespace[self._key] = value
        return getattr(value, attr)

    def __repr__(self) -> str:
        return f"<{self._key}: imported on first use>"


def _import_delegation() -> Any:
    from .rope import _delegation  # a plain import statement: TorchDynamo traces it

    return _delegation


def delegation(namespace: dict[str, Any]) -> Any:
    """A stand-in for ``peregistry.rope._delegation`` (the framework dispatch, which imports the
    torch and JAX paths) at ``namespace["_delegation"]``: what every engine module uses."""
    return FirstUse(_import_delegation, namespace, "_delegation")


def first_call(load: Callable[[], Callable[..., Any]], namespace: dict[str, Any],
               key: str) -> Callable[..., Any]:
    """A stand-in for the callable ``load()`` returns, at ``namespace[key]``."""

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        real = load()
        if not _dynamo_tracing():
            namespace[key] = real
        return real(*args, **kwargs)

    stand_in.__name__ = stand_in.__qualname__ = key
    stand_in.__doc__ = f"``{key}``, imported on the first call."
    stand_in._first_call_load = load  # type: ignore[attr-defined]  # for bind()
    _register(namespace)
    return stand_in


def bind(namespace: dict[str, Any]) -> bool:
    """Replace every stand-in of ``namespace`` by its real object now; False (and nothing done)
    while TorchDynamo traces."""
    if _dynamo_tracing():
        return False
    for key, value in list(namespace.items()):
        if isinstance(value, FirstUse):
            namespace[key] = value._load()
        elif isinstance(value, types.FunctionType) and hasattr(value, "_first_call_load"):
            namespace[key] = value._first_call_load()
    return True


def bind_for_torch() -> None:
    """Bind every module's stand-ins once torch is imported (encoders call this when built), so
    that code ``torch.compile`` traces never meets one: a stand-in traced through is bound by
    the next eager call, and the changed global then costs a recompile."""
    global _all_bound
    if _all_bound or "torch" not in sys.modules or _dynamo_tracing():
        return
    for namespace in list(_namespaces):
        bind(namespace)
    from .backends import _torch

    _torch.bind_probe()
    _all_bound = True
