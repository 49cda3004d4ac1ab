"""Every code block of README.md and docs/*.md runs as written (issue 45); see ``_blocks.py``
for how blocks are parsed (Sybil), marked and checked, and the rule for shell blocks.

Each tox env that runs this module names the homes it runs in ``PEREGISTRY_DOCS_HOMES`` (the
numpy env ``numpy``, the torch env ``torch,transformers``, ...) and collects only those blocks:
a block of its homes that needs a framework the env lacks fails (the env is wrong), it is not
skipped. Without the variable (a local ``pytest tests_docs``) every block runs whose frameworks
import, the others are skipped saying which is missing. ``test_every_block_has_an_env`` checks
tox.ini: every block's home is some env's, and that env runs this module.
"""

from __future__ import annotations

import configparser
import importlib.util
import os
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from _blocks import PAGES, ROOT, RUN_LANGUAGES, SHOWN_LANGUAGES, frameworks, home, is_skip_directive, sybil
from sybil import Example

HOMES_ENV = "PEREGISTRY_DOCS_HOMES"


def _selected_homes() -> frozenset[str] | None:
    value = os.environ.get(HOMES_ENV)
    return None if value is None else frozenset(v.strip() for v in value.split(",") if v.strip())


def _all_blocks() -> list[tuple[str, Example, frozenset[str], frozenset[str]]]:
    """(page:line, example, frameworks, homes of the page's later blocks) of every block, in page
    order. A skip directive needs what the block it marks needs (they run together)."""
    parser = sybil()
    out = []
    for page in PAGES:
        document = parser.parse(page)
        # A real module: torch.compile and pickle look up the module of code they are given.
        module = types.ModuleType(f"docs_page_{page.stem.replace('-', '_')}")
        sys.modules[module.__name__] = module
        document.namespace = module.__dict__
        examples = list(document.examples())
        needs = [frameworks(e) for e in examples]
        for i in reversed(range(len(examples) - 1)):  # hidden setup runs with the block it sets up
            if document.text.startswith("<!--", examples[i].start) and not is_skip_directive(examples[i]):
                needs[i] |= needs[i + 1]
        for i, example in enumerate(examples[:-1]):  # a block marked skip needs nothing
            if is_skip_directive(example) and not str(example.parsed[1] or "").startswith("if"):
                needs[i + 1] = frozenset()
        for i, example in enumerate(examples):
            mine = needs[i + 1] if is_skip_directive(example) and i + 1 < len(examples) else needs[i]
            later = frozenset(home(n) for n in needs[i + 1:])
            out.append((f"{page.relative_to(ROOT)}:{example.line}", example, mine, later))
    return out


def _runs_here(needs: frozenset[str], later: frozenset[str]) -> bool:
    """A block runs in an env of its home, and a numpy block also where a later block of its
    page runs (that block may use its names)."""
    return SELECTED is None or home(needs) in SELECTED or (home(needs) == "numpy" and bool(later & SELECTED))


BLOCKS = _all_blocks()
SELECTED = _selected_homes()
WORKDIRS: dict[str, Path] = {}  # page -> its working directory


@pytest.mark.parametrize(("example", "needs"), [
    pytest.param(example, needs, id=where) for where, example, needs, later in BLOCKS
    if _runs_here(needs, later)])
def test_block_runs_as_written(example: Example, needs: frozenset[str],
                               tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    page = Path(example.path).stem
    if page not in WORKDIRS:
        WORKDIRS[page] = tmp_path_factory.mktemp(f"docs-{page}")
    monkeypatch.chdir(WORKDIRS[page])  # what a block writes (pos.pt, config.json) stays out of the tree
    missing = sorted(n for n in needs if importlib.util.find_spec(n) is None)
    if missing and SELECTED is not None:
        pytest.fail(f"{HOMES_ENV}={os.environ[HOMES_ENV]} runs this block but {missing} do not import")
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    example.evaluate()


def _tox_envs() -> dict[str, dict[str, Any]]:
    """Each tox env's docs homes (from its set_env or its commands) and commands."""
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    out = {}
    for section in tox.sections():
        if section.startswith("testenv:"):
            env = tox[section]
            text = env.get("set_env", "") + "\n" + env.get("commands", "")
            homes = {h for m in re.findall(HOMES_ENV + r"\s*=\s*([\w,]+)", text) for h in m.split(",") if h}
            out[section[len("testenv:"):]] = {"homes": homes,
                                              "commands": env.get("commands", tox["testenv"]["commands"])}
    return out


def test_every_block_has_an_env() -> None:
    envs = _tox_envs()
    covered = set().union(*(e["homes"] for e in envs.values()))
    homeless = sorted({f"{where} ({home(needs)})" for where, _, needs, _ in BLOCKS if home(needs) not in covered})
    assert not homeless, f"blocks whose home no tox env lists in {HOMES_ENV}: {homeless}"
    for name, env in envs.items():
        if env["homes"]:
            runs = "tests_docs" in env["commands"] or "pytest {posargs}" in env["commands"]
            assert runs, f"tox env {name} sets {HOMES_ENV} but does not run tests_docs"


def test_every_fence_is_run_or_shown() -> None:
    """A block in a language nothing runs (``sh``, ``py``) would pass unseen: each fence is one
    of the languages run or one of those only shown (output, diagrams, config files)."""
    unknown = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        inside = False
        for number, line in enumerate(lines, 1):
            m = re.match(r"\s*(`{3,}|~{3,})\s*(\S*)", line)
            if m is None:
                continue
            if not inside and m.group(2) not in RUN_LANGUAGES | SHOWN_LANGUAGES and not m.group(2).startswith("{"):
                unknown.append(f"{page.relative_to(ROOT)}:{number} ```{m.group(2)}")
            inside = not inside
    assert not unknown, f"fences in a language neither run nor shown ({sorted(RUN_LANGUAGES)}): {unknown}"


def test_pages_are_parsed() -> None:
    where = {w.split(":")[0] for w, *_ in BLOCKS}
    assert {"README.md", "docs/quickstart.md", "docs/rotary.md", "docs/plugins.md"} <= where, where
