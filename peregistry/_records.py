"""What the registry knows about each plugin and encoder: the public records :class:`PluginInfo`
and :class:`EncoderInfo` (rows of ``list_encoders``), :class:`KernelInfo` (rows of
``peregistry.rope.kernels``), and the table of the built-in families. They name no encoder or
adapter class, so that every layer may import them; the registry's snapshot of the plugins'
hooks, which does, is :mod:`peregistry._snapshot`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["BUILTIN_DISTRIBUTION", "EncoderInfo", "KernelInfo", "PluginInfo"]

#: The distribution whose entry points are the built-in families.
BUILTIN_DISTRIBUTION = "peregistry"
#: The encoder names the ``peregistry_encoders`` hook of each built-in family module gives, so
#: that the registry knows them without importing the module: a family is imported when one of
#: its names is first asked for (tests/test_startup.py holds each module's hook to this table).
BUILTIN_FAMILIES = MappingProxyType({
    "peregistry.encoders.sinusoidal": ("sinusoidal",),
    "peregistry.encoders.rotary": ("rotary",),
    "peregistry.encoders.mrope": ("mrope",),
    "peregistry.encoders.xpos": ("xpos",),
    "peregistry.encoders.dual_chunk": ("dual-chunk",),
    "peregistry.encoders.fope": ("fope",),
    "peregistry.encoders.learned": ("learned", "learned-2d"),
    "peregistry.encoders.relative": ("t5", "alibi", "shaw", "transformer-xl"),
    "peregistry.encoders.kerple": ("kerple",),
    "peregistry.encoders.fire": ("fire",),
})


def normalize_dist(name: str) -> str:
    """PEP 503 normalisation, so ``My_Plugin`` and ``my-plugin`` name one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


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


@dataclass(frozen=True)
class KernelInfo:
    """One row of :func:`peregistry.rope.kernels`: a rotation kernel, the plugin that provided
    it, and whether the core uses it.

    ``status`` is ``"active"`` (tried on every rotation, before the core's own paths), or why
    not: the kernel's own word (``"not built (...)"``, ``"off (...)"``), ``"conflict"`` (two
    plugins gave kernels of one name: neither is used), or ``"error"`` (its ``status()``
    raised; ``error`` says how).
    """

    name: str
    plugin: PluginInfo
    status: str
    priority: int = 0
    ulps: int = 0
    error: str | None = None
    kernel: Any = field(default=None, repr=False, compare=False)

    @property
    def active(self) -> bool:
        """Whether the core tries this kernel."""
        return self.status == "active"


def is_builtin(info: PluginInfo) -> bool:
    """True for the entry points of the ``peregistry`` distribution itself."""
    return info.distribution is not None and \
        normalize_dist(info.distribution) == BUILTIN_DISTRIBUTION


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def failed(info: PluginInfo, why: str) -> PluginInfo:
    """``info`` with status ``"error"``, ``why`` appended to any earlier error."""
    error = why if info.error is None else f"{info.error}; {why}"
    return PluginInfo(info.name, info.distribution, info.version, "error", error)


def conflict_message(what: str, name: str, claimants: list[PluginInfo]) -> str:
    # Built-ins first, then by label: the message does not depend on the order of sys.path.
    ordered = sorted(claimants, key=lambda p: (not is_builtin(p), p.label))
    who = " and ".join(p.label for p in ordered)
    return (f"{what} name {name!r} is claimed by several plugins: {who}. Uninstall or disable one "
            f"(PEREGISTRY_DISABLED_PLUGINS=<distribution>)")
