"""The plugin registry: lookup, errors, broken plugins, conflicts, switches, laziness, threads."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import pytest

import peregistry as per
from peregistry.registry import Registry

ENCODER_PLUGIN = """
import peregistry as per

class {cls}(per.AbsoluteEncoder):
    \"\"\"{summary}\"\"\"
    name = {name!r}
    dim = per.Option(int)

    def _encode(self, positions, *, params, ctx):
        return ctx.xp.zeros((*positions.shape, self.dim), dtype=ctx.wide)

@per.hookimpl
def peregistry_encoders():
    return [{cls}]
"""


def encoder_module(name: str, cls: str = "Enc", summary: str = "A test encoder.") -> str:
    return ENCODER_PLUGIN.format(name=name, cls=cls, summary=summary)


def make_encoder_class(name: str) -> type[per.AbsoluteEncoder]:
    class Enc(per.AbsoluteEncoder):
        """In-process test encoder."""

        dim = per.Option(int)

    Enc.name = name
    return Enc


class Plugin:
    def __init__(self, *classes: Any, raises: Exception | None = None, returns: Any = None):
        self.classes, self.raises, self.returns = classes, raises, returns

    @per.hookimpl
    def peregistry_encoders(self) -> Any:
        if self.raises is not None:
            raise self.raises
        return self.returns if self.returns is not None else list(self.classes)


@pytest.fixture
def reg() -> Registry:
    """A registry with the installed entry points, independent of the global one."""
    return Registry()


# -- lookup --------------------------------------------------------------------------------------
def test_builtins_come_through_entry_points_of_the_peregistry_distribution(reg: Registry) -> None:
    rows = {r.name: r for r in reg.list_encoders()}
    assert rows["sinusoidal"].plugin.distribution == "peregistry"
    assert rows["sinusoidal"].plugin.version == per.__version__
    assert rows["sinusoidal"].kind == "absolute"
    assert rows["sinusoidal"].status == "ok"


def test_unknown_name_lists_close_matches_and_known_names(reg: Registry) -> None:
    with pytest.raises(per.EncoderNotFoundError) as info:
        reg.get_encoder("sinusoid", dim=8)
    msg = str(info.value)
    assert "no encoder named 'sinusoid'" in msg
    assert "Did you mean 'sinusoidal'?" in msg
    assert "Known encoders: " in msg and "sinusoidal" in msg


def test_name_must_be_a_string(reg: Registry) -> None:
    with pytest.raises(TypeError, match="encoder name must be a string, got 3"):
        reg.get_encoder(3)  # type: ignore[arg-type]


def test_module_level_api_matches_contract() -> None:
    enc = per.get_encoder("sinusoidal", dim=8, base=10000.0)
    assert enc.name == "sinusoidal" and enc.kind == "absolute"
    assert enc.options == {"dim": 8, "base": 10000.0, "layout": "interleaved"}
    assert any(r.name == "sinusoidal" for r in per.list_encoders())
    with pytest.raises(TypeError):
        per.get_encoder("sinusoidal", 8)  # type: ignore[call-arg]


# -- in-process plugins --------------------------------------------------------------------------
def test_register_and_unregister_in_process(reg: Registry) -> None:
    name = reg.register(Plugin(make_encoder_class("inproc")), name="inproc-plugin")
    assert name == "inproc-plugin"
    enc = reg.get_encoder("inproc", dim=2)
    assert enc.options == {"dim": 2}
    row = next(r for r in reg.list_encoders() if r.name == "inproc")
    assert row.plugin.label == "inproc-plugin (in-process)"
    reg.unregister("inproc-plugin")
    with pytest.raises(per.EncoderNotFoundError):
        reg.get_encoder("inproc", dim=2)


def test_register_an_encoder_class(reg: Registry) -> None:
    """Issue 42: ``register(EncoderClass)`` registered nothing, silently, and the next
    ``get_encoder`` said there was no such encoder. An encoder class is registered as a plugin
    providing it, under the class's name (or ``name=``)."""
    cls = make_encoder_class("class-registered")
    name = reg.register(cls)
    assert name == "Enc"
    assert reg.get_encoder("class-registered", dim=3).options == {"dim": 3}
    row = next(r for r in reg.list_encoders() if r.name == "class-registered")
    assert row.plugin.label == "Enc (in-process)" and row.status == "ok"
    reg.unregister(name)
    with pytest.raises(per.EncoderNotFoundError):
        reg.get_encoder("class-registered", dim=3)
    assert reg.register(cls, name="mine") == "mine"
    assert reg.get_encoder("class-registered", dim=2).options == {"dim": 2}


@pytest.mark.parametrize(("thing", "match"), ids=["instance", "object", "class", "list"],
                         argvalues=[
    (lambda: make_encoder_class("an-object")(dim=2),
     r"is an encoder object \(Enc\), not a plugin; pass its class: register\(Enc\)"),
    (lambda: object(), r"has no hook implementation"),
    (lambda: int, r"has no hook implementation"),
    (lambda: [make_encoder_class("in-a-list")], r"has no hook implementation"),
])
def test_register_refuses_what_provides_nothing(reg: Registry, thing: Any, match: str) -> None:
    """Anything else without a ``@per.hookimpl`` function is a TypeError saying what to pass,
    and nothing is registered under its name."""
    plugins = {p.name for p in reg.plugins()}
    with pytest.raises(TypeError, match=match) as info:
        reg.register(thing(), name="provides-nothing")
    assert "@peregistry.hookimpl" in str(info.value) and "encoder class" in str(info.value)
    assert {p.name for p in reg.plugins()} == plugins
    reg.register(Plugin(make_encoder_class("after-refusal")), name="provides-nothing")  # free


def test_register_twice_under_one_name_is_an_error(reg: Registry) -> None:
    reg.register(Plugin(), name="p")
    with pytest.raises(ValueError, match="a plugin named 'p' is already registered"):
        reg.register(Plugin(), name="p")


def test_unregister_unknown_name_lists_registered(reg: Registry) -> None:
    with pytest.raises(ValueError, match="no plugin named 'nope' is registered; registered: .*sinusoidal"):
        reg.unregister("nope")


def test_global_register_unregister_round_trip() -> None:
    per.register(Plugin(make_encoder_class("global-test")), name="global-test-plugin")
    try:
        assert per.get_encoder("global-test", dim=1).name == "global-test"
    finally:
        per.unregister("global-test-plugin")
    assert all(r.name != "global-test" for r in per.list_encoders())


# -- broken plugins ------------------------------------------------------------------------------
def test_hook_that_raises_is_reported_and_others_still_load(reg: Registry) -> None:
    reg.register(Plugin(raises=RuntimeError("boom")), name="raiser")
    rows = reg.list_encoders()
    bad = next(r for r in rows if r.plugin.name == "raiser")
    assert bad.status == "error" and bad.name is None
    assert bad.error == "hook peregistry_encoders() raised RuntimeError: boom"
    assert reg.get_encoder("sinusoidal", dim=4).name == "sinusoidal"
    with pytest.raises(per.EncoderNotFoundError, match="raiser .in-process.: hook peregistry_encoders"):
        reg.get_encoder("whatever-raiser-had")


@pytest.mark.parametrize(
    ("returns", "pattern"),
    [
        ("sinusoidal", r"returned 'sinusoidal'; expected a list"),
        ([42], r"returned 42, not an Encoder subclass"),
        ([per.AbsoluteEncoder], r"AbsoluteEncoder without a name"),
    ],
)
def test_hook_returning_garbage_is_reported(reg: Registry, returns: Any, pattern: str) -> None:
    reg.register(Plugin(returns=returns), name="garbage")
    bad = next(r for r in reg.list_encoders() if r.plugin.name == "garbage")
    assert bad.status == "error"
    assert bad.error is not None
    assert pytest.importorskip("re").search(pattern, bad.error), bad.error
    assert reg.get_encoder("sinusoidal", dim=4).name == "sinusoidal"


def test_good_items_of_a_partly_bad_return_are_kept_and_the_error_shown(reg: Registry) -> None:
    reg.register(Plugin(returns=[make_encoder_class("kept"), "junk"]), name="partly")
    assert reg.get_encoder("kept", dim=1).name == "kept"
    row = next(r for r in reg.list_encoders() if r.name == "kept")
    assert row.status == "error" and "'junk', not an Encoder subclass" in (row.error or "")


def test_plugin_module_failing_to_import_is_reported_by_distribution(reg: Registry,
                                                                     make_dist: Any) -> None:
    make_dist("broken-pkg", {"broken_pkg_plugin": "raise ImportError('needs libfoo')"},
              {"broken": "broken_pkg_plugin"}, version="0.3")
    reg = Registry()
    bad = next(r for r in reg.list_encoders() if r.plugin.distribution == "broken-pkg")
    assert bad.status == "error"
    assert bad.plugin.label == "broken-pkg 0.3"
    assert bad.error == 'error importing plugin "broken_pkg_plugin": ImportError: needs libfoo'
    assert reg.get_encoder("sinusoidal", dim=4).name == "sinusoidal"
    with pytest.raises(per.EncoderNotFoundError, match="broken-pkg 0.3: error importing plugin"):
        reg.get_encoder("broken-encoder")


def test_two_distributions_claiming_one_name_is_an_error_naming_both(make_dist: Any) -> None:
    make_dist("alpha-pe", {"alpha_pe": encoder_module("dup")}, {"alpha": "alpha_pe"})
    make_dist("beta-pe", {"beta_pe": encoder_module("dup")}, {"beta": "beta_pe"}, version="2.0")
    reg = Registry()
    with pytest.raises(per.PluginConflictError) as info:
        reg.get_encoder("dup", dim=2)
    assert "alpha-pe 1.0" in str(info.value) and "beta-pe 2.0" in str(info.value)
    rows = [r for r in reg.list_encoders() if r.name == "dup"]
    assert len(rows) == 2 and {r.status for r in rows} == {"conflict"}
    assert reg.get_encoder("sinusoidal", dim=4).name == "sinusoidal"


def test_in_process_plugin_claiming_a_builtin_name_conflicts(reg: Registry) -> None:
    reg.register(Plugin(make_encoder_class("sinusoidal")), name="impostor")
    with pytest.raises(per.PluginConflictError, match="peregistry .* and impostor"):
        reg.get_encoder("sinusoidal", dim=4)


# -- environment switches ------------------------------------------------------------------------
@pytest.fixture
def two_dists(make_dist: Any) -> None:
    make_dist("first-pe", {"first_pe": encoder_module("first")}, {"first": "first_pe"})
    make_dist("second-pe", {"second_pe": encoder_module("second")}, {"second": "second_pe"})


def names(reg: Registry) -> set[str]:
    return {r.name for r in reg.list_encoders() if r.name is not None}


@pytest.mark.usefixtures("two_dists")
def test_autoload_default_loads_everything() -> None:
    assert {"first", "second", "sinusoidal"} <= names(Registry())


@pytest.mark.usefixtures("two_dists")
def test_disable_autoload_keeps_builtins_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEREGISTRY_DISABLE_PLUGIN_AUTOLOAD", "1")
    reg = Registry()
    found = names(reg)
    assert "sinusoidal" in found and not {"first", "second"} & found
    disabled = {p.distribution: p for p in reg.plugins() if p.status == "disabled"}
    assert "autoload disabled" in (disabled["first-pe"].error or "")


@pytest.mark.usefixtures("two_dists")
def test_load_only_named_distributions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEREGISTRY_LOAD_PLUGINS", "Second_PE")  # normalised like pip does
    found = names(Registry())
    assert "second" in found and "sinusoidal" in found and "first" not in found


@pytest.mark.usefixtures("two_dists")
def test_block_named_distributions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEREGISTRY_DISABLED_PLUGINS", "first-pe")
    found = names(Registry())
    assert "second" in found and "first" not in found


# -- laziness and threads ------------------------------------------------------------------------
def test_import_loads_no_plugin_and_no_framework() -> None:
    code = (
        "import sys, peregistry\n"
        "from peregistry.registry import default_registry as r\n"
        "heavy = [m for m in ('numpy', 'torch', 'jax', 'array_api_strict', 'array_api_compat')"
        " if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert r._pm is None, 'plugins loaded at import'\n"
        "enc = peregistry.get_encoder('sinusoidal', dim=64)\n"
        "heavy = [m for m in ('numpy', 'torch', 'jax', 'array_api_strict') if m in sys.modules]\n"
        "assert not heavy, ('get_encoder imported', heavy)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_sixteen_threads_see_one_load_and_identical_results() -> None:
    reg = Registry()
    barrier = threading.Barrier(16)
    results: list[Any] = [None] * 16
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            barrier.wait()
            results[i] = reg.get_encoder("sinusoidal", dim=64)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert reg.load_count == 1
    assert reg.collect_count == 1
    assert all(r == results[0] for r in results)


# -- isolation: encoders use the services of the registry that built them --------------------------
SERVICES = ("backend_of", "backend_of_namespace", "backend", "backends", "scalings", "get_encoder")


def _numpy_spy(calls: list[str]) -> Any:
    """A NumPy adapter that records each array it is asked about."""
    from peregistry.registry import default_registry

    base = type(default_registry.backend("numpy"))

    class Spy(base):  # type: ignore[misc, valid-type]
        def owns(self, x: Any) -> bool:
            calls.append(type(x).__name__)
            return bool(super().owns(x))

    return Spy()


def _isolated(*modules: str, backends: list[Any] | None = None) -> Registry:
    import importlib

    reg = Registry(entry_points=False)
    for name in modules:
        reg.register(importlib.import_module(name))
    if backends is not None:
        class Backends:
            @per.hookimpl
            def peregistry_backends(self) -> list[Any]:
                return list(backends)

        reg.register(Backends(), "test-backends")
    return reg


def _refuse_default_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, any question to the default registry fails the test."""
    from peregistry.registry import default_registry

    for attr in SERVICES:
        def refuse(*args: Any, _attr: str = attr, **kwargs: Any) -> Any:
            raise AssertionError(f"default_registry.{_attr} was asked")

        monkeypatch.setattr(default_registry, attr, refuse)


def test_encoders_of_an_isolated_registry_ask_only_it(monkeypatch: pytest.MonkeyPatch) -> None:
    np = pytest.importorskip("numpy")
    calls: list[str] = []
    reg = _isolated("peregistry.encoders.sinusoidal", "peregistry.encoders.learned",
                    "peregistry.encoders.relative", backends=[_numpy_spy(calls)])
    _refuse_default_registry(monkeypatch)
    enc = reg.get_encoder("sinusoidal", dim=8)
    assert enc.services is reg
    assert enc.encode(np.arange(4)).shape == (4, 8)
    assert calls, "the isolated registry's adapter was not asked"
    assert enc.replace(dim=4).services is reg
    table = reg.get_encoder("learned", num_positions=8, dim=4)
    params = table.init(np, seed=1)  # backend looked up in reg
    assert table.encode(np.arange(3), params=params).shape == (3, 4)
    shaw = reg.get_encoder("shaw", max_distance=2, dim=3)
    assert shaw.embed(np.arange(2), np.arange(3), params=shaw.init("numpy")).shape == (2, 3, 3)


def test_an_isolated_registry_without_backends_knows_no_arrays() -> None:
    np = pytest.importorskip("numpy")
    reg = _isolated("peregistry.encoders.sinusoidal")
    enc = reg.get_encoder("sinusoidal", dim=8)
    with pytest.raises(TypeError, match=r"expected an array of a registered backend \(\)"):
        enc.encode(np.arange(4))
    with pytest.raises(ValueError, match="no backend adapter named 'numpy'"):
        enc.encode([0, 1])
    # the same encoder from the default registry: equal, same hash, served by the default one
    default = per.get_encoder("sinusoidal", dim=8)
    assert default == enc and hash(default) == hash(enc)
    assert default.encode(np.arange(4)).shape == (4, 8)


def test_pickled_encoders_keep_name_and_options_not_the_registry() -> None:
    import pickle

    from peregistry.registry import default_registry

    reg = _isolated("peregistry.encoders.sinusoidal")
    enc = reg.get_encoder("sinusoidal", dim=8)
    back = pickle.loads(pickle.dumps(enc))
    assert back == enc and hash(back) == hash(enc)
    assert back.services is default_registry
    import copy

    for dup in (copy.copy(enc), copy.deepcopy(enc)):
        assert dup == enc and dup is not enc and dup.services is reg
    assert type(enc)(dim=8).services is default_registry  # built outside any registry


class _Stretch:
    name = "house-stretch"

    def inv_freq(self, rotary_dim: int, theta: float, params: Any, seq_len: Any = None) -> Any:
        import numpy as np

        i = np.arange(0, rotary_dim, 2, dtype=np.float64)
        return theta ** (-i / rotary_dim) / 2.0


def test_scaling_types_are_looked_up_in_the_building_registry() -> None:
    class Scalings:
        @per.hookimpl
        def peregistry_rope_scalings(self) -> list[Any]:
            return [_Stretch()]

    reg = _isolated("peregistry.encoders.rotary", "peregistry.backends.builtin")
    reg.register(Scalings(), "test-scalings")
    enc = reg.get_encoder("rotary", dim=8, scaling={"type": "house-stretch"})
    assert enc.options["scaling"] == {"type": "house-stretch"}
    with pytest.raises(ValueError, match="unknown scaling type 'house-stretch'"):
        per.get_encoder("rotary", dim=8, scaling={"type": "house-stretch"})


def test_services_of_the_building_registry_are_current_while_it_builds() -> None:
    from peregistry._services import current_services
    from peregistry.registry import default_registry

    seen: list[Any] = []

    class Probe(per.AbsoluteEncoder):
        name = "house-probe"
        dim = per.Option(int, 2)

        def _validate(self) -> None:
            seen.append(current_services())

    class Plugin:
        @per.hookimpl
        def peregistry_encoders(self) -> list[Any]:
            return [Probe]

    reg = Registry(entry_points=False)
    reg.register(Plugin(), "probe")
    enc = reg.get_encoder("house-probe")
    assert seen == [reg] and current_services() is default_registry
    enc.replace(dim=4)
    assert seen == [reg, reg]
    Probe()
    assert seen[-1] is default_registry


def test_encoders_built_by_encoders_come_from_the_same_registry(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reg = _isolated("peregistry.encoders.mrope", "peregistry.encoders.rotary",
                    "peregistry.backends.builtin")
    _refuse_default_registry(monkeypatch)
    text = reg.get_encoder("mrope", dim=128, sections=(16, 24, 24), theta=1e6).text_equivalent()
    assert text.services is reg
