"""The entry points of one group, each distribution read on its own.

:func:`entry_points` lists what ``importlib.metadata.entry_points(group=...)`` lists, in its
order, but a distribution that cannot be read (a file not UTF-8, an ``entry_points.txt`` line
without ``=``, a symlink loop) becomes an :class:`Unreadable` naming it, instead of an exception
that loses every plugin; unless its ``entry_points.txt`` has no ``[group]`` section (not a
plugin of ours). It reads the ``*.dist-info`` and ``*.egg-info`` directories of ``sys.path``
itself, with ``importlib.metadata``'s rules: importing ``importlib.metadata`` (``email``,
``zipfile``, ``pathlib``, ...) costs a third of the start of a process
(``benchmarks/bench_startup.py``). A layout it does not read the same way (a zip or ``.egg`` on
``sys.path``, another distribution finder on ``sys.meta_path``, a metadata header the email
parser might read differently, an entry point value not of the usual form) hands the whole
question to ``importlib.metadata``, one distribution and one path entry at a time
(tests/test_entry_points.py compares the two).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from importlib import import_module
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from importlib.metadata import Distribution

__all__ = ["EntryPoint", "Unreadable", "entry_points"]


class _Unusual(Exception):
    """Something :func:`_scan` does not read exactly like ``importlib.metadata``."""


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
    try:
        return _scan(group)
    except _Unusual:
        return _from_importlib(group)


def _scan(group: str) -> list[EntryPoint | Unreadable]:
    from importlib.machinery import PathFinder

    for finder in sys.meta_path:  # a finder that finds distributions elsewhere: not read here
        if finder is not PathFinder and getattr(finder, "find_distributions", None) is not None:
            raise _Unusual(finder)
    seen: set[str] = set()
    found: list[EntryPoint | Unreadable] = []
    for root in sys.path:
        for key, info in _metadata_dirs(root):
            if key in seen:  # the first distribution of a name wins (importlib's _unique)
                continue
            seen.add(key)
            found.extend(_dist_entry_points(info, group))
    return found


def _from_importlib(group: str) -> list[EntryPoint | Unreadable]:
    seen: set[str] = set()
    found: list[EntryPoint | Unreadable] = []
    for dist in _distributions():
        found.extend([dist] if isinstance(dist, Unreadable) else _read_importlib(dist, group, seen))
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


def _read_importlib(dist: Distribution, group: str, seen: set[str]) -> list[EntryPoint | Unreadable]:
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
            raw: bytes | None = path.joinpath("entry_points.txt").read_bytes()
        except FileNotFoundError:
            raw = None
        except Exception:  # cannot tell: it may be a plugin of ours
            raw = f"[{group}]".encode()
        if raw and file == "entry_points.txt" and isinstance(exc, TypeError | ValueError):
            bad = [ln for ln in raw.decode(errors="replace").splitlines()  # say where
                   if ln.strip() and not ln.strip().startswith(("#", "[")) and "=" not in ln]
            exc = ValueError(f"{bad[0].strip()!r} is not 'name = value'") if bad else exc
        elif file == "METADATA" and path.name.endswith(".egg-info"):
            file = "PKG-INFO"
        return _record(path.name, str(path.joinpath(file)), raw, group, exc)


def _normalize(name: str) -> str:
    """``Prepared.normalize``: PEP 503 (runs of ``-_.`` to one ``-``, lower case), ``-`` as ``_``."""
    out = []
    run = False
    for c in name.lower():
        if c in "-_.":
            if not run:
                out.append("_")
            run = True
        else:
            out.append(c)
            run = False
    return "".join(out)


def _metadata_dirs(root: object) -> list[tuple[str, str]]:
    """``(normalised name, path)`` of the metadata directories in ``root``, ordered as
    ``importlib.metadata.Lookup(root).search(None)`` yields them."""
    if not isinstance(root, str) or os.path.basename(root).lower().endswith(".egg"):
        raise _Unusual(root)
    try:
        children = os.listdir(root or ".")
    except OSError:
        if os.path.exists(root or "."):  # a zip file, or unreadable: importlib's other paths
            raise _Unusual(root) from None
        return []
    groups: dict[str, list[str]] = {}
    for child in children:
        low = child.lower()
        if not low.endswith((".dist-info", ".egg-info")):
            continue
        stem, ext = os.path.splitext(child)
        name = stem.partition("-")[0]
        # importlib names a distribution by its directory's stem when the suffix has exactly
        # this case and the stem a name, else by its METADATA: that case is not read here.
        if ext not in (".dist-info", ".egg-info") or not _normalize(name):
            raise _Unusual(child)
        groups.setdefault(_normalize(name), []).append(os.path.join(root, child))
    return [(norm, path) for norm, paths in groups.items() for path in paths]


def _read(path: str) -> str | None:
    """The file's text, or None where ``PathDistribution.read_text`` gives None."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        return None


def _unreadable(info: str, file: str, group: str, exc: Exception) -> list[EntryPoint | Unreadable]:
    """The record of a distribution (metadata directory ``info``) whose ``file`` could not be
    read, if it may be a plugin of ``group``: its ``entry_points.txt`` has a ``[group]`` section,
    or cannot be read at all; none otherwise."""
    try:
        with open(os.path.join(info, "entry_points.txt"), "rb") as f:
            raw: bytes | None = f.read()
    except FileNotFoundError:
        raw = None
    except OSError:  # cannot tell: it may be a plugin of ours
        raw = f"[{group}]".encode()
    return _record(os.path.basename(info), os.path.join(info, file), raw, group, exc)


def _record(base: str, shown: str, raw: bytes | None, group: str,
            exc: Exception) -> list[EntryPoint | Unreadable]:
    """The :class:`Unreadable` of the distribution whose metadata directory is named ``base``
    (the file that failed at ``shown``) if its ``entry_points.txt`` (``raw``; None: it has
    none) has a ``[group]`` section; none otherwise. Its name is the one importlib.metadata
    reads in the directory's (``name-1.0.dist-info``)."""
    if raw is None or f"[{group}]".encode() not in raw:
        return []
    name = os.path.splitext(base)[0].partition("-")[0] or base
    return [Unreadable(name, f"distribution {name!r} ({shown})", exc)]


def _dist_entry_points(info: str, group: str) -> list[EntryPoint | Unreadable]:
    """The entry points of ``group`` of the distribution at ``info``, or an :class:`Unreadable`
    where its files cannot be read (as ``importlib.metadata`` would raise)."""
    file = "entry_points.txt"
    try:
        text = _read(os.path.join(info, file))
        if not text or group not in text:
            return []
        pairs = []
        section = None
        for line in map(str.strip, text.splitlines()):  # importlib's Sectioned.read
            if not line or line.startswith("#"):
                continue
            if line.startswith("[") and line.endswith("]"):
                section = line.strip("[]")
                continue
            if section is None:
                continue
            name, eq, value = line.partition("=")
            if not eq:  # importlib refuses the whole distribution
                raise ValueError(f"{line!r} is not 'name = value'")
            if section == group:
                pairs.append((name.strip(), value.strip()))
        if not pairs:
            return []
        file = "PKG-INFO" if info.endswith(".egg-info") else "METADATA"
        dist_name, version = _name_version(info)
    except _Unusual:
        raise
    except Exception as exc:  # (UnicodeDecodeError, a symlink loop, ...): this one alone
        return _unreadable(info, file, group, exc)
    return [EntryPoint(name, value, dist_name, version, _loader(value)) for name, value in pairs]


def _name_version(info: str) -> tuple[str, str]:
    """``Name`` and ``Version`` of the distribution's metadata, as the email parser (compat32)
    reads them: the first header of each name, case-insensitive, leading blanks stripped."""
    text = _read(os.path.join(info, "METADATA")) or _read(os.path.join(info, "PKG-INFO"))
    if not text:
        raise _Unusual(info)
    got: dict[str, str] = {}
    for line in text.split("\n"):
        line = line.removesuffix("\r")
        if not line:
            break  # end of the headers
        key, colon, value = line.partition(":")
        # A continuation line, a line that is no header, or characters the parser treats
        # otherwise (a lone CR, non-ASCII or blank header names): leave it to the email parser.
        if (not colon or "\r" in line or not key
                or not all("!" <= c <= "~" for c in key) or line.startswith("From ")):
            raise _Unusual(line)
        got.setdefault(key.lower(), value.lstrip(" \t"))
        if "name" in got and "version" in got:
            return got["name"], got["version"]
    raise _Unusual(info)


def _loader(value: str) -> Callable[[], Any]:
    """``EntryPoint.load`` of ``importlib.metadata`` for values ``module`` and ``module:attr``
    (dotted names of identifiers); other forms (extras, odd spacing) are left to importlib."""
    module, colon, attr = value.partition(":")
    parts = module.split(".") + (attr.split(".") if colon else [])
    if not all(p.isidentifier() for p in parts):
        raise _Unusual(value)

    def load() -> Any:
        obj = import_module(module)
        for name in attr.split(".") if colon else ():
            obj = getattr(obj, name)
        return obj

    return load
