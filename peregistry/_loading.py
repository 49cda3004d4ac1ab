"""How the registry loads plugins and collects their hooks, each step wrapped so that one broken
plugin is recorded with its error and never stops the others.

:func:`load_entry_points` imports the modules of the ``peregistry`` entry point group, honouring
the environment switches (``PEREGISTRY_DISABLE_PLUGIN_AUTOLOAD``, ``PEREGISTRY_LOAD_PLUGINS``,
``PEREGISTRY_DISABLED_PLUGINS``); :func:`collect` calls every plugin's hooks on its own and
checks what each returns, into a :class:`~peregistry._snapshot.Snapshot`.
"""

from __future__ import annotations

import functools
import os
import types
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pluggy

import peregistry._hooks as _hooks

from ._records import (
    BUILTIN_FAMILIES,
    PluginInfo,
    describe,
    failed,
    is_builtin,
    normalize_dist,
)
from ._snapshot import Snapshot

if TYPE_CHECKING:
    from .kinds.base import Encoder

__all__ = ["ENTRY_POINT_GROUP", "ENV_KERNEL_ULPS", "PluginManager", "allowed_ulps", "collect",
           "encoder_plugin", "load_entry_points", "provides_nothing", "register_plugin"]

ENTRY_POINT_GROUP = "peregistry"
ENV_DISABLE_AUTOLOAD = "PEREGISTRY_DISABLE_PLUGIN_AUTOLOAD"
ENV_LOAD_PLUGINS = "PEREGISTRY_LOAD_PLUGINS"
ENV_DISABLED_PLUGINS = "PEREGISTRY_DISABLED_PLUGINS"
#: The most units in the last place a rotation kernel may differ from the generic rotation and
#: still be used (0 by default: a kernel changes speed, never a result, unless the user says).
ENV_KERNEL_ULPS = "PEREGISTRY_KERNEL_ULPS"
_TRUE = {"1", "true", "yes", "on"}
#: What a plugin's code may raise without taking the registry down: any error, and
#: ``SystemExit`` (a plugin calling ``sys.exit``), but never ``KeyboardInterrupt``.
_ISOLATED = (Exception, SystemExit)


_HOOKABLE = (types.FunctionType, types.MethodType, staticmethod, classmethod)
_ABSENT = object()


class PluginManager(pluggy.PluginManager):
    """pluggy's manager, answering "is this attribute a hook implementation?" quickly for the
    attributes of a module plugin that pluggy would reject anyway.

    ``register`` asks it of every name in ``dir(plugin)`` and pluggy answers through
    ``inspect.getattr_static``, slowly for the whole start of every process. A value
    in a plain module's ``__dict__`` that is not a function, method, staticmethod or classmethod,
    or a function without the ``<project>_impl`` marker, is never an implementation for pluggy
    either; everything else is left to pluggy.
    """

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        if type(plugin) is types.ModuleType:
            value = plugin.__dict__.get(name, _ABSENT)
            if value is not _ABSENT:
                if not isinstance(value, _HOOKABLE):
                    return None
                if (type(value) is types.FunctionType
                        and getattr(value, self.project_name + "_impl", None) is None
                        and getattr(value, "__func__", None) is None):
                    return None
        return super().parse_hookimpl_opts(plugin, name)


def allowed_ulps() -> int:
    """:data:`ENV_KERNEL_ULPS` as an int (0 when unset); anything else is an error naming it."""
    raw = os.environ.get(ENV_KERNEL_ULPS, "0").strip() or "0"
    if not raw.isdigit():
        raise ValueError(f"{ENV_KERNEL_ULPS}={raw!r}: expected a whole number of units in the "
                         f"last place (0: only kernels that give the generic rotation's bits)")
    return int(raw)


def _env_list(name: str) -> set[str] | None:
    raw = os.environ.get(name)
    if raw is None:
        return None
    return {normalize_dist(p) for p in raw.replace(";", ",").split(",") if p.strip()}


def _disabled_reason(norm: str, builtin: bool) -> str | None:
    """Why an environment switch keeps distribution ``norm`` out, or None."""
    if norm in (_env_list(ENV_DISABLED_PLUGINS) or set()):
        return f"disabled by {ENV_DISABLED_PLUGINS}={os.environ[ENV_DISABLED_PLUGINS]!r}"
    if builtin:
        return None
    if os.environ.get(ENV_DISABLE_AUTOLOAD, "").strip().lower() in _TRUE:
        return f"third-party autoload disabled by {ENV_DISABLE_AUTOLOAD}"
    only = _env_list(ENV_LOAD_PLUGINS)
    if only is not None and norm not in only:
        return f"not named in {ENV_LOAD_PLUGINS}"
    return None


def _exit_call(exc: SystemExit) -> str:
    return f"sys.exit({exc.code!r})" if exc.code is not None else "sys.exit()"


def _raised(what: str, exc: BaseException) -> str:
    """``what raised TypeError: ...``, or ``what called sys.exit(3)``."""
    if isinstance(exc, SystemExit):
        return f"{what} called {_exit_call(exc)}"
    return f"{what} raised {describe(exc)}"


def load_entry_points(pm: pluggy.PluginManager, plugins: dict[str, PluginInfo],
                      lazy: dict[str, Any] | None = None) -> None:
    """Import and register every plugin of the entry point group; record each in ``plugins``
    (status ``ok``, ``error`` with the cause, or ``disabled`` with the switch), and each
    distribution whose entry points cannot be read as an ``error`` under its name.

    With ``lazy``, a built-in family (:data:`~peregistry._records.BUILTIN_FAMILIES`) is recorded
    ``ok`` and put in ``lazy`` (plugin name -> entry point) instead of imported: its names are
    known, and the registry imports it when one of them is first asked for. Third-party plugins
    are always imported: what they provide is known only from their hooks, and a name two
    plugins claim must be reported whichever is asked for."""
    from ._entry_points import Unreadable, entry_points

    seen: set[tuple[str, str]] = set()
    unreadable = []
    for ep in entry_points(ENTRY_POINT_GROUP):
        if isinstance(ep, Unreadable):
            unreadable.append(ep)
            continue
        dist, version = ep.dist_name, ep.dist_version
        norm = normalize_dist(dist) if dist else ""
        if (norm, ep.name) in seen:  # one distribution visible twice on sys.path
            continue
        seen.add((norm, ep.name))
        info = PluginInfo(ep.name, dist, version)
        name = ep.name if is_builtin(info) else f"{dist}:{ep.name}"
        reason = _disabled_reason(norm, is_builtin(info))
        if reason is not None:
            plugins[name] = PluginInfo(name, dist, version, "disabled", reason)
            continue
        if lazy is not None and is_builtin(info) and ep.value in BUILTIN_FAMILIES:
            plugins[name] = info
            lazy[name] = ep
            continue
        try:
            plugin = ep.load()
        except _ISOLATED as exc:
            why = (f'plugin "{ep.value}" called {_exit_call(exc)} while importing'
                   if isinstance(exc, SystemExit) else
                   f'error importing plugin "{ep.value}": {describe(exc)}')
            plugins[name] = PluginInfo(name, dist, version, "error", why)
            continue
        register_plugin(pm, plugin, PluginInfo(name, dist, version), plugins)
    # Last, under a name no plugin has: a broken distribution named like a built-in entry
    # point ("rotary") must not replace that plugin's record. The switches apply to it too.
    for u in unreadable:
        name = u.name if u.name not in plugins else f"{u.name} ({u.what})"
        info = PluginInfo(name, u.name, None)
        reason = _disabled_reason(normalize_dist(u.name), is_builtin(info))
        plugins[name] = (PluginInfo(name, u.name, None, "disabled", reason) if reason is not None
                         else failed(info, f"cannot read {u.what}: {describe(u.cause)}"))


def register_plugin(pm: pluggy.PluginManager, plugin: object, info: PluginInfo,
                    plugins: dict[str, PluginInfo]) -> None:
    """Register ``plugin`` under ``info.name``; a refusal is recorded as the plugin's error."""
    try:
        pm.register(plugin, name=info.name)
    except _ISOLATED as exc:
        plugins[info.name] = PluginInfo(info.name, info.distribution, info.version, "error",
                                        f"cannot register plugin: {describe(exc)}")
        return
    plugins[info.name] = info


def _call_each(
    pm: pluggy.PluginManager,
    hook: str,
    plugins: dict[str, PluginInfo],
    accept: Callable[[Any], str | None],
) -> Iterable[tuple[Any, PluginInfo]]:
    """Call ``hook`` of every plugin on its own; yield accepted items with their plugin."""
    caller = getattr(pm.hook, hook)
    for impl in caller.get_hookimpls():  # registration order
        info = plugins[impl.plugin_name]
        if info.status != "ok":
            continue
        try:
            result = impl.function()
        except _ISOLATED as exc:
            plugins[info.name] = failed(info, _raised(f"hook {hook}()", exc))
            continue
        if result is None:
            continue
        if isinstance(result, str | bytes | Mapping) or not isinstance(result, Iterable):
            plugins[info.name] = failed(info, f"hook {hook}() returned {result!r}; expected a list")
            continue
        # Iterating runs plugin code too (a generator hook, a lazy sequence), so it is
        # wrapped like the call, and a hook that raises part-way provides nothing, like one
        # that raises at once: what it yielded before is not known to be all it meant.
        try:
            items = list(result)
        except _ISOLATED as exc:
            plugins[info.name] = failed(info, _raised(f"hook {hook}()", exc))
            continue
        problems = []
        for item in items:
            try:
                why = accept(item)
            except _ISOLATED as exc:
                why = _raised("an item whose check", exc)
            if why is None:
                yield item, info
            else:
                problems.append(why)
        if problems:
            plugins[info.name] = failed(info, f"hook {hook}() returned " + "; ".join(problems))


def collect(pm: pluggy.PluginManager, known: dict[str, PluginInfo],
            lazy: Mapping[str, Any] | None = None,
            load_family: Callable[[str, str], Any] | None = None) -> Snapshot:
    """Every plugin's encoders, backends, rope scalings and rotation kernels, checked; plugins whose hooks fail
    get an ``error`` record in the snapshot (``known`` is not changed). The encoders of the
    built-in families not imported yet (``lazy``: plugin name -> entry point) are entries whose
    class ``load_family(plugin name, encoder name)`` gives when first asked for."""
    from ._snapshot import Entry

    snap = Snapshot()
    plugins = dict(known)
    def check_encoder(obj: Any) -> str | None:
        why = check_encoder_class(obj)
        if why is None and (bad_name := name_problem(obj.name)) is not None:
            why = f"{obj.__qualname__}, whose {bad_name}"
        return why

    for cls, info in _call_each(pm, "peregistry_encoders", plugins, check_encoder):
        snap.encoders.setdefault(cls.name, []).append(Entry(cls, info))
    for plugin_name, ep in (lazy or {}).items():
        info = plugins[plugin_name]
        if info.status == "ok" and load_family is not None:
            for name in BUILTIN_FAMILIES[ep.value]:
                load = functools.partial(load_family, plugin_name, name)
                snap.encoders.setdefault(name, []).append(Entry(None, info, load))
    for backend, info in _call_each(pm, "peregistry_backends", plugins, _check_backend):
        snap.backends.setdefault(backend.name, []).append((backend, info))
    for scaling, info in _call_each(pm, "peregistry_rope_scalings", plugins, _check_scaling):
        snap.scalings.setdefault(scaling.name, []).append((scaling, info))
    for kernel, info in _call_each(pm, "peregistry_rotation_kernels", plugins, _check_kernel):
        snap.kernels.setdefault(kernel.name, []).append((kernel, info))
    # A plugin that failed after some of its items were accepted keeps the good ones: the
    # entries refer to the plugin's final (error) record, so `list` shows what went wrong.
    for entries in snap.encoders.values():
        for e in entries:
            e.plugin = plugins[e.plugin.name]
    snap.plugins = plugins
    return snap


def check_encoder_class(obj: Any) -> str | None:
    """Why ``obj`` is not a registrable encoder class, or None if it is."""
    from .kinds._declaration import KINDS, check_defaults
    from .kinds.base import Encoder

    if not (isinstance(obj, type) and issubclass(obj, Encoder)):
        return f"{obj!r}, not an Encoder subclass"
    if not isinstance(obj.name, str) or not obj.name:
        return f"{obj.__qualname__} without a name"
    if obj.kind not in KINDS:
        return f"{obj.__qualname__} of unknown kind {obj.kind!r} (kinds: {', '.join(KINDS)})"
    try:  # checked at class definition too; again here for defaults changed since
        check_defaults(obj)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name an encoder, or None: a name is a non-empty, printable string
    without whitespace that does not start with ``-``, so that it is one word of a
    ``peregistry list`` row and reachable as a command-line argument."""
    if name.startswith("-"):
        why = "starts with '-' (the command line would read it as a flag)"
    elif not name.isprintable() or any(c.isspace() for c in name):
        why = "has whitespace or unprintable characters"
    else:
        return None
    return f"encoder name {name!r} {why}; a name is one printable word, not starting with '-'"


def _check_backend(obj: Any) -> str | None:
    from .backends._base import Backend

    if not isinstance(obj, Backend) or not obj.name:
        return f"{obj!r}, not a Backend instance with a name"
    return None


def _check_kernel(obj: Any) -> str | None:
    """A rotation kernel (see :mod:`peregistry.rope.kernels`) needs a name and a callable
    ``rotate``; ``status``, if present, must be callable, ``priority`` and ``ulps`` ints."""
    name = getattr(obj, "name", None)
    if isinstance(obj, type):
        return f"{obj!r}, a class: return an instance of it (a rotation kernel is an object)"
    if not isinstance(name, str) or not name or not callable(getattr(obj, "rotate", None)):
        return f"{obj!r}, not a rotation kernel (needs a name and rotate(x, cos, sin, *, layout))"
    if hasattr(obj, "status") and not callable(obj.status):
        return f"rotation kernel {name!r}: status must be callable"
    for attr in ("priority", "ulps"):
        value = getattr(obj, attr, 0)
        if isinstance(value, bool) or not isinstance(value, int) or (attr == "ulps" and value < 0):
            return f"rotation kernel {name!r}: {attr} must be an int{' >= 0' if attr == 'ulps' else ''}, got {value!r}"
    return None


def _check_scaling(obj: Any) -> str | None:
    """A rope scaling (see :class:`peregistry.rope.scalings.RopeScaling`) needs a name and
    ``inv_freq()``; ``validate``, ``attention_factor`` and ``seq_len_breakpoints``, if present,
    must be callable and ``parameters`` a mapping."""
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or not name or not callable(getattr(obj, "inv_freq", None)):
        return f"{obj!r}, not a rope scaling (needs a name and inv_freq())"
    for attr in ("validate", "attention_factor", "seq_len_breakpoints"):
        if hasattr(obj, attr) and not callable(getattr(obj, attr)):
            return f"rope scaling {name!r}: {attr} must be callable"
    if not isinstance(getattr(obj, "parameters", {}), Mapping):
        return f"rope scaling {name!r}: parameters must be a mapping of key -> Option"
    return None


# -- what register() takes ---------------------------------------------------------------------
class _EncoderClassPlugin:
    """The plugin ``register(EncoderClass)`` makes: its hook gives that class."""

    def __init__(self, cls: type[Encoder]) -> None:
        self.cls = cls

    @_hooks.hookimpl
    def peregistry_encoders(self) -> list[type[Encoder]]:
        return [self.cls]

    def __repr__(self) -> str:
        return f"<plugin of encoder class {self.cls.__qualname__}>"


def encoder_plugin(plugin: object) -> object:
    """``plugin``, or for an encoder class the plugin providing it."""
    from .kinds.base import Encoder

    if isinstance(plugin, type) and issubclass(plugin, Encoder):
        return _EncoderClassPlugin(plugin)
    return plugin


def provides_nothing(plugin: object, name: str) -> str:
    """Why ``plugin`` (with no hookimpl) is refused, and what to pass instead."""
    from .kinds.base import Encoder

    hooks = ", ".join(n for n, f in vars(_hooks).items() if hasattr(f, f"{_hooks.PROJECT}_spec"))
    what = f"{plugin!r}"[:200]
    if isinstance(plugin, Encoder):
        cls = type(plugin).__name__
        what = f"{what} is an encoder object ({cls}), not a plugin; pass its class: register({cls})"
    else:
        what = f"{what} has no hook implementation"
    return (f"cannot register plugin {name!r}: {what}. register() takes a module or object with "
            f"functions marked @peregistry.hookimpl named after a hook ({hooks}), or an encoder "
            f"class (a subclass of peregistry.Encoder) to register that encoder")
