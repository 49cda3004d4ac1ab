"""The mutation corpus (``tests/mutants``): each broken plugin encoder fails at least one of the
checks expected to catch it, on every selected backend where its bug can show; the correct
reference plugins pass the full ``check_encoder``; and the catch rate over the corpus is
computed and printed. Only each mutant's expected checks run (no full suite per mutant)."""

from __future__ import annotations

from typing import Any

import pytest
from mutants import CATALOGUE, REFERENCES, Mutant

import peregistry as per
from peregistry.testing import cases_for, check_encoder, registered_checks
from peregistry.testing._core import selected_backends
from peregistry.testing._report import run_case

BACKENDS = [b.name for b in selected_backends()]

#: (backend, mutant id) -> {check: message} of the expected checks that failed; filled by the
#: per-mutant tests and completed by the catch-rate test.
_RESULTS: dict[tuple[str, str], dict[str, str]] = {}


def _backend(name: str) -> Any:
    return per.registry.default_registry.backend(name)


def _missing_checks(mutant: Mutant) -> list[str]:
    known = registered_checks()
    return sorted(c for c in mutant.expected if c not in known)


def _failing(mutant: Mutant, backend: str) -> dict[str, str]:
    """``{check: message}`` of the mutant's registered expected checks that failed/errored."""
    key = (backend, mutant.id)
    if key not in _RESULTS:
        known = set(registered_checks())
        checks = sorted(mutant.expected & known)
        rows = (run_case(c) for c in cases_for([mutant.build()], backends=backend, checks=checks))
        _RESULTS[key] = {r.check: r.message for r in rows if r.status not in ("passed", "xfail")}
    return _RESULTS[key]


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("mutant", CATALOGUE, ids=lambda m: m.id)
def test_mutant_is_caught(mutant: Mutant, backend_name: str) -> None:
    missing = _missing_checks(mutant)
    assert not missing, (f"{mutant.id}: check {', '.join(missing)} not registered (expected to "
                         f"catch it); registered: {', '.join(registered_checks())}")
    reason = mutant.unshowable(_backend(backend_name))
    if reason is not None:
        pytest.skip(f"{mutant.id} cannot show on {backend_name}: {reason}")
    applicable = {c.spec.name for c in cases_for([mutant.build()], backends=backend_name,
                                                  checks=sorted(mutant.expected))}
    assert applicable, (f"{mutant.id}: none of {sorted(mutant.expected)} applies to it on "
                        f"{backend_name}")
    failed = _failing(mutant, backend_name)
    what = (mutant.factory.__doc__ or "").strip().splitlines()[0]
    assert failed, (f"{mutant.id} ({what}) passed "
                    f"{sorted(applicable)} on {backend_name}, but should fail at least one")


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("encoder", REFERENCES, ids=lambda e: e.name)
def test_reference_plugin_passes_the_full_suite(encoder: per.Encoder, backend_name: str) -> None:
    report = check_encoder(encoder, backends=backend_name)
    assert report.ok, str(report)


def catch_rate(backend: str) -> tuple[int, int, list[str]]:
    """(caught, showable, escaped ids) over the corpus on ``backend``."""
    b = _backend(backend)
    escaped, caught, total = [], 0, 0
    for mutant in CATALOGUE:
        if mutant.unshowable(b) is not None:
            continue
        total += 1
        if _failing(mutant, backend):
            caught += 1
        else:
            escaped.append(mutant.id)
    return caught, total, escaped


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_catch_rate(backend_name: str, capsys: pytest.CaptureFixture[str]) -> None:
    caught, total, escaped = catch_rate(backend_name)
    with capsys.disabled():
        print(f"\nmutation corpus on {backend_name}: caught {caught}/{total} "
              f"({100.0 * caught / total:.0f}%); escaped: {', '.join(escaped) or 'none'}")
    assert total >= 40 if backend_name != "numpy" else total >= 35
    assert caught == total, f"escaped on {backend_name}: {escaped}"
