"""Third-party plugins as real installed distributions, each in a fresh process.

The distributions live in ``tests/plugins/<dir>/`` (a ``pyproject.toml`` and a module each). A
fixture installs them into a temporary site directory — ``<name>-<version>.dist-info`` with
``METADATA`` and ``entry_points.txt`` written from the pyproject, next to the module, which is
what an installer leaves behind — and the CLI, ``get_encoder`` and pytest then run in
subprocesses with ``PYTHONPATH`` pointing there, so entry points are discovered exactly as for
a ``pip install``. One test does a real ``pip install --target`` as well.

Scenarios: a module that fails to import, a hook that raises, a hook returning a non-encoder,
a plugin claiming the built-in name ``sinusoidal``, a plugin whose encoder fails the suite, and
a working one; and the switches that disable autoload, load only named plugins, or block some.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

import peregistry as per

# Its subprocesses select numpy themselves; the plugins env runs it too, with plugins installed.
pytestmark = pytest.mark.backend_free

PLUGINS = Path(__file__).parent / "plugins"
ALL = ["good", "bad-import", "hook-raises", "non-encoder", "claims-builtin", "fails-suite"]
SWITCHES = ("PEREGISTRY_DISABLE_PLUGIN_AUTOLOAD", "PEREGISTRY_LOAD_PLUGINS",
            "PEREGISTRY_DISABLED_PLUGINS")


def install(site: Path, directory: str) -> None:
    """Install ``tests/plugins/<directory>`` into ``site`` as an installer would lay it out."""
    src = PLUGINS / directory
    meta = tomllib.loads((src / "pyproject.toml").read_text())
    project = meta["project"]
    for mod in meta["tool"]["setuptools"]["py-modules"]:
        shutil.copy(src / f"{mod}.py", site / f"{mod}.py")
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
        f"Summary: {project['description']}\n"
        + "".join(f"Requires-Dist: {d}\n" for d in project.get("dependencies", []))
    )
    eps = "\n".join(f"{k} = {v}" for k, v in project["entry-points"]["peregistry"].items())
    (info / "entry_points.txt").write_text(f"[peregistry]\n{eps}\n")
    (info / "INSTALLER").write_text("peregistry-tests\n")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("site")
    for d in ALL:
        install(root, d)
    return root


def run(site: Path, *args: str, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python <args>`` in a fresh process that sees the plugins in ``site``."""
    base = {k: v for k, v in os.environ.items() if k not in SWITCHES}
    base["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, check=False,
                          env={**base, **(env or {})}, cwd=cwd, timeout=600)


def cli(site: Path, *args: str, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    return run(site, "-m", "peregistry", *args, env=env)


def py(site: Path, code: str, env: dict[str, str] | None = None
       ) -> subprocess.CompletedProcess[str]:
    return run(site, "-c", textwrap.dedent(code), env=env)


def line_of(out: str, word: str) -> str:
    lines = [ln for ln in out.splitlines() if word in ln]
    assert lines, f"{word!r} not in:\n{out}"
    return "\n".join(lines)


# -- peregistry list --------------------------------------------------------------------------------
def test_list_shows_each_broken_plugin_with_its_error_and_the_rest_working(site: Path) -> None:
    out = cli(site, "list")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "ok" in line_of(text, "good-sin")
    assert "ok" in line_of(text, "rotary")
    assert "ok" in line_of(text, "always-float32")
    bad = line_of(text, "pe-bad-import")
    assert "error" in bad
    assert "error importing plugin \"pe_bad_import\"" in text
    assert "ModuleNotFoundError" in text and "peregistry_missing_dependency" in text
    assert "hook peregistry_encoders() raised RuntimeError: pe-hook-raises is broken on purpose" \
        in text
    assert "not an Encoder subclass" in text and "pe-non-encoder" in text
    assert "conflict" in line_of(text, "sinusoidal")
    assert f"peregistry {per.__version__} and pe-claims-builtin 1.0" in text


# -- get_encoder in a fresh process -----------------------------------------------------------------
def test_get_encoder_serves_the_good_and_names_the_broken(site: Path) -> None:
    out = py(site, """
        import numpy as np
        import peregistry as per

        print("good-sin", per.get_encoder("good-sin", dim=4).encode(np.arange(3)).shape)
        print("rotary", per.get_encoder("rotary", dim=8).rotate(np.ones((2, 8))).shape)
        print("axial", "axial-rotary" in {e.name for e in per.list_encoders()})
        for name, opts in [("sinusoidal", {"dim": 4}), ("not-an-encoder", {})]:
            try:
                per.get_encoder(name, **opts)
            except Exception as exc:
                print(name, type(exc).__name__, exc)
    """)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "good-sin (3, 4)" in text
    assert "rotary (2, 8)" in text
    conflict = line_of(text, "sinusoidal PluginConflictError")
    assert f"peregistry {per.__version__} and pe-claims-builtin 1.0" in conflict
    missing = line_of(text, "not-an-encoder EncoderNotFoundError")
    for dist in ("pe-bad-import 1.0", "pe-hook-raises 1.0", "pe-non-encoder 1.0"):
        assert dist in missing  # the failed plugins are named with their causes
    assert "ModuleNotFoundError" in missing


# -- the test suite ---------------------------------------------------------------------------------
CONFORMANCE = """
from peregistry.testing import parametrize_with_checks

@parametrize_with_checks([({name!r}, {{"dim": 8}})])
def test_conformance(case):
    case.run()
"""


def pytest_in(site: Path, tmp_path: Path, name: str) -> subprocess.CompletedProcess[str]:
    test = tmp_path / "test_plugin_conformance.py"
    test.write_text(CONFORMANCE.format(name=name))
    return run(site, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test),
               env={"PEREGISTRY_BACKENDS": "numpy"}, cwd=tmp_path)


def test_two_lines_of_pytest_pass_a_good_plugin_among_broken_ones(site: Path,
                                                                  tmp_path: Path) -> None:
    out = pytest_in(site, tmp_path, "good-sin")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "passed" in out.stdout and "failed" not in out.stdout


def test_two_lines_of_pytest_fail_a_broken_plugin_encoder_saying_why(site: Path,
                                                                     tmp_path: Path) -> None:
    out = pytest_in(site, tmp_path, "always-float32")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "always-float32-numpy-check_dtype_preserved" in out.stdout
    assert "output.dtype=float32 with dtype=None, but should be the default float dtype float64" \
        in out.stdout


def test_two_lines_of_pytest_on_a_conflicting_name_is_a_collection_error_naming_both(
        site: Path, tmp_path: Path) -> None:
    test = tmp_path / "test_conflict.py"
    test.write_text(CONFORMANCE.format(name="sinusoidal"))
    out = run(site, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test), cwd=tmp_path,
              env={"PEREGISTRY_BACKENDS": "numpy"})
    assert out.returncode != 0
    assert "PluginConflictError" in out.stdout
    assert "pe-claims-builtin 1.0" in out.stdout


# -- peregistry check ----------------------------------------------------------------------------
def test_check_exits_non_zero_for_a_broken_plugin_encoder(site: Path) -> None:
    out = cli(site, "check", "always-float32", "--backend", "numpy", "--option", "dim=8")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "check_dtype_preserved" in line_of(out.stdout, "failed")
    good = cli(site, "check", "good-sin", "rotary", "--backend", "numpy", "--option", "dim=8")
    assert good.returncode == 0, good.stdout + good.stderr


# -- environment switches ------------------------------------------------------------------------
def test_disable_autoload_leaves_builtins_only(site: Path) -> None:
    out = py(site, """
        import peregistry as per
        rows = per.list_encoders()
        print("names", sorted(r.name for r in rows if r.status == "ok"))
        print("sinusoidal", per.get_encoder("sinusoidal", dim=4))
        for r in rows:
            if r.plugin.distribution and r.plugin.distribution.startswith("pe-"):
                print("row", r.plugin.distribution, r.status, r.error)
        try:
            per.get_encoder("good-sin", dim=4)
        except Exception as exc:
            print("good-sin", type(exc).__name__)
    """, env={"PEREGISTRY_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "good-sin EncoderNotFoundError" in text
    assert "sinusoidal get_encoder('sinusoidal', dim=4" in text  # no conflict any more
    for dist in ("pe-good", "pe-bad-import", "pe-hook-raises", "pe-claims-builtin"):
        assert f"row {dist} disabled third-party autoload disabled by " \
               f"PEREGISTRY_DISABLE_PLUGIN_AUTOLOAD" in text
    listed = cli(site, "list", env={"PEREGISTRY_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert listed.returncode == 0 and "ok" in line_of(listed.stdout, "sinusoidal")
    assert "good-sin" not in listed.stdout


def test_load_only_named_plugins(site: Path) -> None:
    out = py(site, """
        import peregistry as per
        print("good-sin", per.get_encoder("good-sin", dim=4))
        print("sinusoidal", per.get_encoder("sinusoidal", dim=4))
        for r in per.list_encoders():
            if r.status != "ok":
                print("row", r.plugin.distribution, r.status, r.error)
    """, env={"PEREGISTRY_LOAD_PLUGINS": "pe-good"})
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "good-sin get_encoder('good-sin', dim=4)" in text
    assert "sinusoidal get_encoder('sinusoidal'" in text
    for dist in ("pe-bad-import", "pe-hook-raises", "pe-claims-builtin", "pe-fails-suite"):
        assert f"row {dist} disabled not named in PEREGISTRY_LOAD_PLUGINS" in text
    assert " error " not in text


def test_block_named_plugins(site: Path) -> None:
    out = cli(site, "list", env={"PEREGISTRY_DISABLED_PLUGINS": "pe-claims-builtin,pe_bad_import"})
    assert out.returncode == 0, out.stderr
    assert "ok" in line_of(out.stdout, "sinusoidal")
    assert "disabled" in line_of(out.stdout, "pe-claims-builtin")
    assert "disabled" in line_of(out.stdout, "pe-bad-import")
    assert "error" in line_of(out.stdout, "pe-hook-raises")  # still loaded, still broken


# -- a real pip install ------------------------------------------------------------------------------
def test_pip_installed_plugin_is_found(tmp_path: Path) -> None:
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools is not installed here, and pip --no-build-isolation needs it")
    target = tmp_path / "target"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--no-index", "--disable-pip-version-check", "--target", str(target),
         str(PLUGINS / "good")],
        capture_output=True, text=True, check=False, cwd=tmp_path, timeout=600)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    assert list(target.glob("pe_good-1.0.dist-info/entry_points.txt"))
    out = cli(target, "list")
    assert out.returncode == 0, out.stderr
    assert "pe-good 1.0" in line_of(out.stdout, "good-sin")
