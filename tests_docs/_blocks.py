"""The code blocks of README.md and docs/*.md, parsed by Sybil, and what each needs to run.

Parsers (Sybil's Markdown ones, and small evaluators of ours on its lexers):

- ```` ```python ```` blocks run in order in one namespace per page (a reader follows a page top
  to bottom); ``>>>`` blocks (and ```` ```pycon ```` ones) are doctests. A fenced block with no
  language (or ``text``) that follows a python block with only blank lines between is that
  block's output: the block runs as a REPL would (its printed output, then the repr of a last
  bare expression) and must print it (doctest's comparison, ``...`` and whitespace normalised).
- A python block that starts by setting ``XLA_FLAGS`` (``import os`` then
  ``os.environ["XLA_FLAGS"] = ...``: JAX reads the flag once, as it starts) is a whole script: it
  runs alone in a fresh interpreter.
- ```` ```bash ```` and ```` ```console ```` blocks run too, each command through bash with this
  interpreter's ``bin`` first on ``PATH``; a ``console`` block's commands are its ``$ `` lines,
  its other lines their expected output. The rule for shell blocks: a block runs when its
  commands are cheap and safe, i.e. read the installed package and write only into the working
  directory (``peregistry show/list/plot``, ``python docs/...``: a path under ``docs/`` is the
  repository's); a block that installs, builds, publishes, benchmarks, trains or runs a test
  suite is marked ``<!-- skip: next "why" -->``. A fence in another language is only shown
  (``text``, ``toml``, none: output, diagrams, config files); any other language is an error
  (``test_every_fence_is_run_or_shown``), so that no command hides in a ``sh`` block.
- Every block of a page runs in one working directory (a temporary one per page): a block may
  write the ``config.json`` that a later python or shell block reads.
- ``<!-- skip: next "why" -->`` marks a block that does not run as written (a deliberate fragment,
  a download, minutes of work); ``<!-- invisible-code-block: python -->`` holds setup a page hides
  (the arrays a sketch takes as given).

Each block has a *home*: the most specific framework it names (an import, or a name such as
``torch``, ``jnp``, ``nnx``, ``keras``), ``numpy`` when it names none; hidden setup shares the
home of the block after it. The tox env that lists a home in ``PEREGISTRY_DOCS_HOMES`` runs its
blocks, after the page's ``numpy`` blocks before them (which a later block may build on, as a
reader's session would).
"""

from __future__ import annotations

import ast
import contextlib
import doctest
import io
import os
import re
import shlex
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sybil import Document, Example, Region, Sybil
from sybil.evaluators.python import PythonEvaluator, pad
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

#: name a block uses or imports -> the distribution it needs.
FRAMEWORK_OF = {
    "torch": "torch", "jax": "jax", "jnp": "jax", "flax": "flax", "nnx": "flax", "keras": "keras",
    "transformers": "transformers", "array_api_strict": "array_api_strict",
    "matplotlib": "matplotlib", "plt": "matplotlib",
}
#: fence languages: run, or shown only (``text``, ``toml``, none: output and diagrams; ``{toctree}``
#: and the like: MyST directives). Any other is an error: a block nothing would run.
RUN_LANGUAGES = frozenset({"python", "pycon", "bash", "console"})
SHOWN_LANGUAGES = frozenset({"", "text", "toml"})
#: homes, most specific first: a block naming flax and jax runs in the flax env.
HOMES = ("keras", "flax", "transformers", "matplotlib", "array_api_strict", "jax", "torch", "numpy")
#: a shell word -> the framework it needs (``--backend torch``); a word starting ``plot`` needs matplotlib.
SHELL_FRAMEWORK = {"torch": "torch", "jax": "jax"}
OUTPUT_FENCE = re.compile(r"[ \t]*\n(?:[ \t]*\n)*(?P<fence>`{3,})(?:text)?[ \t]*\n(?P<want>.*?)^(?P=fence)[ \t]*$",
                          re.S | re.M)


def _repl(source: str, namespace: dict[str, Any], path: str, line: int) -> str:
    """Run ``source`` as the interactive interpreter would; what it prints."""
    tree = ast.parse(pad(source, line), path)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(tree, path, "exec"), namespace)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), path, "eval"), namespace)
            if value is not None:
                print(repr(value))
    return out.getvalue()


class OutputEvaluator:
    """A python block with the output the page shows after it."""

    def __init__(self, want: str) -> None:
        self.want = want

    def __call__(self, example: Example) -> str | None:
        got = _repl(example.parsed, example.namespace, example.path, example.line)
        example.namespace.pop("__builtins__", None)
        if doctest.OutputChecker().check_output(self.want, got, FLAGS):
            return None
        return f"the page shows:\n{self.want}\nthe block printed:\n{got}"


def _run_script(example: Example) -> str | None:
    """A block that sets ``XLA_FLAGS`` first (JAX reads it once, as it starts) is a whole
    script: it runs as one, in a fresh interpreter, in a temporary directory."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    with tempfile.TemporaryDirectory() as cwd:
        script = Path(cwd) / "block.py"
        script.write_text(str(example.parsed))
        done = subprocess.run([sys.executable, str(script)], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=600, check=False)
    if done.returncode != 0:
        return f"the script exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return None


SCRIPT = re.compile(r"import os\nos\.environ\[\"XLA_FLAGS\"\]")


class PythonBlocks(PythonCodeBlockParser):
    """Sybil's python parser; a block followed by an output block gets that output checked."""

    def __init__(self) -> None:
        super().__init__(doctest_optionflags=FLAGS)

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in super().__call__(document):
            m = OUTPUT_FENCE.match(document.text, region.end)
            is_code = not isinstance(region.parsed, doctest.Example)
            fenced = document.text[region.start:region.end].startswith("```")
            if is_code and SCRIPT.match(str(region.parsed)):
                region.evaluator = _run_script
            elif m is not None and is_code and fenced:
                region.evaluator = OutputEvaluator(m.group("want"))
            yield region


class PyconBlocks(PythonCodeBlockParser):
    """```` ```pycon ```` blocks: interactive sessions, run as doctests."""

    def __init__(self) -> None:
        super().__init__(doctest_optionflags=FLAGS)
        self.codeblock_parser = CodeBlockParser("pycon", PythonEvaluator())


def _run_shell(example: Example) -> str | None:
    """Run a bash/console block's commands in the page's working directory (the test's); check
    a console block's output."""
    language = example.region.lexemes["arguments"]
    commands: list[tuple[str, str]] = []
    for raw in str(example.parsed).splitlines():
        if language == "console":
            if raw.startswith("$ "):
                commands.append((raw[2:], ""))
            elif commands:
                commands[-1] = (commands[-1][0], commands[-1][1] + raw + "\n")
        elif raw.strip() and not raw.lstrip().startswith("#"):
            commands.append((raw, ""))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for command, want in commands:
        command = command.replace(" docs/", f" {shlex.quote(str(ROOT))}/docs/")  # the page's own files
        done = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True,
                              timeout=600, check=False)
        if done.returncode != 0:
            return f"`{command}` exited {done.returncode}:\n{done.stdout}{done.stderr}"
        if want and not doctest.OutputChecker().check_output(want, done.stdout, FLAGS):
            return f"`{command}`: the page shows:\n{want}\nit printed:\n{done.stdout}"
    return None


def sybil() -> Sybil:
    """The Sybil that parses the pages."""
    return Sybil(
        parsers=[PythonBlocks(), PyconBlocks(), CodeBlockParser("bash", _run_shell),
                 CodeBlockParser("console", _run_shell), SkipParser()],
        path=str(ROOT), patterns=["*.md", "docs/*.md"],
    )


def source_of(example: Example) -> str:
    """The code of a block (a doctest's source, a code block's text)."""
    parsed = example.parsed
    return parsed.source if isinstance(parsed, doctest.Example) else str(parsed)


def is_skip_directive(example: Example) -> bool:
    return isinstance(example.parsed, tuple)


def frameworks(example: Example) -> frozenset[str]:
    """The distributions a block names (beyond numpy and peregistry)."""
    if is_skip_directive(example):
        return frozenset()
    code = source_of(example)
    if example.region.lexemes.get("arguments") in ("bash", "console"):
        code = re.sub(r"#.*", "", code)
        words = re.findall(r"[\w.-]+", code)
        found = {SHELL_FRAMEWORK[w] for w in words if w in SHELL_FRAMEWORK}
        return frozenset(found | ({"matplotlib"} if re.search(r"\bplot", code) else set()))
    try:
        tree = ast.parse(textwrap.dedent(code))
    except SyntaxError:
        return frozenset()  # the run reports it
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
            if node.module.startswith("peregistry"):  # peregistry.flax, ...integrations import transformers
                names.update(node.module.split(".")[1:])
                names.update(a.name for a in node.names)
    return frozenset(FRAMEWORK_OF[n] for n in names if n in FRAMEWORK_OF)


def home(needs: frozenset[str]) -> str:
    return next((h for h in HOMES if h in needs), "numpy")
