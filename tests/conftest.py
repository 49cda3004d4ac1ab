"""Shared fixtures: the backends under test (chosen by PEREGISTRY_BACKENDS) and fake installed
distributions for registry tests.

``torch.compile`` in the conformance suite (``check_jit``, ``check_rotary_jit_traces_once``)
defaults here to the ``aot_eager`` backend: full-graph capture and functionalization as with
inductor, without inductor's C++ code generation, which costs seconds per graph. Inductor itself
is checked once per family in ``test_conformance.py::test_torch_compile_with_inductor``; set
``PEREGISTRY_TORCH_COMPILE_BACKEND=inductor`` to run every case with it (subprocesses inherit
the choice).
"""

from __future__ import annotations

import importlib
import os
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from peregistry.backends._torch import COMPILE_BACKEND_ENV
from peregistry.testing._core import selected_backends

os.environ.setdefault(COMPILE_BACKEND_ENV, "aot_eager")
BACKENDS = [b.name for b in selected_backends()]

#: Hypothesis profile of the property tests (test_properties, test_parallel, test_multimodal).
#: ``ci``, the default: every run draws the same examples (derandomize: seeded from each test
#: function), no example database, so a failure comes back on rerunning the same command and
#: prints the ``@reproduce_failure`` blob that replays it alone. ``dev``: fresh random examples
#: each run (to hunt for new failures), failures saved in .hypothesis/ and replayed first on the
#: next run, the blob printed too. Loaded here, before the test modules build their ``settings``
#: (which inherit what they do not set, e.g. max_examples stays theirs); pytest's
#: ``--hypothesis-profile``/``--hypothesis-seed`` override it.
HYPOTHESIS_PROFILE_ENV = "PEREGISTRY_HYPOTHESIS_PROFILE"
settings.register_profile("ci", derandomize=True, database=None, print_blob=True, deadline=None)
settings.register_profile("dev", derandomize=False, print_blob=True, deadline=None)
settings.load_profile(os.environ.get(HYPOTHESIS_PROFILE_ENV, "ci"))


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Any:
    """Each selected backend adapter in turn (its framework imported)."""
    from peregistry.registry import default_registry

    b = default_registry.backend(request.param)
    importlib.import_module(b.name)
    return b


@pytest.fixture
def xp(backend: Any) -> Any:
    return backend.namespace()


@pytest.fixture
def make_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Path]]:
    """Create an installed-looking distribution (``*.dist-info`` with entry points) on sys.path.

    ``make_dist("mypkg", {"mypkg_plugin": source}, entry_points={"mypkg": "mypkg_plugin"})``
    """
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    created: list[str] = []

    def make(name: str, modules: dict[str, str], entry_points: dict[str, str],
             version: str = "1.0") -> Path:
        for mod, src in modules.items():
            (root / f"{mod}.py").write_text(textwrap.dedent(src))
            created.append(mod)
        info = root / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
        eps = "\n".join(f"{k} = {v}" for k, v in entry_points.items())
        (info / "entry_points.txt").write_text(f"[peregistry]\n{eps}\n")
        importlib.invalidate_caches()
        return info

    yield make
    for mod in created:
        sys.modules.pop(mod, None)
    importlib.invalidate_caches()


#: Set by the tox env that installs matplotlib (docs): there a missing matplotlib fails the plot
#: tests instead of skipping them, so CI cannot pass them by skipping.
EXPECT_MATPLOTLIB_ENV = "PEREGISTRY_EXPECT_MATPLOTLIB"


def require_matplotlib() -> None:
    """Skip without matplotlib (the docs extra), or fail where the env promises it."""
    if os.environ.get(EXPECT_MATPLOTLIB_ENV) == "1":
        import matplotlib  # noqa: F401  (an ImportError here fails the test)
        return
    pytest.importorskip("matplotlib", reason=f"matplotlib not installed (the docs extra; the "
                                             f"docs tox env runs these with "
                                             f"{EXPECT_MATPLOTLIB_ENV}=1)")


@pytest.fixture
def needs_matplotlib() -> None:
    require_matplotlib()


# -- tests that run in one env only ---------------------------------------------------------------
#: Marker of a test whose outcome does not depend on the env that runs it: it takes no
#: ``backend``/``xp`` fixture, reads no ``PEREGISTRY_BACKENDS``, needs nothing beyond NumPy and the
#: test extra, and no installed framework changes what it checks (pure-Python options, registry,
#: CLI text, docs consistency, NumPy-only oracles). The numpy, torch, jax and strict envs each run
#: the whole suite, so such a test ran 4-7 times for one result; it runs where NumPy is a selected
#: backend (the numpy env, and a bare ``pytest``: every installed backend) and is deselected
#: elsewhere, and where ``PEREGISTRY_BACKEND_FREE=0`` says they run in another env (the docs env,
#: which selects numpy for the few files it runs). It may not skip (it would then run nowhere);
#: tests/test_env_partition.py holds that some env of scripts/test-all.sh runs it. In a module
#: marked as a whole, ``backend_free(False)`` on a test keeps that one in every env (so ``-m``
#: cannot tell them apart: the variable, not ``-m "not backend_free"``, is how an env opts out).
BACKEND_FREE = "backend_free"
BACKEND_FREE_HOME = "numpy"
BACKEND_FREE_ENV = "PEREGISTRY_BACKEND_FREE"


def runs_backend_free_tests(backends: Sequence[str], switch: str | None = None) -> bool:
    """Whether a run with these selected backends (and ``PEREGISTRY_BACKEND_FREE``, default:
    the environment's) runs the ``backend_free`` tests."""
    switch = os.environ.get(BACKEND_FREE_ENV, "1") if switch is None else switch
    if switch not in ("0", "1"):
        raise pytest.UsageError(f"{BACKEND_FREE_ENV}={switch!r}: expected 1 (run the "
                                f"{BACKEND_FREE} tests where {BACKEND_FREE_HOME} is selected) "
                                f"or 0 (they run in another env)")
    return switch == "1" and BACKEND_FREE_HOME in backends


def is_backend_free(item: pytest.Item) -> bool:
    """Whether the test is marked ``backend_free`` (and not ``backend_free(False)``)."""
    marker = item.get_closest_marker(BACKEND_FREE)
    return marker is not None and marker.args[:1] != (False,)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{BACKEND_FREE}(on=True): the outcome does not depend on the env; runs only "
                   f"where {BACKEND_FREE_HOME} is a selected backend (tests/conftest.py)")


def pytest_report_header(config: pytest.Config) -> str:
    where = "here" if runs_backend_free_tests(BACKENDS) else \
        f"deselected here (they run where {BACKEND_FREE_HOME} is selected and {BACKEND_FREE_ENV} is not 0)"
    return f"{BACKEND_FREE} tests: {where}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    marked = [item for item in items if is_backend_free(item)]
    for item in marked:
        uses = sorted({"backend", "xp"} & set(getattr(item, "fixturenames", ())))
        if uses:
            raise pytest.UsageError(
                f"{item.nodeid} is marked {BACKEND_FREE} but takes the fixture {uses[0]!r}: its "
                f"other backends' cases would run nowhere")
    if marked and not runs_backend_free_tests(BACKENDS):
        config.hook.pytest_deselected(items=marked)
        ids = {id(item) for item in marked}
        items[:] = [item for item in items if id(item) not in ids]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A ``backend_free`` test that skips fails instead: it runs in one env only."""
    outcome = yield
    report = outcome.get_result()
    if (report.skipped and not hasattr(report, "wasxfail")
            and is_backend_free(item)):
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} is marked {BACKEND_FREE}, so it runs in one env only "
                           f"and may not skip; it skipped: {reason}")
