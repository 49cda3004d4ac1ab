"""The python examples of README.md and docs/*.md type-check under ``mypy --strict`` and pyright
(issue 45), and a type checker finds the installed package's types without ``MYPYPATH``.

Blocks are read with Sybil's Markdown parsers, as the doc runner (``tests_docs/``) reads them:
python, bash and console blocks are its examples, ``<!-- invisible-code-block: python -->``
blocks count (the setup a page hides), and ``<!-- skip: next "why" -->`` (or ``start``/``end``)
drops what it marks, a fragment that does not run as written. A page's python blocks, in order,
make one module (the namespace a reader's session builds), checked with mypy's
``--allow-redefinition`` (a page reuses ``enc`` for another encoder) and pyright's defaults;
a function defined again further down a page (an alternative ``test_conformance``) is no error
for either, and mypy's ``--strict`` lets pass calls of torch's and jax's own untyped functions
(``Tensor.backward``, ``PartitionSpec``): theirs to type, not ours.

Imports of frameworks not installed in the env (flax, keras, transformers in the plugins env)
and of the packages a page makes up in-process (docs/plugins.md's ``myrope``) are the errors
allowed; their names are then unchecked. mypy keeps its cache of the frameworks' types, and the pages' modules, in
``.mypy_cache/docs-examples/<env>`` (a first run reads torch's and jax's types for about a
minute, later ones take seconds). Both checkers run in the env that
runs mypy on the package (tox ``plugins``, or ``type``), which sets
``PEREGISTRY_EXPECT_TYPECHECKERS=1``: there a missing checker fails instead of skipping.
"""

from __future__ import annotations

import contextlib
import doctest
import importlib.util
import os
import re
import subprocess
import sys
import unittest
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The pages' modules and mypy's cache, one place per environment (a second run takes seconds).
WORK = ROOT / ".mypy_cache" / "docs-examples" / Path(sys.prefix).name
#: Frameworks a page may import that the checking env may lack (their import is then allowed to
#: fail to resolve); torch, jax, numpy and array_api_strict are installed where this runs.
OPTIONAL = ("flax", "keras", "keras_hub", "transformers", "matplotlib")
#: The blocks the doc runner (tests_docs/_blocks.py) makes examples of: a skip marks the next of
#: them; python and pycon (sessions, as docs/api.md's docstring examples) are type-checked.
RUN_LANGUAGES = ("python", "pycon", "bash", "console")
#: Packages a page makes up in-process (docs/plugins.md's `myrope`): never resolvable.
PAGE_PACKAGES = ("myrope", "mypkg", "my_plugin")


def _require(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        if os.environ.get("PEREGISTRY_EXPECT_TYPECHECKERS") == "1":
            pytest.fail(f"{module} is not installed in this env, which is to run the type checks")
        pytest.skip(f"{module} is not installed (tox env plugins or type runs this)")


@dataclass(frozen=True)
class Block:
    line: int  # the page's line of the block's first source line (1-based)
    source: str


def python_blocks(page: Path) -> list[Block]:
    """The page's python blocks that are not skipped, in order (Sybil's parsing and skips)."""
    from sybil import Document, Example, Sybil
    from sybil.parsers.markdown import CodeBlockParser, SkipParser

    found: list[tuple[Example, str]] = []

    class AnyFenced(CodeBlockParser):  # the blocks the doc runner runs: `skip: next` counts them
        def __call__(self, document: Document) -> Any:
            for region in self.lexers(document):
                language = str(region.lexemes["arguments"]).strip()
                if language not in RUN_LANGUAGES:
                    continue
                region.parsed = region.lexemes["source"]
                region.evaluator = (lambda ex, lang=language: found.append((ex, lang)))
                yield region

    document = Sybil(parsers=[AnyFenced(language="python"), SkipParser()]).parse(page)
    for example in document.examples():
        # (the Skipper keeps skipped ones from `found`; one with a reason raises SkipTest)
        with contextlib.suppress(unittest.SkipTest):
            example.evaluate()
    blocks = []
    for example, language in found:
        if language not in ("python", "pycon"):
            continue
        source = str(example.region.parsed)
        if source.lstrip().startswith(">>>"):
            source = "".join(e.source for e in doctest.DocTestParser().get_examples(source))
        start = example.document.text.index(str(example.region.parsed), example.region.start)
        blocks.append(Block(example.document.text.count("\n", 0, start) + 1, source))
    return blocks


@dataclass
class Module:
    page: Path
    path: Path
    lines: list[tuple[int, int, int]]  # (module line, page line, length) of each block

    def page_line(self, line: int) -> str:
        for at, page_line, length in self.lines:
            if at <= line < at + length:
                return f"{self.page.relative_to(ROOT)}:{page_line + line - at}"
        return f"{self.page.relative_to(ROOT)} (module line {line})"


def write_modules(out: Path) -> list[Module]:
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("page_*.py"):
        old.unlink()
    modules = []
    for page in PAGES:
        blocks = python_blocks(page)
        if not blocks:
            continue
        text, lines = "", []
        for b in blocks:
            text += f"# --- {page.name}:{b.line}\n"
            at = text.count("\n") + 1
            text += b.source.rstrip("\n") + "\n"
            lines.append((at, b.line, b.source.rstrip("\n").count("\n") + 1))
        name = "page_" + re.sub(r"\W", "_", str(page.relative_to(ROOT).with_suffix("")))
        path = out / f"{name}.py"
        path.write_text(text)
        modules.append(Module(page, path, lines))
    return modules


_UNRESOLVED = re.compile(r'(?:Cannot find implementation or library stub for module named|'
                         r'Import) "(?P<mod>[\w.]+)"(?: could not be resolved)?')


def _allowed(message: str) -> bool:
    """An unresolved import of an optional framework that this env does not have."""
    m = _UNRESOLVED.search(message)
    if m is None:
        return False
    top = m["mod"].split(".")[0]
    return top in PAGE_PACKAGES or (top in OPTIONAL and importlib.util.find_spec(top) is None)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    env.pop("VIRTUAL_ENV", None)
    env["PYRIGHT_PYTHON_IGNORE_WARNINGS"] = "1"  # (else pyright's wrapper asks PyPI for news)
    return env


def run_mypy(files: list[Path], cwd: Path) -> list[tuple[Path, int, str]]:
    """``mypy --strict`` on ``files`` from ``cwd`` (outside the repository): its errors."""
    config = cwd / "mypy.ini"
    config.write_text("[mypy]\nstrict = True\nallow_redefinition = True\n"
                      "show_error_codes = True\nuntyped_calls_exclude = jax,torch\n"
                      "disable_error_code = no-redef\n")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config), "--cache-dir",
         str(WORK / "cache"), "--no-error-summary", "--show-absolute-path",
         *map(str, files)],
        cwd=cwd, capture_output=True, text=True, env=_env(), timeout=900, check=False)
    if proc.returncode not in (0, 1) or proc.stderr.strip():
        raise AssertionError(f"mypy failed to run ({proc.returncode}): {proc.stderr}{proc.stdout}")
    out = []
    for line in proc.stdout.splitlines():
        m = re.match(r"(?P<file>[^:]+):(?P<line>\d+): (?P<sev>error|note): (?P<msg>.*)", line)
        if m and m["sev"] == "error":
            out.append((Path(m["file"]), int(m["line"]), m["msg"]))
        elif m is None and line.strip():
            raise AssertionError(f"unexpected mypy output: {line}")
    return out


def run_pyright(files: list[Path], cwd: Path) -> list[tuple[Path, int, str]]:
    """pyright on ``files`` from ``cwd``, with this interpreter's environment: its errors."""
    import json

    config = cwd / "pyrightconfig.json"
    config.write_text(json.dumps({"reportRedeclaration": False}))
    proc = subprocess.run(
        [sys.executable, "-m", "pyright", "--outputjson", "--project", str(config),
         "--pythonpath", sys.executable, *map(str, files)],
        cwd=cwd, capture_output=True, text=True, env=_env(), timeout=900, check=False)
    try:
        report = json.loads(proc.stdout[proc.stdout.index("{"):])
    except ValueError as exc:
        raise AssertionError(f"pyright failed to run ({proc.returncode}): "
                             f"{proc.stderr}{proc.stdout}") from exc
    return [(Path(d["file"]), d["range"]["start"]["line"] + 1, f'{d["message"]} [{d.get("rule")}]')
            for d in report["generalDiagnostics"] if d["severity"] == "error"]


#: What a checker still reports on a page, each with why: (checker, page) -> {message part: why}.
#: Each must still be reported (a fixed one fails the test, to be removed from here). Empty: the
#: last two went when ``Option`` became generic and multimodal.md annotated its batch rows.
KNOWN: dict[tuple[str, str], dict[str, str]] = {}

CHECKERS = {"mypy": run_mypy, "pyright": run_pyright}


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """checker -> {page: its errors, as "line: message"} (each checker run once, on every page)."""
    _require("sybil")
    tmp = tmp_path_factory.mktemp("typing_docs")
    modules = write_modules(WORK / "pages")  # (a stable place: mypy's cache keeps their paths)
    done: dict[str, dict[str, list[str]]] = {}

    def report(checker: str) -> dict[str, list[str]]:
        if checker not in done:
            _require(checker)
            by_name = {m.path.name: m for m in modules}  # (by name: mypy's cache may replay an
            # error with the path a module had when it was cached)
            out: dict[str, list[str]] = {str(m.page.relative_to(ROOT)): [] for m in modules}
            for f, n, msg in CHECKERS[checker]([m.path for m in modules], tmp):
                module = by_name.get(f.name)
                assert module is not None, f"{checker} on {f}:{n}: {msg}"
                if not _allowed(msg):
                    out[str(module.page.relative_to(ROOT))].append(f"{module.page_line(n)}: {msg}")
            done[checker] = out
        return done[checker]

    return report


def _page_ids() -> list[str]:
    return [str(p.relative_to(ROOT)) for p in PAGES]


@pytest.mark.parametrize("page", _page_ids())
@pytest.mark.parametrize("checker", sorted(CHECKERS))
def test_doc_examples_type_check(checker: str, page: str, reports: Any) -> None:
    errors = reports(checker).get(page, [])
    known = KNOWN.get((checker, page), {})
    unexplained = [e for e in errors if not any(part in e for part in known)]
    fixed = [part for part in known if not any(part in e for e in errors)]
    assert not unexplained, f"{checker} on {page}'s examples:\n" + "\n".join(unexplained)
    assert not fixed, f"{checker} no longer reports these on {page}: remove them from KNOWN: {fixed}"


EXAMPLE = """\
import peregistry as per

reveal_type(per.get_encoder("rotary", dim=8))
reveal_type(per.get_encoder("my-rope", per.RotaryEncoder, dim=8))
reveal_type(per.get_encoder("rotary", dim=8).dim)
reveal_type(per.get_encoder("rotary", dim=8).rotary_dim)
"""


@pytest.mark.parametrize("checker", sorted(CHECKERS))
def test_installed_package_is_typed_outside_the_repository(checker: str, tmp_path: Path) -> None:
    """The installed peregistry (an editable install in tox) is found with no MYPYPATH, from a
    directory outside the repository, and ``get_encoder`` and the options have their precise types."""
    _require(checker)
    path = tmp_path / "user_code.py"
    path.write_text(EXAMPLE)
    notes = subprocess.run(
        [sys.executable, "-m", checker, *(["--pythonpath", sys.executable] if checker == "pyright"
                                          else ["--strict", "--no-error-summary"]), str(path)],
        cwd=tmp_path, capture_output=True, text=True, env=_env(), timeout=600, check=False).stdout
    revealed = re.findall(r'(?:Revealed type|Type of .*) is "([\w. |]+)"$', notes, re.MULTILINE)
    # an option's attribute has its declared type (per.Option is generic), None if nullable
    assert [r.rpartition(".")[2] for r in revealed] == ["Rotary", "RotaryEncoder", "int",
                                                        "int | None"], notes
    assert "error" not in notes.replace("0 errors", ""), notes
