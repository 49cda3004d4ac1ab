"""Running cases outside pytest: :func:`check_encoder` runs every applicable case of an encoder
and returns a :class:`Report`, one row per encoder × backend × check, that never raises for a
failing check and prints as a table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._cases import cases_for
from ._core import Case, CheckFailure

_OK = ("passed", "xfail", "exempt")


@dataclass(frozen=True)
class ReportRow:
    """One line of a :class:`Report`: an encoder x backend x check, its status (``passed``,
    ``failed``, ``error``, ``xfail``, ``xpass``, ``exempt``) and, unless it passed, why."""

    encoder: str
    backend: str
    check: str
    status: str  # "passed", "failed", "error", "xfail", "xpass", "exempt"
    message: str = ""


@dataclass(frozen=True)
class Report:
    """Result of :func:`check_encoder`: one row per encoder x backend x check."""

    rows: tuple[ReportRow, ...]

    @property
    def ok(self) -> bool:
        """False if any check failed, errored, or passed although declared as expected to fail.
        A law the encoder declares itself exempt from is reported ``exempt`` and is no failure."""
        return all(r.status in _OK for r in self.rows)

    @property
    def failures(self) -> list[ReportRow]:
        """The rows that make :attr:`ok` False (failed, errored or unexpectedly passed)."""
        return [r for r in self.rows if r.status not in _OK]

    def __str__(self) -> str:
        return format_table(self.rows)


def format_table(rows: Sequence[ReportRow]) -> str:
    """``rows`` as an aligned text table (encoder, backend, check, status; the message under
    each row that did not pass) and an ``N ok, M failed`` line."""
    head = ("encoder", "backend", "check", "status")
    body = [(r.encoder, r.backend, r.check, r.status) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=False)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for r, cells in zip(rows, body, strict=True):
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)))
        if r.message and r.status != "passed":
            lines.append(f"    {r.message}")
    n_bad = sum(r.status not in _OK for r in rows)
    lines.append(f"{len(rows) - n_bad} ok, {n_bad} failed")
    return "\n".join(lines)


def run_case(case: Case) -> ReportRow:
    """Run one case and turn the outcome into a report row (never raises for a failing check)."""
    base = (case.encoder.name, case.backend.name, case.spec.name)
    if case.exempt is not None and case.expected_failure is None:
        return _run_exempt(case, base)
    try:
        case.run()
    except CheckFailure as exc:
        if case.expected_failure is not None:
            return ReportRow(*base, "xfail", f"expected: {case.expected_failure}")
        return ReportRow(*base, "failed", str(exc))
    except Exception as exc:
        if case.expected_failure is not None:
            return ReportRow(*base, "xfail", f"expected: {case.expected_failure}")
        return ReportRow(*base, "error", f"{type(exc).__name__}: {exc}")
    if case.expected_failure is not None:
        return ReportRow(*base, "xpass", f"declared to fail ({case.expected_failure}) but passed")
    return ReportRow(*base, "passed")


def _run_exempt(case: Case, base: tuple[str, str, str]) -> ReportRow:
    """Run a check the encoder is exempt from: reported ``exempt`` with the reason and what the
    check found, never skipped and never a failure."""
    try:
        case.run()
    except Exception as exc:
        found = f"fails as declared: {type(exc).__name__}: {exc}"
    else:
        found = "passes here"
    return ReportRow(*base, "exempt", f"{case.exempt} ({found})")


def check_encoder(
    name: Any,
    *,
    backends: str | Sequence[str] | None = None,
    expected_failed_checks: Mapping[str, str] | None = None,
    **options: Any,
) -> Report:
    """Run every applicable check of encoder ``name`` (built with ``options``) on every selected
    backend, and return the :class:`Report`. ``name`` may also be an encoder object.

    >>> from peregistry.testing import check_encoder
    >>> report = check_encoder("sinusoidal", dim=8, backends="numpy")
    >>> report.ok, report.failures
    (True, [])
    >>> sorted({row.check for row in report.rows})[:3]
    ['check_deterministic', 'check_device_preserved', 'check_dtype_preserved']
    """
    spec = name if not isinstance(name, str) else (name, options)
    cases = cases_for([spec], backends=backends, expected_failed_checks=expected_failed_checks)
    return Report(tuple(run_case(c) for c in cases))
