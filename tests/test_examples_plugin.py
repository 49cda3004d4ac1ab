"""docs/examples/plugin_from_scratch.py runs as its docstring says: the package of
docs/plugins.md (its pyproject, plugin module and test lines, read from the page) is installed
with pip into a throwaway environment, listed by ``peregistry list``, passes the conformance
suite with the test ids the page gives, and is gone after ``pip uninstall``.

It runs where NumPy is a selected backend (the numpy env), with the suite on NumPy alone."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from peregistry.testing._core import selected_backends

pytestmark = pytest.mark.skipif("numpy" not in [b.name for b in selected_backends()],
                                reason="numpy is not a selected backend")

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "plugin_from_scratch.py"


def test_example_runs_as_documented(tmp_path: Path) -> None:
    env = {**os.environ, "PEREGISTRY_BACKENDS": "numpy"}
    done = subprocess.run([sys.executable, str(EXAMPLE), "--dir", str(tmp_path)], env=env,
                          capture_output=True, text=True, check=False, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "peregistry-myrope: installed, listed, conformance suite passed, uninstalled" in out
    # what it made is the page's package; the environment it used is its own
    pkg = tmp_path / "peregistry-myrope"
    assert (pkg / "src" / "myrope" / "plugin.py").read_text().count("class ShiftedSin(") == 1
    assert "peregistry-myrope" in (pkg / "pyproject.toml").read_text()
    assert not list((tmp_path / "env").glob("lib*/python*/site-packages/*myrope*"))


def test_pages_blocks_are_found_or_named() -> None:
    mod: dict[str, Any] = runpy.run_path(str(EXAMPLE), run_name="plugin_from_scratch_example")
    text = "## 2. the entry point\n\n```toml\n[project]\n```\n## 3. code\n## 4.\n```python\nx\n```\n"
    assert mod["doc_block"](text, "2.", "toml") == "[project]\n"
    with pytest.raises(LookupError, match=r"no ```python block in '## 3\.'"):
        mod["doc_block"](text, "3.", "python")
    assert mod["doc_block"](text, "4.", "python") == "x\n"
    with pytest.raises(LookupError, match="no section '## 5.'"):
        mod["doc_block"](text, "5.", "python")
