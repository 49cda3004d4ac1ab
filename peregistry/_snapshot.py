"""The registry's private snapshot of one collection of every plugin's hooks, from which it
answers until a plugin is added or removed: :class:`Snapshot`, whose encoders are
:class:`Entry` rows (a class, or a built-in family loaded when first asked for)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._records import PluginInfo
    from .backends._base import Backend
    from .kinds.base import Encoder

__all__ = ["Entry", "Snapshot"]


class Entry:
    """An encoder class and the plugin that provided it; for a built-in family not imported yet,
    ``load`` gives the class when it is first asked for (it raises
    :class:`~peregistry.PluginError` if the family cannot be imported)."""

    # Plain classes, not dataclasses: creating a dataclass costs at every start.
    __slots__ = ("_cls", "_load", "plugin")

    def __init__(self, cls: type[Encoder] | None, plugin: PluginInfo,
                 load: Callable[[], type[Encoder]] | None = None) -> None:
        self._cls = cls
        self._load = load
        self.plugin = plugin

    @property
    def cls(self) -> type[Encoder]:
        cls = self._cls
        if cls is None:
            assert self._load is not None
            cls = self._cls = self._load()
        return cls

    def __repr__(self) -> str:
        shown = self._cls if self._cls is not None else "(not imported yet)"
        return f"Entry(cls={shown!r}, plugin={self.plugin!r})"


class Snapshot:
    """Every plugin's hook results, collected once; entries of one name from several plugins
    are kept side by side, so that the conflict can be reported."""

    __slots__ = ("backends", "encoders", "kernels", "plugins", "scalings")

    def __init__(self) -> None:
        self.encoders: dict[str, list[Entry]] = {}
        self.backends: dict[str, list[tuple[Backend, PluginInfo]]] = {}
        self.scalings: dict[str, list[tuple[Any, PluginInfo]]] = {}
        self.kernels: dict[str, list[tuple[Any, PluginInfo]]] = {}
        self.plugins: dict[str, PluginInfo] = {}
