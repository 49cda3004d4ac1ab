"""Entry points read one distribution at a time (by peregistry's own reading of the plain
layout, else by ``importlib.metadata``): the same entry points, distributions and order as
``importlib.metadata.entry_points(group=...)``, here and in made-up ``sys.path`` layouts; and a
distribution that cannot be read (a file that is not UTF-8, an entry point line without ``=``, a
symlink loop) is shown by ``list_encoders`` as an ``error`` naming it, when it may be a plugin,
while every other encoder keeps working, whichever reads it."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from peregistry._entry_points import EntryPoint, entry_points
from peregistry.registry import Registry

pytestmark = pytest.mark.backend_free  # entry points and their switches only

GROUP = "peregistry"
SWITCHES = ("PEREGISTRY_DISABLE_PLUGIN_AUTOLOAD", "PEREGISTRY_LOAD_PLUGINS",
            "PEREGISTRY_DISABLED_PLUGINS")


def reference(group: str = GROUP) -> list[tuple[Any, ...]]:
    importlib.invalidate_caches()  # importlib.metadata caches directory listings by mtime
    return [(ep.name, ep.value, ep.dist.name if ep.dist else None,
             ep.dist.version if ep.dist else None)
            for ep in importlib.metadata.entry_points(group=group)]


def found(group: str = GROUP) -> list[tuple[Any, ...]]:
    """Ours, all of them read (an unreadable distribution fails the test)."""
    importlib.invalidate_caches()
    got = entry_points(group)
    assert all(isinstance(ep, EntryPoint) for ep in got), got
    return [(ep.name, ep.value, ep.dist_name, ep.dist_version) for ep in got
            if isinstance(ep, EntryPoint)]


def dist(root: Path, dirname: str, entry_points: str | bytes | None, *, name: str | None = None,
         version: str = "1.0", meta_file: str = "METADATA", newline: str = "\n") -> Path:
    info = root / dirname
    info.mkdir(parents=True)
    if name is not None:
        lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", "Summary: x"]
        (info / meta_file).write_bytes((newline.join(lines) + newline).encode())
    if entry_points is not None:
        (info / "entry_points.txt").write_bytes(
            entry_points if isinstance(entry_points, bytes) else entry_points.encode())
    return info


# -- this environment ------------------------------------------------------------------------------
@pytest.mark.parametrize("group", [GROUP, "console_scripts", "pytest11"])
def test_same_entry_points_as_importlib_metadata_here(group: str) -> None:
    assert found(group) == reference(group)


def test_the_builtins_and_installed_plugins_are_found() -> None:
    names = {(name, d) for name, _, d, _ in found()}
    assert {("rotary", "peregistry"), ("xpos", "peregistry"), ("backends", "peregistry")} <= names
    if importlib.util.find_spec("peregistry_vision") is not None:
        assert ("peregistry-vision", "peregistry-vision") in names


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
    assert found() == reference() == [("x", "pe_plug", "Pe_Plug", "2.0")]


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
    got = found()
    assert got == reference()
    assert ("a_name", "pkg.mod:obj.attr", "zeta", "1.0") in got
    assert ("b-name", "mod_b", "zeta", "1.0") in got
    assert ("legacy", "legacy_mod", "legacy", "1.0") in got and ("crlf", "crlf", "crlf", "1.0") in got


@pytest.mark.parametrize("case", ["extras", "zip", "continued-header"])
def test_other_layouts_read_as_importlib_metadata_reads_them(path: list[Path], tmp_path: Path,
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
    else:
        info = dist(a, "cont-1.0.dist-info", "[peregistry]\nc = cont\n")
        (info / "METADATA").write_text("Metadata-Version: 2.1\nSummary: two\n  lines\n"
                                       "Name: cont\nVersion: 1.0\n")
    got = found()
    assert got == reference() and len(got) == 1


def test_load_imports_the_module_and_walks_attributes(path: list[Path]) -> None:
    a = path[0]
    (a / "pe_loadme.py").write_text("class K:\n    class Inner:\n        pass\n")
    dist(a, "pe_loadme-1.0.dist-info", "[peregistry]\nk = pe_loadme:K.Inner\nm = pe_loadme\n",
         name="pe-loadme")
    try:
        ours = {ep.name: ep.load() for ep in entry_points(GROUP) if isinstance(ep, EntryPoint)}
        theirs = {ep.name: ep.load() for ep in importlib.metadata.entry_points(group=GROUP)}
        assert ours == theirs
        assert ours["k"].__qualname__ == "K.Inner" and ours["m"].__name__ == "pe_loadme"
    finally:
        sys.modules.pop("pe_loadme", None)


def test_another_distribution_finder_is_asked_in_importlib_metadatas_order(
        path: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dist(path[0], "real-1.0.dist-info", "[peregistry]\nr = real\n", name="real")
    dist(path[1], "twice-1.0.dist-info", "[peregistry]\nt = on_path\n", name="twice")
    elsewhere = tmp_path / "elsewhere"
    found_elsewhere = [
        importlib.metadata.Distribution.at(
            dist(elsewhere, "twice-2.0.dist-info", "[peregistry]\nt = elsewhere\n",
                 name="twice", version="2.0")),
        importlib.metadata.Distribution.at(
            dist(elsewhere, "other-1.0.dist-info", "[peregistry]\no = other\n", name="other")),
    ]

    class Finder:  # finds its distributions whatever the path
        @staticmethod
        def find_spec(*args: Any) -> None:
            return None

        @staticmethod
        def find_distributions(*args: Any, **kwargs: Any) -> list[Any]:
            return found_elsewhere

    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder])
    assert found() == reference() == [("r", "real", "real", "1.0"),
                                      ("t", "on_path", "twice", "1.0"),
                                      ("o", "other", "other", "1.0")]


# -- distributions that cannot be read -------------------------------------------------------------
ENCODER_PLUGIN = '''
import peregistry as per

class Healthy(per.AbsoluteEncoder):
    """A plugin's encoder, loaded beside a broken distribution."""
    name = "pe-healthy"
    dim = per.Option(int)

    def _encode(self, positions, *, params, ctx):
        return ctx.xp.zeros((*positions.shape, self.dim), dtype=ctx.wide)

@per.hookimpl
def peregistry_encoders():
    return [Healthy]
'''


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory first on ``sys.path``, before the installed distributions."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    for switch in SWITCHES:
        monkeypatch.delenv(switch, raising=False)
    return root


def loop(root: Path, dirname: str, how: str) -> None:
    link = root / dirname
    if how == "self":
        os.symlink(link, link)
    else:  # two links pointing at each other
        os.symlink(root / f"{dirname}-other-side", link)
        os.symlink(link, root / f"{dirname}-other-side")


BROKEN = {
    # case: (what to make, what the error says)
    "entry_points.txt not UTF-8": (
        lambda root: dist(root, "pe_latin-1.0.dist-info",
                          b"[peregistry]\nlatin = pe_latin  # caf\xe9\n", name="pe-latin"),
        ["distribution 'pe_latin'", "pe_latin-1.0.dist-info/entry_points.txt",
         "UnicodeDecodeError"]),
    "METADATA not UTF-8": (
        lambda root: (dist(root, "pe_meta-1.0.dist-info", "[peregistry]\nmeta = pe_meta\n")
                      / "METADATA").write_bytes(b"Name: pe-meta\nVersion: 1.0\nAuthor: Andr\xe9\n"),
        ["distribution 'pe_meta'", "pe_meta-1.0.dist-info/METADATA", "UnicodeDecodeError"]),
    "line without =": (
        lambda root: dist(root, "pe_noeq-1.0.dist-info", "[peregistry]\nnot a pair\n",
                          name="pe-noeq"),
        ["distribution 'pe_noeq'", "pe_noeq-1.0.dist-info/entry_points.txt",
         "ValueError: 'not a pair' is not 'name = value'"]),
    "symlink loop": (
        lambda root: loop(root, "pe_loop-1.0.dist-info", "self"),
        ["distribution 'pe_loop'", "pe_loop-1.0.dist-info", "OSError",
         "Too many levels of symbolic links"]),
    "two symlinks pointing at each other": (
        lambda root: loop(root, "pe_pair-1.0.dist-info", "pair"),
        ["distribution 'pe_pair'", "pe_pair-1.0.dist-info", "OSError",
         "Too many levels of symbolic links"]),
}


def errors(reg: Registry) -> dict[str, str]:
    """The error of every plugin row of ``list_encoders`` that is not ok, by plugin name."""
    return {r.plugin.name: r.error or "" for r in reg.list_encoders() if r.status != "ok"}


class NoDistributions:
    """A distribution finder that finds none: with it on ``sys.meta_path``, the entry points are
    read through ``importlib.metadata`` (the layout is not the plain one peregistry reads)."""

    @staticmethod
    def find_spec(*args: Any) -> None:
        return None

    @staticmethod
    def find_distributions(*args: Any, **kwargs: Any) -> list[Any]:
        return []


@pytest.mark.parametrize("reader", ["own", "importlib.metadata"])
@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_distribution_is_reported_by_name_and_breaks_nothing(
        site: Path, case: str, reader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    make, said = BROKEN[case]
    make(site)
    if reader == "importlib.metadata":
        monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, NoDistributions])
    reg = Registry()
    assert reg.get_encoder("rotary", dim=8).name == "rotary"
    rows = reg.list_encoders()
    assert {"rotary", "sinusoidal", "xpos"} <= {r.name for r in rows if r.status == "ok"}
    bad = [r for r in rows if r.status != "ok"]
    assert len(bad) == 1 and bad[0].status == "error" and bad[0].name is None, bad
    error = bad[0].error or ""
    assert error.startswith("cannot read distribution '"), error
    for part in said:
        assert part in error, error


@pytest.mark.parametrize("case", ["entry_points.txt not UTF-8", "METADATA not UTF-8"])
def test_a_broken_distribution_that_is_no_plugin_is_not_reported(site: Path, case: str) -> None:
    if case == "entry_points.txt not UTF-8":
        dist(site, "other_tool-1.0.dist-info",
             b"[console_scripts]\ntool = other_tool:main  # caf\xe9\n", name="other-tool")
    else:
        (dist(site, "other_tool-1.0.dist-info", "[console_scripts]\ntool = other_tool:main\n")
         / "METADATA").write_bytes(b"Name: other-tool\nVersion: 1.0\nAuthor: Andr\xe9\n")
    reg = Registry()
    assert reg.get_encoder("rotary", dim=8).name == "rotary"
    assert errors(reg) == {}


def test_a_healthy_plugin_beside_a_broken_one_still_loads(site: Path) -> None:
    for make, _ in BROKEN.values():
        make(site)
    (site / "pe_healthy.py").write_text(ENCODER_PLUGIN)
    dist(site, "pe_healthy-0.3.dist-info", "[peregistry]\nhealthy = pe_healthy\n",
         name="pe-healthy", version="0.3")
    try:
        reg = Registry()
        assert reg.get_encoder("pe-healthy", dim=2).name == "pe-healthy"
        assert reg.get_encoder("rotary", dim=8).name == "rotary"
        row = next(r for r in reg.list_encoders() if r.name == "pe-healthy")
        assert (row.status, row.plugin.label) == ("ok", "pe-healthy 0.3")
        assert len(errors(reg)) == len(BROKEN)
    finally:
        sys.modules.pop("pe_healthy", None)


def test_a_broken_distribution_named_like_a_builtin_plugin_does_not_replace_it(site: Path) -> None:
    dist(site, "rotary-1.0.dist-info", b"[peregistry]\nr = rotary_mod  # caf\xe9\n", name="rotary")
    reg = Registry()
    assert reg.get_encoder("rotary", dim=8).name == "rotary"
    ((name, error),) = errors(reg).items()
    assert name.startswith("rotary (") and "cannot read distribution 'rotary'" in error


def test_a_broken_distribution_can_be_disabled_by_name(site: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    BROKEN["entry_points.txt not UTF-8"][0](site)
    monkeypatch.setenv("PEREGISTRY_DISABLED_PLUGINS", "pe-latin")
    reg = Registry()
    assert reg.get_encoder("rotary", dim=8).name == "rotary"
    rows = [r for r in reg.list_encoders() if r.status != "ok"]
    assert [(r.plugin.name, r.status) for r in rows] == [("pe_latin", "disabled")]


def test_a_sys_path_entry_that_cannot_be_searched_is_reported(site: Path) -> None:
    sys.path.insert(0, b"/no/such/bytes/entry")  # type: ignore[arg-type]
    reg = Registry()
    assert reg.get_encoder("rotary", dim=8).name == "rotary"
    ((_, error),) = errors(reg).items()
    assert error.startswith("cannot read the distributions of sys.path entry b'/no/such/bytes/entry'")
    assert "TypeError" in error


def test_peregistry_list_shows_the_broken_distribution(site: Path) -> None:
    BROKEN["entry_points.txt not UTF-8"][0](site)
    env = {k: v for k, v in os.environ.items() if k not in SWITCHES}
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-m", "peregistry", "list"], capture_output=True,
                          text=True, check=False, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "cannot read distribution 'pe_latin'" in proc.stdout and "rotary" in proc.stdout
