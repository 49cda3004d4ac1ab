"""The entry points of one group, read with :mod:`importlib.metadata` one distribution at a time.

``importlib.metadata.entry_points(group=...)`` raises at the first distribution it cannot read (a
file not UTF-8, an ``entry_points.txt`` line without ``=``, a symlink loop), losing every plugin.
:func:`entry_points` lists the same entry points in the same order, but reads each distribution
and searches each ``sys.path`` entry on its own: what it cannot read becomes an
:class:`Unreadable`, unless its ``entry_points.txt`` has no ``[group]`` section (not a plugin).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from importlib.metadata import Distribution

__all__ = ["EntryPoint", "Unreadable", "entry_points"]


class EntryPoint(NamedTuple):
    """What the registry needs of an entry point; ``load()`` imports what ``value`` names."""

    name: str
    value: str
    dist_name: str | None
    dist_version: str | None
    load: Callable[[], Any]


class Unreadable(NamedTuple):
    """A distribution or a ``sys.path`` entry that could not be read: ``what`` says which."""

    name: str
    what: str
    cause: Exception


def entry_points(group: str) -> list[EntryPoint | Unreadable]:
    """The entry points of ``group`` as ``importlib.metadata.entry_points(group=group)`` lists
    them, with an :class:`Unreadable` where a distribution or a path entry could not be read."""
    seen: set[str] = set()
    found: list[EntryPoint | Unreadable] = []
    for dist in _distributions():
        found.extend([dist] if isinstance(dist, Unreadable) else _read(dist, group, seen))
    return found


def _distributions() -> Iterator[Distribution | Unreadable]:
    """``importlib.metadata.distributions()`` in its order (every finder on ``sys.meta_path``
    over every ``sys.path`` entry), a search that raises confined to its path entry."""
    from importlib.metadata import DistributionFinder

    for find in filter(None, [getattr(f, "find_distributions", None) for f in sys.meta_path]):
        for entry in list(sys.path):
            try:
                yield from find(DistributionFinder.Context(path=[entry]))
            except Exception as exc:
                yield Unreadable(str(entry), f"the distributions of sys.path entry {entry!r}", exc)


def _read(dist: Distribution, group: str, seen: set[str]) -> list[EntryPoint | Unreadable]:
    """The entry points of ``group`` of ``dist``, none if a distribution of its normalised name
    came first; an :class:`Unreadable` if they, or its name, cannot be read."""
    file = "METADATA"
    try:
        # importlib.metadata's own key for a distribution (private): its directory's name or Name
        key: str = dist._normalized_name  # type: ignore[attr-defined]
        if key in seen:
            return []
        seen.add(key)
        file = "entry_points.txt"
        eps = dist.entry_points.select(group=group)
        if not eps:
            return []
        file = "METADATA"  # for its Name and Version
        meta = dist.metadata
        return [EntryPoint(ep.name, ep.value, meta["Name"], meta["Version"], ep.load) for ep in eps]
    except Exception as exc:
        path = getattr(dist, "_path", None)  # the metadata directory of a PathDistribution
        if path is None:
            return [Unreadable(repr(dist), f"distribution {dist!r}", exc)]
        try:
            raw = path.joinpath("entry_points.txt").read_bytes()
        except FileNotFoundError:
            raw = b""
        except Exception:  # cannot tell: it may be a plugin of ours
            raw = f"[{group}]".encode()
        if f"[{group}]".encode() not in raw:
            return []
        if file == "entry_points.txt" and isinstance(exc, TypeError | ValueError):  # say where
            bad = [ln for ln in raw.decode(errors="replace").splitlines()
                   if ln.strip() and not ln.strip().startswith(("#", "[")) and "=" not in ln]
            exc = ValueError(f"{bad[0].strip()!r} is not 'name = value'") if bad else exc
        elif file == "METADATA" and path.name.endswith(".egg-info"):
            file = "PKG-INFO"
        # the name importlib.metadata reads in the directory's (``name-1.0.dist-info``)
        name = os.path.splitext(path.name)[0].partition("-")[0] or path.name
        return [Unreadable(name, f"distribution {name!r} ({path.joinpath(file)})", exc)]
