"""The plugin registry: finds encoders, backend adapters and rotary scalings by name.

Everything is loaded lazily, on the first question asked (never at ``import peregistry``), once,
under a lock: concurrent first calls see one load and the same result. Plugins come from

* the ``peregistry`` entry point group of every installed distribution (the built-in families
  too: they are entry points of the ``peregistry`` distribution itself), and
* :func:`register`, for plugins made in-process (tests, notebooks).

Every plugin import and every hook call is wrapped: a plugin that fails to import, raises in a
hook (also part-way through a generator), calls ``sys.exit`` or returns garbage (also an
encoder whose name is not one printable word, or starts with ``-``) is recorded with its error
and shown by :func:`list_encoders`, while all other plugins keep working; only
``KeyboardInterrupt`` goes through. A name claimed by two plugins is an error naming both;
neither wins.

Environment switches (read at load time):

``PEREGISTRY_DISABLE_PLUGIN_AUTOLOAD=1``
    load no third-party entry points; the built-ins (distribution ``peregistry``) still load.
``PEREGISTRY_LOAD_PLUGINS=dist1,dist2``
    load only these third-party distributions (plus the built-ins). An empty value loads none.
``PEREGISTRY_DISABLED_PLUGINS=dist1,dist2``
    never load these distributions; naming ``peregistry`` removes the built-ins, which the error
    for a missing encoder then says.
"""

from __future__ import annotations

import _thread
import operator
import sys
from typing import TYPE_CHECKING, Any

import pluggy

import peregistry._hooks as _hooks

from ._loading import (
    _ISOLATED,
    ENTRY_POINT_GROUP,
    ENV_KERNEL_ULPS,
    PluginManager,
    allowed_ulps,
    check_encoder_class,
    collect,
    encoder_plugin,
    load_entry_points,
    provides_nothing,
    register_plugin,
)
from ._loading import ENV_DISABLE_AUTOLOAD as ENV_DISABLE_AUTOLOAD
from ._loading import ENV_DISABLED_PLUGINS as ENV_DISABLED_PLUGINS
from ._loading import ENV_LOAD_PLUGINS as ENV_LOAD_PLUGINS
from ._records import (
    BUILTIN_DISTRIBUTION,
    EncoderInfo,
    KernelInfo,
    PluginInfo,
    conflict_message,
    describe,
    is_builtin,
)
from ._services import _current as _current_services
from ._services import set_default_services
from ._snapshot import Snapshot
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


class Registry:
    """A registry of plugins. :data:`default_registry` serves the module-level functions; tests
    may build their own, isolated from the environment's plugins with ``entry_points=False``.

    A registry is also the :class:`~peregistry._services.Services` of the encoders it builds:
    they look backends, rope scaling types and other encoders up in it, never in another."""

    def __init__(self, *, entry_points: bool = True) -> None:
        self._use_entry_points = entry_points
        # _thread's RLock is threading.RLock, without importing threading at every start
        self._lock = _thread.RLock()
        self._pm: pluggy.PluginManager | None = None
        self._plugins: dict[str, PluginInfo] = {}
        #: Built-in families not imported yet: plugin name -> entry point (imported, registered
        #: and dropped from here when one of their names is first asked for).
        self._lazy: dict[str, Any] = {}
        self._snapshot: Snapshot | None = None
        #: The adapter of each array type asked so far (what :meth:`backend_of` found): read by
        #: a hot call as one dict get before asking :meth:`backend_of` (``Services``); emptied
        #: by :meth:`clear_memos` and by any change of plugins. Read it, never write it.
        self.backend_by_type: dict[type, Backend] = {}
        # The adapters in lookup order, sorted once per snapshot (by _snap, outside any trace:
        # TorchDynamo cannot sort by attributes it made symbolic under dynamic=True).
        self._backend_order: tuple[Snapshot, tuple[Backend, ...]] | None = None
        #: How many times entry points were loaded and hooks collected (observable for tests).
        self.load_count = 0
        self.collect_count = 0

    # -- loading --------------------------------------------------------------------------------
    def _manager(self) -> pluggy.PluginManager:
        if self._pm is None:
            with self._lock:
                if self._pm is None:
                    pm = PluginManager(_hooks.PROJECT)
                    pm.add_hookspecs(_hooks)
                    if self._use_entry_points:
                        load_entry_points(pm, self._plugins, self._lazy)
                    self.load_count += 1
                    self._pm = pm
        return self._pm

    # -- in-process plugins ---------------------------------------------------------------------
    def register(self, plugin: object, name: str | None = None) -> str:
        """Register ``plugin`` (a module or object with hookimpls) without an entry point; an
        encoder class (a subclass of :class:`~peregistry.Encoder`) is registered as a plugin
        whose ``peregistry_encoders`` hook gives that class.

        Returns the name it is registered under (``name``, else the module's or class's
        ``__name__``, else a generated one). Registering a second plugin under a taken name is a
        ``ValueError``; anything with no hookimpl (an encoder object, a list) is a ``TypeError``
        saying what to pass.
        """
        pm = self._manager()
        if name is None:
            name = getattr(plugin, "__name__", None) or f"{type(plugin).__name__}-{id(plugin):x}"
        given, plugin = plugin, encoder_plugin(plugin)
        with self._lock:
            if name in self._plugins:
                raise ValueError(
                    f"a plugin named {name!r} is already registered "
                    f"({self._plugins[name].label}); pass another name= or unregister it first"
                )
            try:
                pm.register(plugin, name=name)
            except Exception as exc:
                raise PluginError(f"cannot register plugin {name!r}: {describe(exc)}") from exc
            if not pm.get_hookcallers(plugin):  # pluggy registers an object with none silently
                pm.unregister(plugin)
                raise TypeError(provides_nothing(given, name))
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
            self._lazy.pop(name, None)
            self._invalidate()

    def clear_memos(self) -> None:
        """Forget what this registry and its adapters remember of the arrays they saw: the
        adapter of each array type, each adapter's ``Ctx`` and devices (made again on next
        use). ``peregistry.rope.clear_caches()`` calls it on the default registry. The plugins
        and what their hooks gave stay (:meth:`register` and :meth:`unregister` renew those)."""
        with self._lock:
            self.backend_by_type = {}
            snap = self._snapshot
        adapters = [b for entries in snap.backends.values() for b, _ in entries] if snap else []
        builtin = sys.modules.get("peregistry.backends.builtin")
        for b in [*adapters, *(builtin._BUILTIN if builtin is not None else ())]:
            clear = getattr(b, "_clear_memos", None)
            if callable(clear):
                clear()

    def _invalidate(self) -> None:
        self._snapshot = None
        self.backend_by_type = {}
        self._backend_order = None
        if self is default_registry:  # its rotation kernels are the process's (rope._kernels)
            kernels = sys.modules.get("peregistry.rope._kernels")
            if kernels is not None:
                kernels.reset()

    # -- collecting hook results ----------------------------------------------------------------
    def _snap(self) -> Snapshot:
        snap = self._snapshot
        if snap is None:
            with self._lock:
                snap = self._snapshot
                if snap is None:
                    snap = collect(self._manager(), self._plugins, self._lazy, self._load_family)
                    self.collect_count += 1
                    if all(len(e) == 1 for e in snap.backends.values()):  # (else backends()
                        self._backend_order = (snap, self._sorted_backends(snap))  # raises)
                    self._snapshot = snap
        return snap

    def _load_family(self, plugin: str, name: str) -> type[Encoder]:
        """The class of encoder ``name`` of built-in family ``plugin``, importing and registering
        the family's module if it is not yet (the first time one of its names is asked for)."""
        with self._lock:
            ep = self._lazy.get(plugin)
            if ep is not None:
                try:
                    module = ep.load()
                except _ISOLATED as exc:
                    raise PluginError(f'error importing plugin "{ep.value}": '
                                      f"{describe(exc)}") from exc
                register_plugin(self._manager(), module, self._plugins[plugin], self._plugins)
                del self._lazy[plugin]
            pm = self._manager()
        for impl in pm.hook.peregistry_encoders.get_hookimpls():
            if impl.plugin_name == plugin:
                for cls in impl.function():  # type: ignore[attr-defined]
                    if getattr(cls, "name", None) == name and check_encoder_class(cls) is None:
                        return cls  # type: ignore[no-any-return]
        raise PluginError(f"built-in plugin {plugin!r} gives no encoder named {name!r} "
                          f"({self._plugins[plugin].error or 'its module has no such class'})")

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
            raise PluginConflictError(conflict_message("encoder", name, [e.plugin for e in entries]))
        return entries[0].cls

    def get_encoder(self, name: str, /, **options: Any) -> Encoder:
        """The encoder registered as ``name``, built with keyword-only ``options`` (validated
        now). It looks backends, scaling types and other encoders up in this registry
        (:attr:`Encoder.services`).

        An unknown name raises :class:`~peregistry.EncoderNotFoundError` listing close matches
        and known names; a name claimed by two plugins raises
        :class:`~peregistry.PluginConflictError` naming both.

        >>> from peregistry.registry import default_registry
        >>> enc = default_registry.get_encoder("rotary", dim=8)
        >>> enc.name, enc.options["theta"], enc.services is default_registry
        ('rotary', 10000.0, True)
        """
        snap = self._snapshot or self._snap()
        entries = snap.encoders.get(name) if type(name) is str else None
        cls = entries[0].cls if entries and len(entries) == 1 else self.encoder_class(name)
        token = _current_services.set(self)  # (use_services, inline: every call)
        try:
            return cls(**options)
        finally:
            _current_services.reset(token)

    def _not_found_message(self, name: str, snap: Snapshot) -> str:
        import difflib  # only for this error, not at every start

        known = sorted(snap.encoders)
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        msg = f"no encoder named {name!r}."
        off = [p for p in snap.plugins.values() if is_builtin(p) and p.status == "disabled"]
        if off:  # the likeliest cause by far: say it before any guess
            msg += (f" The built-in encoders are switched off ({off[0].error}; remove "
                    f"'{BUILTIN_DISTRIBUTION}' from it to get them back).")
        if close:
            msg += " Did you mean " + " or ".join(repr(c) for c in close) + "?"
        msg += " Known encoders: " + (", ".join(known) if known else "none")
        broken = [p for p in snap.plugins.values() if p.status == "error"]
        if broken:
            msg += ". Plugins that failed to load (their encoders are unavailable): " + "; ".join(
                f"{p.label}: {p.error}" for p in broken
            )
        if self._use_entry_points and not any(is_builtin(p) for p in snap.plugins.values()):
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
                conflict = conflict_message("encoder", name, [e.plugin for e in entries])
            for e in entries:
                try:
                    cls = e.cls  # (imports a built-in family not imported yet)
                except PluginError as exc:
                    rows.append(EncoderInfo(name, None, None, e.plugin, "", "error", str(exc)))
                    continue
                rows.append(EncoderInfo(
                    name=name, kind=cls.kind, family=cls.family, plugin=e.plugin,
                    summary=cls.summary,
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
        order = self._backend_order
        if order is not None and order[0] is snap:
            return list(order[1])  # (the usual answer: no sorting under torch.compile)
        return list(self._sorted_backends(snap))

    @staticmethod
    def _sorted_backends(snap: Snapshot) -> tuple[Backend, ...]:
        out = []
        for name, entries in snap.backends.items():
            if len(entries) > 1:
                raise PluginConflictError(conflict_message("backend", name, [i for _, i in entries]))
            out.append(entries[0][0])
        return tuple(sorted(out, key=operator.attrgetter("priority")))

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
        # Not read under torch.compile either: Dynamo would guard on the dict, and the first
        # eager call after a compiled one (which fills it) would force a recompilation.
        compiler = getattr(sys.modules.get("torch"), "compiler", None)  # (dynamo_tracing, inline)
        if compiler is None or not compiler.is_compiling():
            found = self.backend_by_type.get(t)
            if found is not None:
                return found
        for b in self.backends():
            if b.name in sys.modules and b.owns(x):
                # Not while tracing: torch.compile guards on this dict, and filling it inside a
                # compiled function would force one extra compilation on the next call.
                if not b.is_tracing(x):
                    self.backend_by_type[t] = b
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
        """The RoPE scaling types by name (``scaling={"type": NAME, ...}``), built-in and
        plugins'; a name claimed by two plugins raises :class:`~peregistry.PluginConflictError`."""
        snap = self._snap()
        out = {}
        for name, entries in snap.scalings.items():
            if len(entries) > 1:
                raise PluginConflictError(
                    conflict_message("rope scaling", name, [i for _, i in entries])
                )
            out[name] = entries[0][0]
        return out

    # -- rotation kernels -----------------------------------------------------------------------
    def rotation_kernels(self) -> list[KernelInfo]:
        """Every rotation kernel, in the order the core tries them (``priority``, higher first,
        then registration order), each with its status (see :func:`peregistry.rope.kernels`)."""
        snap = self._snap()
        rows = []
        for name, entries in snap.kernels.items():
            for kernel, info in entries:
                priority, ulps = getattr(kernel, "priority", 0), getattr(kernel, "ulps", 0)
                status, error = "active", None
                if len(entries) > 1:
                    status = "conflict"
                    error = conflict_message("rotation kernel", name, [i for _, i in entries])
                elif callable(getattr(kernel, "status", None)):
                    try:
                        status = str(kernel.status())
                    except Exception as exc:
                        status, error = "error", f"status() raised {describe(exc)}"
                if status == "active" and ulps > allowed_ulps():
                    status = (f"not used: declares ulps={ulps} (its results differ from the "
                              f"generic rotation); {ENV_KERNEL_ULPS}={ulps} allows it")
                rows.append(KernelInfo(name, info, status, priority, ulps, error, kernel))
        return sorted(rows, key=lambda r: -r.priority)


#: The registry behind :func:`peregistry.get_encoder` and friends, and the services of every
#: encoder built outside a registry.
default_registry = Registry()
set_default_services(default_registry)
