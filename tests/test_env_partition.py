"""Tests marked ``backend_free`` run in one env only (tests/conftest.py): where NumPy is a selected
backend. These hold that rule: some env of the full run (scripts/test-all.sh) runs them, the
others deselect them, a marked test may not take the ``backend`` fixture (its other backends'
cases would run nowhere) and may not skip (it would then run nowhere)."""

from __future__ import annotations

import configparser
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import conftest
import pytest

pytestmark = pytest.mark.backend_free

ROOT = Path(__file__).resolve().parent.parent


def _tox() -> configparser.ConfigParser:
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / "tox.ini")
    return ini


def _section(ini: configparser.ConfigParser, env: str) -> configparser.SectionProxy:
    name = f"testenv:{env}"
    return ini[name] if ini.has_section(name) else ini["testenv"]


def _set(ini: configparser.ConfigParser, env: str, name: str) -> str | None:
    """The value the env's set_env gives variable ``name`` (None if it sets none)."""
    set_env = _section(ini, env).get("set_env", "")
    found = re.findall(rf"^\s*{name}\s*=\s*(\S+)", set_env, flags=re.M)
    return found[-1] if found else None


def _runs_backend_free(ini: configparser.ConfigParser, env: str) -> bool:
    # PEREGISTRY_BACKENDS unset: every installed backend, numpy among them
    backends = (_set(ini, env, "PEREGISTRY_BACKENDS") or "numpy").split(",")
    return conftest.runs_backend_free_tests(backends, _set(ini, env, conftest.BACKEND_FREE_ENV))


def _pytest_runs(ini: configparser.ConfigParser, env: str) -> list[list[str]]:
    """The arguments of each ``pytest`` command of the env (``{posargs}`` dropped)."""
    commands = _section(ini, env).get("commands", ini["testenv"]["commands"])
    runs = []
    for line in commands.splitlines():
        words = shlex.split(line.replace("{posargs}", ""), comments=True)
        if "pytest" in words:
            runs.append(words[words.index("pytest") + 1:])
    return runs


def _paths(args: list[str]) -> list[str]:
    """The test paths among pytest's arguments (none: the ``testpaths``, the whole suite)."""
    takes_value = {"-p", "-m", "-k", "--rootdir"}
    return [a for i, a in enumerate(args) if not a.startswith("-")
            and (i == 0 or args[i - 1] not in takes_value)]


def _full_run_envs() -> list[str]:
    text = (ROOT / "scripts" / "test-all.sh").read_text()
    match = re.search(r"^ENVS=\$\{TOX_ENVS:-([\w,]+)\}", text, flags=re.M)
    assert match, "scripts/test-all.sh no longer names its envs as ENVS=${TOX_ENVS:-...}"
    return match.group(1).split(",")


def test_an_env_of_the_full_run_runs_every_backend_free_test() -> None:
    ini = _tox()
    homes = [env for env in _full_run_envs() if _runs_backend_free(ini, env)
             and any(not _paths(args) and "-m" not in args for args in _pytest_runs(ini, env))]
    assert homes == ["numpy"], f"the whole suite runs the backend_free tests in {homes}"


def test_no_env_selects_tests_by_marker() -> None:
    # -m "not backend_free" would drop the backend_free(False) tests too: an env opts out with
    # PEREGISTRY_BACKEND_FREE=0 (the docs env)
    ini = _tox()
    assert not _runs_backend_free(ini, "docs")
    for env in _full_run_envs():
        for args in _pytest_runs(ini, env):
            assert "-m" not in args, env


def test_the_rule_is_keyed_on_numpy_being_selected() -> None:
    assert conftest.runs_backend_free_tests(["numpy"])
    assert conftest.runs_backend_free_tests(["numpy", "torch", "jax", "array_api_strict"])
    assert not conftest.runs_backend_free_tests(["torch"])
    assert not conftest.runs_backend_free_tests(["jax", "torch"])
    assert not conftest.runs_backend_free_tests(["array_api_strict"])
    assert not conftest.runs_backend_free_tests(["numpy"], "0")
    with pytest.raises(pytest.UsageError, match=r"PEREGISTRY_BACKEND_FREE='no': expected 1 .* or 0"):
        conftest.runs_backend_free_tests(["numpy"], "no")


@dataclass
class FakeItem:
    nodeid: str
    marked: bool
    fixturenames: list[str] = field(default_factory=list)

    def get_closest_marker(self, name: str) -> Any:
        return pytest.mark.backend_free.mark if self.marked and name == conftest.BACKEND_FREE \
            else None


class FakeConfig:
    def __init__(self) -> None:
        self.deselected: list[Any] = []
        self.hook = self

    def pytest_deselected(self, items: list[Any]) -> None:
        self.deselected.extend(items)


def _collect(backends: list[str], items: list[Any], monkeypatch: pytest.MonkeyPatch) -> FakeConfig:
    monkeypatch.setattr(conftest, "BACKENDS", backends)
    config = FakeConfig()
    conftest.pytest_collection_modifyitems(config, items)  # type: ignore[arg-type]
    return config


def test_marked_tests_are_deselected_where_numpy_is_not_selected(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(conftest.BACKEND_FREE_ENV, raising=False)
    free, other = FakeItem("t::free", True), FakeItem("t::other", False)
    items: list[Any] = [free, other]
    config = _collect(["torch"], items, monkeypatch)
    assert items == [other] and config.deselected == [free]
    items = [free, other]
    config = _collect(["numpy"], items, monkeypatch)
    assert items == [free, other] and config.deselected == []


def test_backend_free_false_keeps_a_test_of_a_marked_module_in_every_env() -> None:
    class Kept(FakeItem):
        def get_closest_marker(self, name: str) -> Any:
            return pytest.mark.backend_free(False).mark

    assert not conftest.is_backend_free(Kept("t::kept", True))  # type: ignore[arg-type]
    assert conftest.is_backend_free(FakeItem("t::free", True))  # type: ignore[arg-type]


def test_a_marked_test_taking_the_backend_fixture_is_a_usage_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(pytest.UsageError, match=r"t::free\[torch\] is marked backend_free but "
                                                r"takes the fixture 'backend'"):
        _collect(["numpy"], [FakeItem("t::free[torch]", True, ["backend"])], monkeypatch)


class FakeOutcome:
    def __init__(self, report: pytest.TestReport) -> None:
        self.report = report

    def get_result(self) -> pytest.TestReport:
        return self.report


@pytest.mark.parametrize("marked", [True, False])
def test_a_marked_test_that_skips_fails(marked: bool) -> None:
    report = pytest.TestReport("t::x", ("t.py", 1, "x"), {}, "skipped",
                               ("t.py", 1, "Skipped: torch is not installed"), "call")
    hook = conftest.pytest_runtest_makereport(FakeItem("t::x", marked), None)  # type: ignore[arg-type]
    next(hook)
    with pytest.raises(StopIteration):
        hook.send(FakeOutcome(report))
    if marked:
        assert report.failed
        assert "may not skip; it skipped: Skipped: torch is not installed" in str(report.longrepr)
    else:
        assert report.skipped
