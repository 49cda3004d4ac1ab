"""The entry points of one group, found without importing :mod:`importlib.metadata`.

``importlib.metadata`` costs ~20 ms to import (``email``, ``zipfile``, ``pathlib``, ``csv``...),
more than all of peregistry's own modules: the first registry question paid it on every start.
:func:`entry_points` reads the same files with the same rules — every ``*.dist-info`` and
``*.egg-info`` directory of every ``sys.path`` entry, in ``sys.path`` order and, within a
directory, grouped by normalised name as ``importlib.metadata``'s ``Lookup`` groups them; the
first distribution of a normalised name wins; ``entry_points.txt`` parsed as its ``Sectioned``
parser does; the distribution's ``Name`` and ``Version`` from ``METADATA`` (or ``PKG-INFO``) —
and returns exactly what ``importlib.metadata.entry_points(group=...)`` returns, in its order
(tests/test_entry_points.py compares the two). Anything it does not read the same way (a zip or
``.egg`` on ``sys.path``, another distribution finder on ``sys.meta_path``, a metadata header
the email parser might read differently, an entry point value not of the usual form) makes it
hand the whole question to ``importlib.metadata``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from importlib import import_module
from typing import Any

__all__ = ["EntryPoint", "entry_points"]


class _Unusual(Exception):
    """Something :func:`_scan` does not read exactly like ``importlib.metadata``."""


class EntryPoint:
    """What the registry needs of an entry point: its name, value, distribution and ``load``."""

    __slots__ = ("_load", "dist_name", "dist_version", "name", "value")

    def __init__(self, name: str, value: str, dist_name: str | None, dist_version: str | None,
                 load: Callable[[], Any]) -> None:
        self.name = name
        self.value = value
        self.dist_name = dist_name
        self.dist_version = dist_version
        self._load = load

    def load(self) -> Any:
        """The module (or ``module:attr`` object) named by the value, imported now."""
        return self._load()

    def key(self) -> tuple[str, str, str | None, str | None]:
        """``(name, value, distribution name, version)``, to compare two scans."""
        return self.name, self.value, self.dist_name, self.dist_version

    def __repr__(self) -> str:
        return f"EntryPoint({self.name!r}, {self.value!r}, dist={self.dist_name!r})"


def entry_points(group: str) -> list[EntryPoint]:
    """The entry points of ``group`` of every visible distribution, as
    ``importlib.metadata.entry_points(group=group)`` lists them."""
    try:
        return _scan(group)
    except (_Unusual, UnicodeDecodeError):
        return _from_importlib(group)


def _from_importlib(group: str) -> list[EntryPoint]:
    from importlib.metadata import entry_points as _eps

    out = []
    for ep in _eps(group=group):
        dist = ep.dist
        out.append(EntryPoint(ep.name, ep.value, dist.name if dist is not None else None,
                              dist.version if dist is not None else None, ep.load))
    return out


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


def _scan(group: str) -> list[EntryPoint]:
    from importlib.machinery import PathFinder

    for finder in sys.meta_path:  # a finder that finds distributions elsewhere: not read here
        if finder is not PathFinder and getattr(finder, "find_distributions", None) is not None:
            raise _Unusual(finder)
    seen: set[str] = set()
    found: list[EntryPoint] = []
    for root in sys.path:
        for norm, info in _metadata_dirs(root):
            if norm in seen:  # the first distribution of a name wins (importlib's _unique)
                continue
            seen.add(norm)
            found.extend(_dist_entry_points(info, group))
    return found


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


def _dist_entry_points(info: str, group: str) -> list[EntryPoint]:
    text = _read(os.path.join(info, "entry_points.txt"))
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
        if not eq:  # importlib raises here: let it say so
            raise _Unusual(line)
        if section == group:
            pairs.append((name.strip(), value.strip()))
    if not pairs:
        return []
    dist_name, version = _name_version(info)
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
