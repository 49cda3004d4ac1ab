"""peregistry's entry point scanner (no ``importlib.metadata`` at startup) against
``importlib.metadata.entry_points(group=...)``: the same entry points, distributions and order, in
this environment and in made-up ``sys.path`` layouts; what it does not read itself goes to
``importlib.metadata`` whole."""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from peregistry import _entry_points
from peregistry._entry_points import entry_points

GROUP = "peregistry"


def reference(group: str = GROUP) -> list[tuple[Any, ...]]:
    importlib.invalidate_caches()  # importlib.metadata caches directory listings by mtime
    return [(ep.name, ep.value, ep.dist.name if ep.dist else None,
             ep.dist.version if ep.dist else None)
            for ep in importlib.metadata.entry_points(group=group)]


def scanned(group: str = GROUP) -> list[tuple[Any, ...]]:
    """The scanner's own answer: fails if it would have handed the question to importlib."""
    return [ep.key() for ep in _entry_points._scan(group)]


def dist(root: Path, dirname: str, entry_points: str | None, *, name: str | None = None,
         version: str = "1.0", meta_file: str = "METADATA", newline: str = "\n") -> Path:
    info = root / dirname
    info.mkdir(parents=True)
    if name is not None:
        lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", "Summary: x"]
        (info / meta_file).write_bytes((newline.join(lines) + newline).encode())
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points)
    return info


# -- this environment ------------------------------------------------------------------------------
@pytest.mark.parametrize("group", [GROUP, "console_scripts", "pytest11"])
def test_same_entry_points_as_importlib_metadata_here(group: str) -> None:
    assert scanned(group) == reference(group)


def test_the_builtins_and_installed_plugins_are_found() -> None:
    found = {(name, d) for name, _, d, _ in scanned()}
    assert {("rotary", "peregistry"), ("xpos", "peregistry"), ("backends", "peregistry")} <= found
    if importlib.util.find_spec("peregistry_vision") is not None:
        assert ("peregistry-vision", "peregistry-vision") in found


# -- made-up layouts -------------------------------------------------------------------------------
@pytest.fixture
def path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Three directories that are the whole of ``sys.path`` (plus one that does not exist)."""
    roots = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    for r in roots:
        r.mkdir()
    monkeypatch.setattr(sys, "path", [str(roots[0]), str(tmp_path / "missing"), *map(str, roots[1:])])
    return roots


def test_first_distribution_of_a_normalised_name_wins(path: list[Path]) -> None:
    a, b, c = path
    dist(a, "Pe_Plug-2.0.dist-info", "[peregistry]\nx = pe_plug\n", name="Pe_Plug", version="2.0")
    dist(b, "pe.plug-1.0.dist-info", "[peregistry]\nx = old_plug\n", name="pe.plug")
    # a first copy without the group still shadows a later one with it
    dist(a, "shadow-1.0.dist-info", "[console_scripts]\ns = shadow:main\n", name="shadow")
    dist(c, "shadow-0.9.dist-info", "[peregistry]\nshadow = shadow\n", name="shadow", version="0.9")
    assert scanned() == reference()
    assert scanned() == [("x", "pe_plug", "Pe_Plug", "2.0")]


def test_order_sections_comments_and_spacing(path: list[Path]) -> None:
    a, b, _ = path
    eps = ("top = ignored\n# a comment\n[console_scripts]\nz = zz:main\n"
           "[peregistry]\n  b-name =  mod_b  \n\n# skipped\na_name=pkg.mod:obj.attr\n"
           "[other]\nq = q\n[peregistry]\nlast = last\n")
    dist(a, "zeta-1.0.dist-info", eps, name="zeta")
    dist(a, "alpha-3.dist-info", "[peregistry]\nalpha = alpha\n", name="Alpha", version="3")
    dist(b, "legacy.egg-info", "[peregistry]\nlegacy = legacy_mod\n", name="legacy",
         meta_file="PKG-INFO")
    dist(b, "crlf-1.0.dist-info", "[peregistry]\r\ncrlf = crlf\r\n", name="crlf", newline="\r\n")
    dist(b, "noeps-1.0.dist-info", None, name="noeps")
    (b / "file-1.0.egg-info").write_text("Name: file\n")  # an old distutils egg-info file
    got = scanned()
    assert got == reference()
    assert ("a_name", "pkg.mod:obj.attr", "zeta", "1.0") in got
    assert ("b-name", "mod_b", "zeta", "1.0") in got
    assert ("legacy", "legacy_mod", "legacy", "1.0") in got and ("crlf", "crlf", "crlf", "1.0") in got


def test_load_imports_the_module_and_walks_attributes(path: list[Path]) -> None:
    a = path[0]
    (a / "pe_loadme.py").write_text("class K:\n    class Inner:\n        pass\n")
    dist(a, "pe_loadme-1.0.dist-info", "[peregistry]\nk = pe_loadme:K.Inner\nm = pe_loadme\n",
         name="pe-loadme")
    try:
        ours = {ep.name: ep.load() for ep in _entry_points._scan(GROUP)}
        theirs = {ep.name: ep.load() for ep in importlib.metadata.entry_points(group=GROUP)}
        assert ours == theirs
        assert ours["k"].__qualname__ == "K.Inner" and ours["m"].__name__ == "pe_loadme"
    finally:
        sys.modules.pop("pe_loadme", None)


@pytest.mark.parametrize("case", ["extras", "zip", "continued-header", "no-equals"])
def test_unusual_layouts_go_to_importlib_metadata(path: list[Path], tmp_path: Path,
                                                  case: str) -> None:
    a = path[0]
    if case == "extras":
        dist(a, "ex-1.0.dist-info", "[peregistry]\nex = ex_mod:obj [extra]\n", name="ex")
    elif case == "zip":
        archive = tmp_path / "plugins.zip"
        with zipfile.ZipFile(archive, "w") as z:
            z.writestr("zipped-1.0.dist-info/METADATA", "Name: zipped\nVersion: 1.0\n")
            z.writestr("zipped-1.0.dist-info/entry_points.txt", "[peregistry]\nz = zipped\n")
        sys.path.append(str(archive))
    elif case == "continued-header":
        info = dist(a, "cont-1.0.dist-info", "[peregistry]\nc = cont\n")
        (info / "METADATA").write_text("Metadata-Version: 2.1\nSummary: two\n  lines\n"
                                       "Name: cont\nVersion: 1.0\n")
    else:
        dist(a, "noeq-1.0.dist-info", "[peregistry]\nnot a pair\n", name="noeq")
    with pytest.raises(_entry_points._Unusual):
        _entry_points._scan(GROUP)
    if case == "no-equals":  # importlib's own error, unchanged
        with pytest.raises((TypeError, ValueError), match="value|unpack"):
            entry_points(GROUP)
        return
    got = [ep.key() for ep in entry_points(GROUP)]
    assert got == reference() and len(got) == 1


def test_another_distribution_finder_goes_to_importlib_metadata(
        path: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    dist(path[0], "real-1.0.dist-info", "[peregistry]\nr = real\n", name="real")

    class Finder:
        @staticmethod
        def find_spec(*args: Any) -> None:
            return None

        @staticmethod
        def find_distributions(*args: Any, **kwargs: Any) -> list[Any]:
            return []

    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder])
    with pytest.raises(_entry_points._Unusual):
        _entry_points._scan(GROUP)
    assert [ep.key() for ep in entry_points(GROUP)] == reference() == [("r", "real", "real", "1.0")]
