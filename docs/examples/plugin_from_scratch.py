"""A third-party plugin from an empty directory to a passing conformance run, as docs/plugins.md
tells it: sections 1 to 4, step by step.

Run from the repository root (no network; about 5 s of CPU time with the NumPy backend)::

    PEREGISTRY_BACKENDS=numpy python docs/examples/plugin_from_scratch.py
    python docs/examples/plugin_from_scratch.py --dir /tmp/myrope     # and keep what it made

It writes the package ``peregistry-myrope`` of section 1, taking its ``pyproject.toml`` (section
2), ``src/myrope/plugin.py`` (section 3) and ``tests/test_myrope.py`` (section 4) from the code
blocks of docs/plugins.md as they stand, so that what runs is what the page shows. Then, printing
each command as it runs it:

1. ``pip install -e .`` (with ``--no-deps --no-build-isolation``: peregistry, pytest and
   setuptools are already installed, so no index is needed);
2. ``peregistry list``: the encoder ``shifted-sin`` is listed with the distribution
   ``peregistry-myrope 0.1.0`` and its docstring's summary, found through its entry point alone;
3. ``pytest``: the conformance suite of section 4 on the backends of ``PEREGISTRY_BACKENDS``
   (every installed one if unset), with the test ids the page gives;
4. ``pip uninstall -y peregistry-myrope``, and ``peregistry list`` no longer shows it.

Everything is installed into a throwaway virtual environment layered over the one running this
script (``python -m venv`` and a ``.pth`` line that adds this environment's site-packages), so
peregistry and the frameworks are not installed again and your environment is left as it was,
even if the script is interrupted. It exits 1 if a step fails.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "plugins.md"
DIST, ENCODER, SUMMARY = "peregistry-myrope", "shifted-sin", "Sinusoid with a phase shift"
README = "# peregistry-myrope\n\nA sinusoid with a phase shift, as a peregistry plugin.\n"


def doc_block(text: str, section: str, language: str) -> str:
    """The first ``language`` code block of the section headed ``## {section}...`` of the page."""
    head = re.search(rf"^## {re.escape(section)}", text, re.M)
    if head is None:
        raise LookupError(f"docs/plugins.md has no section '## {section}'")
    end = re.compile(r"^## ", re.M).search(text, head.end())
    body = text[head.end():end.start() if end else len(text)]
    m = re.search(rf"^```{language}\n(.*?)^```", body, re.S | re.M)
    if m is None:
        raise LookupError(f"docs/plugins.md: no ```{language} block in '## {section}'")
    return m.group(1)


def write_package(root: Path) -> Path:
    """The layout of section 1, files from sections 2-4; returns the package directory."""
    text = DOCS.read_text(encoding="utf-8")
    pkg = root / DIST
    files = {
        "pyproject.toml": doc_block(text, "2.", "toml"),
        "README.md": README,
        "src/myrope/__init__.py": "",
        "src/myrope/plugin.py": doc_block(text, "3.", "python"),
        "tests/test_myrope.py": doc_block(text, "4.", "python"),
    }
    for name, content in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(content, encoding="utf-8")
    return pkg


def make_env(where: Path) -> Path:
    """A venv whose ``site-packages`` also reads this interpreter's (their ``.pth`` files too, so
    an editable peregistry is found); returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], check=True, capture_output=True, text=True)
    ours = dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"]])
    lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in ours if Path(p).is_dir())
    (Path(purelib.stdout.strip()) / "_layered_env.pth").write_text(lines, encoding="utf-8")
    return python


def step(python: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m <args>``, printing the command and its output."""
    print(f"$ {shlex.join(['python', '-m', *args])}", flush=True)
    done = subprocess.run([str(python), "-m", *args], cwd=cwd, capture_output=True, text=True,
                          check=False, timeout=900)
    print(done.stdout + done.stderr, end="", flush=True)
    return done


def rows(out: str) -> list[str]:
    """The rows of ``peregistry list`` output that name the encoder."""
    return [line for line in out.splitlines() if line.split()[:1] == [ENCODER]]


def run(root: Path) -> list[str]:
    """Every step in ``root``; returns what failed (empty: all passed)."""
    pkg = write_package(root)
    python = make_env(root / "env")
    wrong: list[str] = []
    done = step(python, "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", ".",
                cwd=pkg)
    if done.returncode:
        return ["pip install -e . failed"]
    try:
        found = rows(step(python, "peregistry", "list").stdout)
        # its distribution, and its summary: the first line of its docstring (section 3)
        if not any(DIST in r and SUMMARY in r for r in found):
            wrong.append(f"peregistry list does not show {ENCODER} from {DIST}, '{SUMMARY}'")
        done = step(python, "pytest", "-p", "no:cacheprovider", "-q", "-rA", cwd=pkg)
        if done.returncode:
            wrong.append(f"the conformance suite failed (pytest exit {done.returncode})")
        documented = r"test_conformance\[shifted-sin\(dim=16\)-\w+-check_dtype_preserved\]"
        if not re.search(rf"PASSED tests/test_myrope.py::{documented}", done.stdout):
            wrong.append("no test id of the form docs/plugins.md gives passed")
    finally:
        if step(python, "pip", "uninstall", "-y", DIST).returncode:
            wrong.append("pip uninstall failed")
    if rows(step(python, "peregistry", "list").stdout):
        wrong.append(f"{ENCODER} is still listed after pip uninstall")
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="where to make the package and the env "
                        "(kept; default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    root = args.dir or Path(tempfile.mkdtemp(prefix="myrope-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        wrong = run(root)
    finally:
        if args.dir is None and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kept {root}")
    for w in wrong:
        print("FAILED:", w)
    if not wrong:
        print(f"{DIST}: installed, listed, conformance suite passed, uninstalled")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
