"""Startup (issue 17): what ``import peregistry; get_encoder('rotary', dim=64)`` loads in a fresh
interpreter, that the encoder it gives works there, and that the shortcuts taken for speed answer
as the code they stand in for (pluggy's hookimpl parsing). The time itself is measured by
``benchmarks/bench_startup.py`` (a ratio against ``import numpy``), not asserted here: the
machine is shared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from typing import Any

import pluggy
import pytest
from conftest import BACKENDS

import peregistry as per
from peregistry import _hooks
from peregistry._entry_points import entry_points
from peregistry._loading import PluginManager

FRAMEWORKS = ("numpy", "torch", "jax", "array_api_strict", "transformers", "flax", "keras")
#: Modules that peregistry's startup need not import: importlib.metadata (and email, zipfile
#: behind it) for the entry points of the usual layout; json (command-line option parsing) and
#: difflib (close-match hints in errors) until used.
NOT_AT_STARTUP = ("importlib.metadata", "email", "zipfile", "json", "difflib")


def fresh(code: str, env: dict[str, str] | None = None) -> Any:
    """Run ``code`` in a new interpreter; it prints one JSON value, which is returned."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False, timeout=600, env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_rotary_encoder_at_startup_loads_numpy_only_and_no_metadata_machinery() -> None:
    got = fresh(
        "import sys, peregistry\n"
        f"before = [m for m in {FRAMEWORKS!r} if m in sys.modules]\n"
        "peregistry.get_encoder('rotary', dim=64)\n"
        f"after = [m for m in {FRAMEWORKS!r} if m in sys.modules]\n"
        f"stdlib = [m for m in {NOT_AT_STARTUP!r} if m in sys.modules]\n"
        "import json\n"
        "print(json.dumps([before, after, stdlib]))\n"
    )
    before, after, stdlib = got
    assert before == []
    assert after == ["numpy"]  # host frequencies (np.power): the golden bits depend on it
    assert stdlib == []


def test_rotary_rotate_on_numpy_in_a_fresh_interpreter() -> None:
    # The encoder made first thing in a process (nothing imported by earlier tests) rotates
    # like RoFormer's formula in float64 (half layout: pairs (i, i + dim/2)).
    err = fresh(
        "import json, numpy as np, peregistry\n"
        "enc = peregistry.get_encoder('rotary', dim=64)\n"
        "x = np.random.default_rng(0).standard_normal((2, 5, 64))\n"
        "got = enc.rotate(x, offset=3)\n"
        "p = np.arange(3, 8, dtype=np.float64)[:, None]\n"
        "ang = p * 10000.0 ** (-np.arange(32, dtype=np.float64) * 2 / 64)\n"
        "a, b = x[..., :32], x[..., 32:]\n"
        "ref = np.concatenate([a * np.cos(ang) - b * np.sin(ang),\n"
        "                      b * np.cos(ang) + a * np.sin(ang)], axis=-1)\n"
        "print(json.dumps([got.dtype.name, got.shape, float(np.max(np.abs(got - ref)))]))\n"
    )
    dtype, shape, diff = err
    assert dtype == "float64" and shape == [2, 5, 64]
    assert diff <= 64 * 2.0**-52 * 8  # a few ulps of angles up to 7 rad, float64


#: Third-party plugins off: one importing peregistry.plugin (RotaryTables) loads all of it.
NO_THIRD_PARTY = {"PEREGISTRY_DISABLE_PLUGIN_AUTOLOAD": "1"}


def test_rope_exports_its_names() -> None:
    import peregistry.rope as rope
    from peregistry.rope import _apply, _kernels

    assert rope.RotaryTables is _apply.RotaryTables and rope.apply_rotary is _apply.apply_rotary
    assert rope.kernels is _kernels.kernels and rope.kernel_status is _kernels.kernel_status
    star: dict[str, Any] = {}
    exec("from peregistry.rope import *", star)
    assert set(rope.__all__) <= set(star)


@pytest.mark.skipif("torch" not in BACKENDS, reason="torch not selected by PEREGISTRY_BACKENDS")
@pytest.mark.parametrize("torch_first", [True, False])
def test_torch_compile_fullgraph_as_the_first_call(torch_first: bool) -> None:
    # The first rotate of a process traced by TorchDynamo with fullgraph=True, the encoder
    # built before or after `import torch`: the compiled result equals the eager one.
    pytest.importorskip("torch")
    got = fresh(
        "import json, sys\n"
        + ("import torch\n" if torch_first else "")
        + "import peregistry\n"
        "enc = peregistry.get_encoder('rotary', dim=8)\n"
        "import torch\n"
        "f = torch.compile(lambda x: enc.rotate(x, offset=2), fullgraph=True, backend='aot_eager')\n"
        "x = torch.randn(1, 3, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))\n"
        "y = f(x)\n"
        "ref = enc.rotate(x, offset=2)\n"
        "y2 = f(x)\n"
        "print(json.dumps([bool(torch.equal(y, ref)), bool(torch.equal(y2, ref))]))\n",
        env=NO_THIRD_PARTY)
    assert got == [True, True]


def marked_module() -> types.ModuleType:
    """A module plugin with every kind of attribute pluggy looks at."""
    mod = types.ModuleType("pe_marked")

    @per.hookimpl
    def peregistry_encoders() -> list[Any]:
        return []

    @per.hookimpl(specname="peregistry_backends")
    def other_name() -> list[Any]:
        return []

    def plain() -> None:
        pass

    def tricked() -> None:
        pass

    tricked.__func__ = other_name  # type: ignore[attr-defined]  # pluggy reads markers there too

    class Holder:
        @per.hookimpl
        def peregistry_encoders(self) -> list[Any]:
            return []

    mod.__dict__.update(
        peregistry_encoders=peregistry_encoders, other_name=other_name, plain=plain,
        tricked=tricked, a_class=Holder, an_int=3, a_lambda=lambda: None, builtin=len,
        bound=Holder().peregistry_encoders,
        static=staticmethod(per.hookimpl(lambda: [])), klass=classmethod(plain),
    )
    return mod


def test_plugin_manager_parses_hookimpls_as_pluggy_does() -> None:
    ours = PluginManager(_hooks.PROJECT)
    theirs = pluggy.PluginManager(_hooks.PROJECT)
    modules = [marked_module(), _hooks, per]
    modules += [ep.load() for ep in entry_points("peregistry")]
    checked = found = 0
    for mod in modules:
        for name in dir(mod):
            assert ours.parse_hookimpl_opts(mod, name) == theirs.parse_hookimpl_opts(mod, name), \
                (mod.__name__, name)
            checked += 1
            found += theirs.parse_hookimpl_opts(mod, name) is not None
    assert checked > 200 and found >= 8  # each built-in module has its hook


def test_plugin_manager_registers_the_same_hooks() -> None:
    mod = marked_module()
    got = {}
    for cls in (PluginManager, pluggy.PluginManager):
        pm = cls(_hooks.PROJECT)
        pm.add_hookspecs(_hooks)
        pm.register(mod, name="m")
        got[cls] = sorted((h, [i.function.__name__ for i in getattr(pm.hook, h).get_hookimpls()])
                          for h in ("peregistry_encoders", "peregistry_backends",
                                    "peregistry_rope_scalings"))
    assert got[PluginManager] == got[pluggy.PluginManager]
    assert ("peregistry_backends", ["other_name", "tricked"]) in got[PluginManager]


@pytest.mark.parametrize("snippet", ["import peregistry", "import peregistry.plugin",
                                     "import peregistry.rope",
                                     "import peregistry.integrations.transformers"])
def test_public_modules_import_no_framework(snippet: str) -> None:
    got = fresh(f"import sys, json; {snippet}\n"
                f"print(json.dumps([m for m in {FRAMEWORKS!r} if m in sys.modules]))")
    assert got == []


@pytest.mark.skipif("torch" not in BACKENDS, reason="torch not selected by PEREGISTRY_BACKENDS")
@pytest.mark.parametrize("torch_first", [True, False])
def test_torch_compile_fullgraph_of_a_relative_encoder_as_the_first_call(torch_first: bool) -> None:
    # The first bias of a process traced by TorchDynamo with fullgraph=True, the encoder built
    # before or after `import torch`: the compiled result equals the eager one.
    pytest.importorskip("torch")
    got = fresh(
        "import json\n"
        + ("import torch\n" if torch_first else "")
        + "import peregistry\n"
        "enc = peregistry.get_encoder('t5', num_heads=2)\n"
        "import torch\n"
        "params = enc.init(torch, seed=0)\n"
        "f = torch.compile(lambda q, k: enc.bias(q, k, params=params), fullgraph=True,\n"
        "                  backend='aot_eager')\n"
        "q, k = torch.arange(5), torch.arange(7)\n"
        "y = f(q, k)\n"
        "ref = enc.bias(q, k, params=params)\n"
        "print(json.dumps(bool(torch.equal(y, ref))))\n",
        env=NO_THIRD_PARTY)
    assert got is True


def test_the_table_of_builtin_families_is_what_their_hooks_give() -> None:
    # The registry knows a built-in family's names from this table without importing it: each
    # module's hook must give exactly these names, and every built-in encoder module is listed.
    import importlib

    from peregistry._records import BUILTIN_FAMILIES

    for module, names in BUILTIN_FAMILIES.items():
        mod = importlib.import_module(module)
        assert tuple(cls.name for cls in mod.peregistry_encoders()) == names, module
        hooks = {n for n in vars(mod) if n.startswith("peregistry_")}
        assert hooks == {"peregistry_encoders"}, f"{module} gives more than encoders: {hooks}"
    builtin = {ep.value for ep in entry_points("peregistry")
               if getattr(ep, "dist_name", None) == "peregistry"}
    assert {v for v in builtin if v.startswith("peregistry.encoders.")} <= set(BUILTIN_FAMILIES)


def test_a_family_is_imported_when_one_of_its_names_is_first_asked_for() -> None:
    got = fresh(
        "import sys, json, peregistry\n"
        "families = [m for m in sys.modules if m.startswith('peregistry.encoders.')\n"
        "            and m.rsplit('.', 1)[1][0] != '_']\n"
        "peregistry.get_encoder('rotary', dim=64)\n"
        "after_rotary = sorted(m for m in sys.modules if m.startswith('peregistry.encoders.')\n"
        "                      and m.rsplit('.', 1)[1][0] != '_')\n"
        "peregistry.get_encoder('t5', num_heads=2)\n"
        "after_t5 = 'peregistry.encoders.relative' in sys.modules\n"
        "names = {e.name for e in peregistry.list_encoders()}\n"
        "print(json.dumps([families, after_rotary, after_t5, sorted(names)]))\n",
        env=NO_THIRD_PARTY)
    families, after_rotary, after_t5, names = got
    assert "peregistry.encoders.rotary" not in families
    assert "peregistry.encoders.rotary" in after_rotary
    for other in ("mrope", "xpos", "relative", "fope", "learned", "dual_chunk"):
        assert f"peregistry.encoders.{other}" not in after_rotary
    assert after_t5
    assert {"rotary", "t5", "mrope", "alibi", "learned-2d"} <= set(names)
