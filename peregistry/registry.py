"""The plugin registry: finds encoders, backend adapters and rotary scalings by name.

Everything is loaded lazily, on the first question asked (never at ``import peregistry``), once,
under a lock: concurrent first calls see one load and the same result. Plugins come from

* the ``peregistry`` entry point group of every installed distribution (the built-in families
  too: they are entry points of the ``peregistry`` distribution itself), and
* :func:`register`, for plugins made in-process (tests, notebooks).

Every plugin import and every hook call is wrapped: a plugin that fails to import, raises in a
hook or returns garbage is recorded with its error and shown by :func:`list_encoders`, while all
other plugins keep working. A name claimed by two plugins is an error naming both; neither wins.

Environment switches (read at load time):

``PEREGISTRY_DISABLE_PLUGIN_AUTOLOAD=1``
    load no third-party entry points; the built-ins (distribution ``peregistry``) still load.
``PEREGISTRY_LOAD_PLUGINS=dist1,dist2``
    load only these third-party distributions (plus the built-ins). An empty value loads none.
``PEREGISTRY_DISABLED_PLUGINS=dist1,dist2``
    never load these distributions.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pluggy

from . import _hooks
from .errors import EncoderNotFoundError, PluginConflictError, PluginError

if TYPE_CHECKING:
    from .backends._base import Backend
    from .encoders.base import Encoder

__all__ = [
    "ENTRY_POINT_GROUP",
    "EncoderInfo",
    "PluginInfo",
    "Registry",
    "default_registry",
]

ENTRY_POINT_GROUP = "peregistry"
ENV_DISABLE_AUTOLOAD = "PEREGISTRY_DISABLE_PLUGIN_AUTOLOAD"
ENV_LOAD_PLUGINS = "PEREGISTRY_LOAD_PLUGINS"
ENV_DISABLED_PLUGINS = "PEREGISTRY_DISABLED_PLUGINS"
BUILTIN_DISTRIBUTION = "peregistry"
_TRUE = {"1", "true", "yes", "on"}


def _normalize_dist(name: str) -> str:
    """PEP 503 normalisation, so ``My_Plugin`` and ``my-plugin`` name one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _env_list(name: str) -> set[str] | None:
    raw = os.environ.get(name)
    if raw is None:
        return None
    return {_normalize_dist(p) for p in raw.replace(";", ",").split(",") if p.strip()}


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class PluginInfo:
    """A plugin as the registry sees it.

    ``status`` is ``"ok"``, ``"error"`` (failed to import, a hook raised or returned garbage;
    ``error`` says which and why) or ``"disabled"`` (by an environment switch).
    """

    name: str
    distribution: str | None
    version: str | None
    status: str = "ok"
    error: str | None = None

    @property
    def label(self) -> str:
        """``dist version`` for installed plugins, ``name (in-process)`` otherwise."""
        if self.distribution is None:
            return f"{self.name} (in-process)"
        return f"{self.distribution} {self.version}" if self.version else self.distribution


@dataclass(frozen=True)
class EncoderInfo:
    """One row of :func:`list_encoders`.

    For a plugin that failed before naming its encoders, ``name`` is None and ``status`` is
    ``"error"``; for a name claimed by several plugins ``status`` is ``"conflict"``.
    """

    name: str | None
    kind: str | None
    family: str | None
    plugin: PluginInfo
    summary: str
    status: str = "ok"
    error: str | None = None


@dataclass
class _Entry:
    cls: type[Encoder]
    plugin: PluginInfo


@dataclass
class _Snapshot:
    encoders: dict[str, list[_Entry]] = field(default_factory=dict)
    backends: dict[str, list[tuple[Backend, PluginInfo]]] = field(default_factory=dict)
    scalings: dict[str, list[tuple[Any, PluginInfo]]] = field(default_factory=dict)
    plugins: dict[str, PluginInfo] = field(default_factory=dict)


class Registry:
    """A registry of plugins. :data:`default_registry` serves the module-level functions; tests
    may build their own, isolated from the environment's plugins with ``entry_points=False``."""

    def __init__(self, *, entry_points: bool = True) -> None:
        self._use_entry_points = entry_points
        self._lock = threading.RLock()
        self._pm: pluggy.PluginManager | None = None
        self._plugins: dict[str, PluginInfo] = {}
        self._snapshot: _Snapshot | None = None
        self._backend_by_type: dict[type, Backend] = {}
        #: How many times entry points were loaded and hooks collected (observable for tests).
        self.load_count = 0
        self.collect_count = 0

    # -- loading --------------------------------------------------------------------------------
    def _manager(self) -> pluggy.PluginManager:
        if self._pm is None:
            with self._lock:
                if self._pm is None:
                    pm = pluggy.PluginManager(_hooks.PROJECT)
                    pm.add_hookspecs(_hooks)
                    if self._use_entry_points:
                        self._load_entry_points(pm)
                    self.load_count += 1
                    self._pm = pm
        return self._pm

    def _load_entry_points(self, pm: pluggy.PluginManager) -> None:
        from importlib.metadata import entry_points

        no_autoload = os.environ.get(ENV_DISABLE_AUTOLOAD, "").strip().lower() in _TRUE
        only = _env_list(ENV_LOAD_PLUGINS)
        blocked = _env_list(ENV_DISABLED_PLUGINS) or set()
        seen: set[tuple[str, str]] = set()
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            dist = ep.dist.name if ep.dist is not None else None
            version = ep.dist.version if ep.dist is not None else None
            norm = _normalize_dist(dist) if dist else ""
            if (norm, ep.name) in seen:  # one distribution visible twice on sys.path
                continue
            seen.add((norm, ep.name))
            builtin = norm == BUILTIN_DISTRIBUTION
            reason = None
            if norm in blocked:
                reason = f"disabled by {ENV_DISABLED_PLUGINS}"
            elif not builtin and no_autoload:
                reason = f"third-party autoload disabled by {ENV_DISABLE_AUTOLOAD}"
            elif not builtin and only is not None and norm not in only:
                reason = f"not named in {ENV_LOAD_PLUGINS}"
            name = ep.name if builtin else f"{dist}:{ep.name}"
            if reason is not None:
                self._plugins[name] = PluginInfo(name, dist, version, "disabled", reason)
                continue
            try:
                plugin = ep.load()
            except Exception as exc:
                self._plugins[name] = PluginInfo(
                    name, dist, version, "error",
                    f'error importing plugin "{ep.value}": {_describe(exc)}',
                )
                continue
            self._register(pm, plugin, name, PluginInfo(name, dist, version))

    def _register(
        self, pm: pluggy.PluginManager, plugin: object, name: str, info: PluginInfo
    ) -> None:
        try:
            pm.register(plugin, name=name)
        except Exception as exc:
            self._plugins[name] = PluginInfo(
                name, info.distribution, info.version, "error",
                f"cannot register plugin: {_describe(exc)}",
            )
            return
        self._plugins[name] = info

    # -- in-process plugins ---------------------------------------------------------------------
    def register(self, plugin: object, name: str | None = None) -> str:
        """Register ``plugin`` (a module or object with hookimpls) without an entry point.

        Returns the name it is registered under (``name``, else the module's ``__name__``, else
        a generated one). Registering a second plugin under a taken name is a ``ValueError``.
        """
        pm = self._manager()
        if name is None:
            name = getattr(plugin, "__name__", None) or f"{type(plugin).__name__}-{id(plugin):x}"
        with self._lock:
            if name in self._plugins:
                raise ValueError(
                    f"a plugin named {name!r} is already registered "
                    f"({self._plugins[name].label}); pass another name= or unregister it first"
                )
            try:
                pm.register(plugin, name=name)
            except Exception as exc:
                raise PluginError(f"cannot register plugin {name!r}: {_describe(exc)}") from exc
            self._plugins[name] = PluginInfo(name, None, None)
            self._invalidate()
        return name

    def unregister(self, name: str) -> None:
        """Remove the plugin registered under ``name`` (by :meth:`register` or an entry point)."""
        pm = self._manager()
        with self._lock:
            if name not in self._plugins:
                known = ", ".join(sorted(self._plugins)) or "none"
                raise ValueError(f"no plugin named {name!r} is registered; registered: {known}")
            if pm.has_plugin(name):
                pm.unregister(name=name)
            del self._plugins[name]
            self._invalidate()

    def _invalidate(self) -> None:
        self._snapshot = None
        self._backend_by_type = {}

    # -- collecting hook results ----------------------------------------------------------------
    def _snap(self) -> _Snapshot:
        snap = self._snapshot
        if snap is None:
            with self._lock:
                snap = self._snapshot
                if snap is None:
                    snap = self._collect(self._manager())
                    self.collect_count += 1
                    self._snapshot = snap
        return snap

    def _call_each(
        self,
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
            except Exception as exc:
                plugins[info.name] = _failed(info, f"hook {hook}() raised {_describe(exc)}")
                continue
            if result is None:
                continue
            if isinstance(result, str | bytes | Mapping) or not isinstance(result, Iterable):
                plugins[info.name] = _failed(
                    info, f"hook {hook}() returned {result!r}; expected a list"
                )
                continue
            problems = []
            for item in result:
                why = accept(item)
                if why is None:
                    yield item, info
                else:
                    problems.append(why)
            if problems:
                plugins[info.name] = _failed(info, f"hook {hook}() returned " + "; ".join(problems))

    def _collect(self, pm: pluggy.PluginManager) -> _Snapshot:
        from .encoders.base import check_encoder_class

        snap = _Snapshot()
        plugins = dict(self._plugins)
        for cls, info in self._call_each(pm, "peregistry_encoders", plugins, check_encoder_class):
            snap.encoders.setdefault(cls.name, []).append(_Entry(cls, info))
        for backend, info in self._call_each(pm, "peregistry_backends", plugins, _check_backend):
            snap.backends.setdefault(backend.name, []).append((backend, info))
        for scaling, info in self._call_each(
            pm, "peregistry_rope_scalings", plugins, _check_scaling
        ):
            snap.scalings.setdefault(scaling.name, []).append((scaling, info))
        # A plugin that failed after some of its items were accepted keeps the good ones: the
        # entries refer to the plugin's final (error) record, so `list` shows what went wrong.
        for entries in snap.encoders.values():
            for e in entries:
                e.plugin = plugins[e.plugin.name]
        snap.plugins = plugins
        return snap

    # -- questions ------------------------------------------------------------------------------
    def plugins(self) -> list[PluginInfo]:
        """Every plugin known, with its status."""
        return list(self._snap().plugins.values())

    def encoder_class(self, name: str) -> type[Encoder]:
        """The class registered under ``name``; errors name close matches or the conflict."""
        if not isinstance(name, str):
            raise TypeError(f"encoder name must be a string, got {name!r} of type "
                            f"{type(name).__name__}")
        snap = self._snap()
        entries = snap.encoders.get(name)
        if not entries:
            raise EncoderNotFoundError(self._not_found_message(name, snap))
        if len(entries) > 1:
            raise PluginConflictError(_conflict_message("encoder", name, [e.plugin for e in entries]))
        return entries[0].cls

    def get_encoder(self, name: str, /, **options: Any) -> Encoder:
        """The encoder ``name`` with the given options, validated now."""
        return self.encoder_class(name)(**options)

    def _not_found_message(self, name: str, snap: _Snapshot) -> str:
        known = sorted(snap.encoders)
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        msg = f"no encoder named {name!r}."
        if close:
            msg += " Did you mean " + " or ".join(repr(c) for c in close) + "?"
        msg += " Known encoders: " + (", ".join(known) if known else "none")
        broken = [p for p in snap.plugins.values() if p.status == "error"]
        if broken:
            msg += ". Plugins that failed to load (their encoders are unavailable): " + "; ".join(
                f"{p.label}: {p.error}" for p in broken
            )
        if not any(p.distribution and _normalize_dist(p.distribution) == BUILTIN_DISTRIBUTION
                   for p in snap.plugins.values()) and self._use_entry_points:
            msg += (". The built-in encoders are missing: peregistry's entry points are not "
                    "visible (install it, e.g. `pip install -e .`, rather than importing it "
                    "from a source tree)")
        return msg

    def list_encoders(self) -> list[EncoderInfo]:
        """One record per encoder name, plus one per plugin that failed before naming any."""
        snap = self._snap()
        rows: list[EncoderInfo] = []
        for name in sorted(snap.encoders):
            entries = snap.encoders[name]
            conflict = None
            if len(entries) > 1:
                conflict = _conflict_message("encoder", name, [e.plugin for e in entries])
            for e in entries:
                rows.append(EncoderInfo(
                    name=name, kind=e.cls.kind, family=e.cls.family, plugin=e.plugin,
                    summary=e.cls.summary,
                    status="conflict" if conflict else ("ok" if e.plugin.status == "ok"
                                                        else "error"),
                    error=conflict or e.plugin.error,
                ))
        named = {e.plugin.name for es in snap.encoders.values() for e in es}
        for p in snap.plugins.values():
            if p.status != "ok" and p.name not in named:
                rows.append(EncoderInfo(None, None, None, p, "", p.status, p.error))
        return rows

    # -- backends -------------------------------------------------------------------------------
    def backends(self) -> list[Backend]:
        """Every registered backend adapter, in lookup order."""
        snap = self._snap()
        out = []
        for name, entries in snap.backends.items():
            if len(entries) > 1:
                raise PluginConflictError(_conflict_message("backend", name, [i for _, i in entries]))
            out.append(entries[0][0])
        return sorted(out, key=lambda b: b.priority)

    def backend(self, name: str) -> Backend:
        """The adapter with id ``name`` (``"numpy"``, ``"torch"``, ``"jax"``, ``"array_api_strict"``)."""
        for b in self.backends():
            if b.name == name:
                return b
        known = ", ".join(b.name for b in self.backends())
        raise ValueError(f"no backend adapter named {name!r}; known: {known}")

    def backend_of(self, x: Any) -> Backend | None:
        """The adapter owning array ``x``, or None. Cached by type; frameworks that are not
        imported yet are never asked (an array of theirs cannot exist)."""
        t = type(x)
        found = self._backend_by_type.get(t)
        if found is not None:
            return found
        for b in self.backends():
            if b.name in sys.modules and b.owns(x):
                # Not while tracing: torch.compile guards on this dict, and filling it inside a
                # compiled function would force one extra compilation on the next call.
                if not b.is_tracing(x):
                    self._backend_by_type[t] = b
                return b
        return None

    def backend_of_namespace(self, xp: Any) -> Backend:
        """The adapter for a namespace or framework module the user passed as ``xp``."""
        if isinstance(xp, str):
            return self.backend(xp)
        # Only ask adapters whose framework the module's name mentions: asking imports it.
        parts = getattr(xp, "__name__", "").split(".")
        for b in self.backends():
            if b.name in parts and b.owns_namespace(xp):
                return b
        known = ", ".join(b.name for b in self.backends())
        raise TypeError(f"xp={xp!r} is not the namespace of a known backend ({known})")

    # -- rotary scalings ------------------------------------------------------------------------
    def scalings(self) -> dict[str, Any]:
        snap = self._snap()
        out = {}
        for name, entries in snap.scalings.items():
            if len(entries) > 1:
                raise PluginConflictError(
                    _conflict_message("rope scaling", name, [i for _, i in entries])
                )
            out[name] = entries[0][0]
        return out


def _failed(info: PluginInfo, why: str) -> PluginInfo:
    error = why if info.error is None else f"{info.error}; {why}"
    return PluginInfo(info.name, info.distribution, info.version, "error", error)


def _conflict_message(what: str, name: str, claimants: list[PluginInfo]) -> str:
    who = " and ".join(p.label for p in claimants)
    return (f"{what} name {name!r} is claimed by several plugins: {who}. Uninstall or disable one "
            f"(PEREGISTRY_DISABLED_PLUGINS=<distribution>)")


def _check_backend(obj: Any) -> str | None:
    from .backends._base import Backend

    if not isinstance(obj, Backend) or not obj.name:
        return f"{obj!r}, not a Backend instance with a name"
    return None


def _check_scaling(obj: Any) -> str | None:
    """A rope scaling (see :class:`peregistry.encoders.rope_scaling.RopeScaling`) needs a name and
    ``inv_freq()``; ``validate``, ``attention_factor`` and ``seq_len_breakpoints``, if present,
    must be callable and ``parameters`` a mapping."""
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or not name or not callable(getattr(obj, "inv_freq", None)):
        return f"{obj!r}, not a rope scaling (needs a name and inv_freq())"
    for attr in ("validate", "attention_factor", "seq_len_breakpoints"):
        if hasattr(obj, attr) and not callable(getattr(obj, attr)):
            return f"rope scaling {name!r}: {attr} must be callable"
    if not isinstance(getattr(obj, "parameters", {}), Mapping):
        return f"rope scaling {name!r}: parameters must be a mapping of key -> Param"
    return None


#: The registry behind :func:`peregistry.get_encoder` and friends.
default_registry = Registry()
