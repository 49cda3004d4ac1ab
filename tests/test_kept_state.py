"""What peregistry keeps between calls (issue 44): every fact is listed in docs/architecture.md
("What is kept between calls") with its key, bound and what empties it.

* each memo is filled by an ordinary call, then emptied by ``peregistry.rope.clear_caches()`` or
  by the registration that changes it (``register``/``unregister``);
* no verdict is kept by class (``_jax_eager.declares`` is asked anew);
* a guard: an AST scan of ``peregistry/`` fails when a module-level or class-level mutable
  container, an ``lru_cache``/``cache`` decorator or a ``global`` statement appears that is
  neither a kept fact of the docs table (:data:`KEPT`) nor a constant table (:data:`CONSTANT`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import peregistry as per
from peregistry import _jax_eager
from peregistry.encoders.rotary import Rotary
from peregistry.kinds import base as kinds_base
from peregistry.rope import _kernels, _tables, clear_caches

ROOT = Path(per.__file__).parent
DOCS = ROOT.parent / "docs" / "architecture.md"

#: Kept facts: (file under peregistry/, name) -> the name the docs table gives them by. Each
#: must appear, with its file, in one row of docs/architecture.md's table.
KEPT = {
    ("_jax_eager.py", "_jitted"): "_jitted",
    ("_jax_eager.py", "untraceable"): "untraceable",
    ("kinds/base.py", "_DTYPE_KINDS"): "_DTYPE_KINDS",
    ("backends/builtin.py", "_BUILTIN"): "_BUILTIN",
    ("backends/_torch.py", "global _probe"): "_probe",
    ("rope/_kernels.py", "global ACTIVE"): "ACTIVE",
    ("rope/_kernels.py", "_GENERATION"): "_GENERATION",
    ("kinds/_services.py", "global _default"): "_default",
    ("hf_config/_conventions.py", "_TABLE"): "_TABLE",
    # class attributes derived when a class is made (one row of the table)
    ("kinds/_declaration.py", "Declared._option_specs"): "_option_specs",
    ("kinds/_declaration.py", "Declared._defaults"): "_defaults",
    ("rope/scalings/base.py", "RopeScaling.parameters"): "parameters",
}
#: The ``parameters`` each built-in scaling type declares in its class body (named by
#: ``RopeScaling.__init_subclass__``, like the row above).
SCALING_PARAMETERS = {f"rope/scalings/{m}.py": f"{c}.parameters" for m, c in (
    ("dynamic", "Dynamic"), ("linear", "Linear"), ("llama3", "Llama3"), ("longrope", "LongRope"),
    ("proportional", "Proportional"), ("yarn", "Yarn"), ("ntk", "NTK"), ("grok1", "Grok1"),
    ("telechat3", "TeleChat3Yarn"), ("deepseek_yarn", "DeepseekYarn"), ("axial", "Axial"))}

#: Tables filled when their module is imported and never written afterwards.
CONSTANT = {
    ("_jax_eager.py", "EAGER_OPTIONS"),
    ("_loading.py", "_TRUE"),
    ("_options.py", "EXAMPLE_CANDIDATES"),
    ("_options.py", "_TYPE_SYNTAX"),
    ("_options.py", "_TYPE_WORDS"),
    ("_options.py", "_ITEM_WORDS"),
    ("_option_words.py", "PARSERS"),
    ("bench/_cases.py", "BENCHMARKS"),
    ("bench/_compiled.py", "BENCH_ROTATIONS"),
    ("cli/_main.py", "COMMANDS"),
    ("cli/_show.py", "SHOW_BY_KIND"),
    ("kinds/_declaration.py", "PUBLIC"),
    ("kinds/context.py", "_HOOK_ARGUMENTS"),
    ("hf_config/_conventions.py", "_KEYS"),
    ("hf_config/_conventions.py", "_INTERLEAVED"),
    ("hf_config/_conventions.py", "_PHI3"),
    ("hf_config/_conventions.py", "_LLAMA4"),
    ("hf_config/_conventions.py", "_CHECKS"),
    ("multimodal/rules.py", "DEFAULT_TOKENS_PER_SECOND"),
    ("plot.py", "PLOTS"),
    ("plot.py", "PLOT_KINDS_BY_KIND"),
    ("rope/scalings/base.py", "_MOVED_KEYS"),
    ("study/_run.py", "EXCLUDED"),
    ("testing/_core.py", "EPS"),
    ("testing/_core.py", "_CHECKS"),
    ("testing/_core.py", "KIND_LAWS"),
    ("testing/_drivers.py", "DRIVERS"),
    ("testing/kernels.py", "_CHECKS"),
    ("testing/kernels.py", "_SHAPES"),
    # a Bench object's own lazily computed attributes (one benchmark run), not the process's
    ("bench/_cases.py", "Bench.xp @cached_property"),
    ("bench/_cases.py", "Bench.float32 @cached_property"),
    ("bench/_cases.py", "Bench.default_float @cached_property"),
    ("bench/_cases.py", "Bench.index_dtype @cached_property"),
}

_CONTAINER_CALLS = {"dict", "set", "list", "defaultdict", "OrderedDict", "WeakKeyDictionary",
                    "WeakValueDictionary", "WeakSet", "deque", "Counter", "ChainMap"}
_CONTAINERS = (ast.Dict, ast.Set, ast.List, ast.DictComp, ast.SetComp, ast.ListComp)


def _is_container(value: ast.expr | None) -> bool:
    if isinstance(value, _CONTAINERS):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        return name in _CONTAINER_CALLS
    return False


def _scan(tree: ast.Module) -> Iterator[str]:
    """The module's (and its classes') mutable containers, cache decorators and globals."""
    def body(stmts: list[ast.stmt], prefix: str) -> Iterator[str]:
        for node in stmts:
            if isinstance(node, ast.Assign | ast.AnnAssign) and _is_container(node.value):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    name = ast.unparse(t)
                    if name != "__all__":
                        yield prefix + name
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for d in node.decorator_list:
                    text = ast.unparse(d)
                    if "cache" in text:
                        yield f"{prefix}{node.name} @{text}"
            elif isinstance(node, ast.ClassDef):
                yield from body(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.If | ast.Try):  # (module-level conditionals)
                yield from body(node.body, prefix)
    yield from body(tree.body, "")
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            yield from (f"global {n}" for n in node.names)


def _found() -> set[tuple[str, str]]:
    found = set()
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        found |= {(rel, item) for item in _scan(ast.parse(path.read_text(encoding="utf-8")))}
    return found


def test_every_module_level_mutable_is_a_documented_fact_or_a_constant() -> None:
    allowed = set(KEPT) | CONSTANT | set(SCALING_PARAMETERS.items())
    new = sorted(f"peregistry/{p}: {item}" for p, item in _found() - allowed)
    assert not new, (
        "module-level or class-level state not on the list of what is kept between calls: "
        + "; ".join(new) + ". Keep it in rope._tables.STORE, or bound it, empty it in "
        "peregistry.rope.clear_caches() and add a row to docs/architecture.md ('What is kept "
        "between calls') and to KEPT here; a table never written after import goes to CONSTANT")
    gone = sorted(f"peregistry/{p}: {item}" for p, item in allowed - _found())
    assert not gone, "listed but no longer found (drop them from the lists and the docs): " + \
        "; ".join(gone)


def _docs_rows() -> list[str]:
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## What is kept between calls", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| ")]


def test_every_kept_fact_has_a_row_with_key_bound_and_emptier() -> None:
    rows = _docs_rows()
    for (path, _), name in KEPT.items():
        assert any(f"`{path}`" in row or path in row for row in rows if f"`{name}`" in row), (
            f"docs/architecture.md's table has no row naming {name} of peregistry/{path}")
    for row in rows[2:]:  # (header, separator)
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        assert len(cells) == 5 and all(cells), f"a row without what, where, key, bound or emptier: {row}"


# -- each memo, filled and emptied ---------------------------------------------------------------

def _rotate_numpy() -> None:
    enc = per.get_encoder("rotary", dim=8)
    enc.rotate(np.ones((3, 8)))
    per.get_encoder("sinusoidal", dim=8).encode(np.arange(4))


def test_clear_caches_empties_every_memo_numpy() -> None:
    _rotate_numpy()
    reg = per.default_registry
    numpy_backend = reg.backend("numpy")
    assert _tables.STORE.nbytes > 0
    assert reg.backend_by_type
    assert kinds_base._DTYPE_KINDS
    assert "_ctx" in numpy_backend.__dict__
    assert _kernels.ACTIVE is not None
    clear_caches()
    assert _tables.STORE.nbytes == 0
    assert reg.backend_by_type == {}
    assert kinds_base._DTYPE_KINDS == {}
    assert "_ctx" not in numpy_backend.__dict__
    assert _kernels.ACTIVE is None
    assert _jax_eager._jitted == {} and not _jax_eager.untraceable
    _rotate_numpy()  # made again on next use
    assert reg.backend_by_type and "_ctx" in numpy_backend.__dict__


def test_clear_caches_empties_torch_memos() -> None:
    torch = pytest.importorskip("torch")
    from peregistry.backends import _torch

    per.get_encoder("rotary", dim=8).rotate(torch.ones(3, 8))
    adapter = per.default_registry.backend("torch")
    assert "_cpu_ctx" in adapter.__dict__ and _torch._probe is not None
    clear_caches()
    assert "_cpu_ctx" not in adapter.__dict__ and _torch._probe is None
    per.get_encoder("rotary", dim=8).rotate(torch.ones(3, 8))
    assert "_cpu_ctx" in adapter.__dict__


class _ReadsValues(Rotary):
    """A rotary family that declares its hook compilable but reads a value in it."""

    name = "test-kept-reads-values"
    _compile_hook_eagerly = True

    def _half_cos_sin(self, positions: Any, *, ctx: Any, seq_len: int | None) -> tuple[Any, Any]:
        if float(ctx.xp.max(positions)) > 1e9:  # a value read: no trace
            raise ValueError("too far")
        return super()._half_cos_sin(positions, ctx=ctx, seq_len=seq_len)


def test_clear_caches_empties_jax_memos() -> None:
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.ones((2, 5, 8), jnp.float32)
    per.get_encoder("rotary", dim=8).rotate(x, jnp.arange(5) + 3)
    _ReadsValues(dim=8).rotate(x, jnp.arange(5) + 3)
    adapter = per.default_registry.backend("jax")
    assert _jax_eager._jitted and (_ReadsValues, "_half_cos_sin") in _jax_eager.untraceable
    clear_caches()
    assert _jax_eager._jitted == {} and not _jax_eager.untraceable
    assert "_first" not in adapter.__dict__


def test_untraceable_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    jnp = pytest.importorskip("jax.numpy")
    monkeypatch.setattr(_jax_eager, "UNTRACEABLE_LIMIT", 1)
    _jax_eager.untraceable.add((int, "_other"))
    _ReadsValues(dim=8).rotate(jnp.ones((2, 5, 8), jnp.float32), jnp.arange(5))
    assert _jax_eager.untraceable == {(_ReadsValues, "_half_cos_sin")}
    clear_caches()


def test_no_verdict_is_kept_by_class() -> None:
    class Hooked:
        _compile_hook_eagerly = True

        def _hook(self) -> None: ...

    assert _jax_eager.declares(Hooked, "_hook")
    Hooked._compile_hook_eagerly = False  # asked anew: the change is seen
    assert not _jax_eager.declares(Hooked, "_hook")
    assert not hasattr(_jax_eager, "_declared")


class _Kept(per.AbsoluteEncoder):
    """An encoder registered for a moment."""

    name = "test-kept-plugin"
    dim = per.Option(int, 4)

    def _encode(self, positions: Any, *, ctx: Any) -> Any:
        return ctx.xp.zeros((*positions.shape, self._values["dim"]), dtype=ctx.wide)


def test_register_and_unregister_empty_what_a_plugin_changes() -> None:
    reg = per.default_registry
    for change in (lambda: reg.register(_Kept), lambda: reg.unregister("_Kept")):
        _rotate_numpy()
        assert reg._snapshot is not None and reg.backend_by_type and _kernels.ACTIVE is not None
        change()
        assert reg._snapshot is None and reg.backend_by_type == {} and _kernels.ACTIVE is None
    assert "test-kept-plugin" not in {e.name for e in reg.list_encoders()}


def test_the_docs_list_names_every_emptier_that_exists() -> None:
    # the functions and methods the table names as emptiers
    text = "\n".join(_docs_rows())
    for name in re.findall(r"`(\w+)\(", text):
        assert name in {"clear_caches", "register", "unregister", "unregister_model_conventions",
                        "unpatch", "patch", "patched"}, name
    from peregistry.hf_config import _conventions

    assert callable(_conventions.unregister_model_conventions)
