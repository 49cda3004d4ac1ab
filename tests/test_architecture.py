"""The house rules of docs/architecture.md, checked on the source: no import circles inside
``peregistry`` (imports under ``if TYPE_CHECKING:`` aside, as they never run), no module over 450
lines, no function over 80, and nothing rotary in the backend adapters (they hold only what the
Array API standard lacks; the rotary fast paths live behind ``peregistry/rope/_delegation.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "peregistry"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _runtime_imports(tree: ast.Module, name: str, is_package: bool, known: set[str]) -> set[str]:
    """Modules of ``peregistry`` that ``name`` imports when it runs (function bodies included,
    ``if TYPE_CHECKING:`` blocks excluded)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for b in node.body for n in ast.walk(b))
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                root = ".".join(base + ([node.module] if node.module else []))
            else:
                root = node.module or ""
            targets = [root] + [f"{root}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            # A package's __init__ re-exporting its own children is not a circle of design.
            if t and t != name and not (is_package and t.startswith(name + ".")):
                found.add(t)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles() -> None:
    mods = _modules()
    known = set(mods)
    graph = {m: _runtime_imports(ast.parse(p.read_text()), m, p.name == "__init__.py", known)
             for m, p in mods.items()}
    assert _cycles(graph) == []


def test_the_checker_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import b\n"
                     "def f():\n    from .c import x\n")
    assert _runtime_imports(tree, "p.a", False, {"p", "p.a", "p.b", "p.c"}) == {"p.c"}


@pytest.mark.parametrize("name", sorted(_modules()))
def test_module_and_function_sizes(name: str) -> None:
    path = _modules()[name]
    source = path.read_text()
    lines = len(source.splitlines())
    assert lines <= MAX_MODULE_LINES, f"{name} has {lines} lines, over {MAX_MODULE_LINES}"
    long = [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{name}: functions over {MAX_FUNCTION_LINES} lines: {', '.join(long)}"


def test_backend_adapters_know_nothing_rotary() -> None:
    found = []
    for path in sorted((PACKAGE / "backends").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            name = getattr(node, "name", None) or getattr(node, "id", None) or getattr(
                node, "attr", None)
            if isinstance(name, str) and ("rotar" in name.lower() or "rotat" in name.lower()):
                found.append(f"{path.name}:{name}")
    assert not found, f"rotary names in backends/: {sorted(set(found))}"
