"""The house rules of docs/architecture.md, checked on the source: no import circles inside
``peregistry``, of modules or of packages, type-only imports included (they tie two files together
for the reader); the layers below the registry (foundations, kinds, engine, families) import only
downwards; no module over 450 lines, no function over 80, and nothing rotary in the backend
adapters (they hold only what the Array API standard lacks; the rotary fast paths live behind
``peregistry/rope/_delegation.py``)."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.backend_free  # reads the source only

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


#: The layers below the registry, lowest first: a module of a layer imports ``peregistry``
#: modules of its own layer or lower ones only (type-only imports included). Everything else
#: (the registry, the suite, the tools, the integrations) sits above and may import them all.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("foundations", frozenset({"peregistry.errors", "peregistry._options", "peregistry._markers",
                               "peregistry._option_words", "peregistry._namespaces", "peregistry._records",
                               "peregistry._jax_eager", "peregistry.backends"})),
    ("kinds", frozenset({"peregistry.kinds"})),
    ("engine", frozenset({"peregistry.rope"})),
    ("families", frozenset({"peregistry.encoders"})),
)


def _package(module: str) -> str:
    """``peregistry.rope._tables`` -> ``peregistry.rope``; a top-level module is its own."""
    return ".".join(module.split(".")[:2])


def _layer(module: str) -> int | None:
    package = _package(module)
    return next((i for i, (_, members) in enumerate(LAYERS) if package in members), None)


def _runtime_imports(tree: ast.Module, name: str, is_package: bool, known: set[str],
                     *, type_only: bool = False) -> set[str]:
    """Modules of ``peregistry`` that ``name`` imports when it runs (function bodies included,
    ``if TYPE_CHECKING:`` blocks excluded unless ``type_only``)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if not type_only and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(
                node.test):
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


def _graph(*, type_only: bool) -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {m: _runtime_imports(ast.parse(p.read_text()), m, p.name == "__init__.py", known,
                                type_only=type_only)
            for m, p in mods.items()}


@pytest.mark.parametrize("type_only", [False, True], ids=["runtime", "type-only-included"])
def test_no_import_circles(type_only: bool) -> None:
    assert _cycles(_graph(type_only=type_only)) == []


def test_no_package_circles() -> None:
    """Packages (``peregistry.rope``, ``peregistry.kinds``, ...; a top-level module is its own)
    import each other without a circle; ``peregistry`` itself, the face, re-exports them all."""
    packages: dict[str, set[str]] = {}
    for module, targets in _graph(type_only=True).items():
        if module == "peregistry":
            continue
        packages.setdefault(_package(module), set()).update(
            _package(t) for t in targets if _package(t) not in (_package(module), "peregistry"))
    assert _cycles(packages) == []


def test_layers_import_downwards() -> None:
    """Kinds below the engine below the families, none of them importing the registry: an
    encoder module asks ``enc.services`` instead (docs/architecture.md)."""
    wrong = []
    for module, targets in _graph(type_only=True).items():
        layer = _layer(module)
        if layer is None:
            continue
        for t in sorted(targets):
            there = _layer(t)
            if there is None or there > layer:
                wrong.append(f"{module} ({LAYERS[layer][0]}) imports {t} "
                             f"({'above the layers' if there is None else LAYERS[there][0]})")
    assert not wrong, "\n".join(wrong)


def test_the_layer_check_sees_an_upward_import() -> None:
    assert _layer("peregistry.kinds.base") == 1 and _layer("peregistry.rope.encoder") == 2
    assert _layer("peregistry.registry") is None
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from ..rope.encoder import RotaryEncoder\n")
    known = {"peregistry", "peregistry.kinds", "peregistry.kinds.base", "peregistry.rope",
             "peregistry.rope.encoder"}
    assert _runtime_imports(tree, "peregistry.kinds.base", False, known) == set()
    assert _runtime_imports(tree, "peregistry.kinds.base", False, known,
                            type_only=True) == {"peregistry.rope.encoder"}


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


# -- the walk of a call: docs/architecture.md and docs/benchmarks.md show bench_walk.py's table --

WALK_HEADER = "| call | functions, files, moves, most entries of a file | limit | |"


def _bench_walk() -> Any:
    path = PACKAGE.parent / "benchmarks" / "bench_walk.py"
    spec = importlib.util.spec_from_file_location("bench_walk", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _walk_rows(doc: str) -> dict[str, list[str]]:
    text = (PACKAGE.parent / "docs" / doc).read_text(encoding="utf-8")
    assert WALK_HEADER in text, f"docs/{doc} has no table of bench_walk.py --markdown"
    lines = text.split(WALK_HEADER, 1)[1].splitlines()[2:]
    rows: dict[str, list[str]] = {}
    for line in lines:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.parametrize("doc", ["architecture.md", "benchmarks.md"])
def test_the_docs_walk_table_is_the_scripts(doc: str) -> None:
    """The docs' table is ``bench_walk.py --markdown``'s: its calls, in its format, with the
    script's limits (the figures are measured: they are checked for their form only)."""
    bench = _bench_walk()
    rows = _walk_rows(doc)
    assert list(rows) == list(bench.LIMITS), f"docs/{doc}: the walk table's calls"
    for label, (figures, limit, verdict) in rows.items():
        assert re.fullmatch(r"\d+, \d+, \d+, \d+", figures), f"docs/{doc}: {label}: {figures}"
        assert limit == bench.LIMITS[label].describe(), f"docs/{doc}: {label}'s limit"
        assert verdict in ("ok", "MISSED"), f"docs/{doc}: {label}: {verdict}"


def test_the_walk_table_is_made_by_the_script() -> None:
    bench = _bench_walk()
    label = next(iter(bench.LIMITS))
    limit = bench.LIMITS[label]
    walks = {label: bench.Walk(["f"] * limit.functions, ["a.py"], 0, 1)}
    table = bench.markdown(walks).splitlines()
    assert table[0] == WALK_HEADER
    assert table[2] == f"| {label} | {limit.functions}, 1, 0, 1 | {limit.describe()} | ok |"
    walks = {label: bench.Walk(["f"] * (limit.functions + 1), ["a.py"], 0, 1)}
    assert bench.markdown(walks).endswith("| MISSED |")
