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
from collections.abc import Callable, Iterator
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
