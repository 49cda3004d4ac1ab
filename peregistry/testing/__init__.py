"""The conformance suite, for our encoders and for anyone's plugin.

Two lines in a plugin package's tests run every applicable check of its encoders on every
selected backend, one pytest test per encoder x backend x check::

    from peregistry.testing import parametrize_with_checks

    @parametrize_with_checks([("my-rope", {"dim": 64})])
    def test_conformance(case):
        case.run()

Test ids read ``test_conformance[my-rope-torch-check_dtype_preserved]``, so ``-k`` selects one.
Outside pytest, :func:`check_encoder` runs the same checks and returns a :class:`Report`.

The backends are chosen by the ``PEREGISTRY_BACKENDS`` environment variable (``numpy,torch`` or
``all``, the default: every installed backend). An unknown or uninstalled name is an error.
Known failures are declared, with a reason, in ``expected_failed_checks``; they are run and
reported as ``xfail`` (and an unexpected pass is a failure), never silently skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._core import BACKENDS_ENV, Case, CheckFailure, CheckSpec, check, registered_checks
from ._core import capabilities as _capabilities
from ._core import selected_backends as _selected_backends

if TYPE_CHECKING:
    from ..encoders.base import Encoder

__all__ = [
    "BACKENDS_ENV",
    "Case",
    "CheckFailure",
    "CheckSpec",
    "Report",
    "ReportRow",
    "cases_for",
    "check",
    "check_encoder",
    "parametrize_with_checks",
    "registered_checks",
]

EncoderSpec = "Encoder | str | tuple[str, Mapping[str, Any]]"


def _as_encoder(spec: Any) -> Encoder:
    from ..encoders.base import Encoder
    from ..registry import default_registry

    if isinstance(spec, Encoder):
        return spec
    if isinstance(spec, str):
        return default_registry.get_encoder(spec)
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str):
        return default_registry.get_encoder(spec[0], **dict(spec[1]))
    raise TypeError(f"expected an encoder, a name, or a (name, options) pair; got {spec!r}")


def cases_for(
    encoders: Iterable[Any],
    *,
    backends: str | Sequence[str] | None = None,
    expected_failed_checks: Mapping[str, str] | None = None,
    checks: Iterable[str] | None = None,
) -> list[Case]:
    """Every applicable case: encoder x selected backend x check (chosen by kind and capability).

    :param backends: names, a comma-separated string, or None for ``PEREGISTRY_BACKENDS``.
    :param expected_failed_checks: ``{"check_name": "reason"}``, or ``{"backend:check_name": ...}``
        for one backend only. A name that matches no check is an error.
    :param checks: restrict to these check names.
    """
    chosen = _selected_backends(backends if backends is None or isinstance(backends, str)
                                else ",".join(backends))
    all_checks = registered_checks()
    expected = dict(expected_failed_checks or {})
    for key in expected:
        check_name = key.split(":", 1)[-1]
        if check_name not in all_checks:
            raise ValueError(f"expected_failed_checks names unknown check {check_name!r}; known: "
                             f"{', '.join(all_checks)}")
    wanted = set(checks) if checks is not None else None
    if wanted is not None and (unknown := wanted - set(all_checks)):
        raise ValueError(f"unknown checks {sorted(unknown)}; known: {', '.join(all_checks)}")
    out = []
    encs = [_as_encoder(spec) for spec in encoders]
    names = [e.name for e in encs]
    for enc in encs:
        label = enc.name if names.count(enc.name) == 1 else _label(enc)
        for backend in chosen:
            caps = _capabilities(enc, backend)
            for chk in all_checks.values():
                if wanted is not None and chk.name not in wanted:
                    continue
                if chk.kinds is not None and enc.kind not in chk.kinds:
                    continue
                if not chk.requires <= caps:
                    continue
                reason = expected.get(f"{backend.name}:{chk.name}", expected.get(chk.name))
                out.append(Case(enc, backend, chk, reason, label))
    return out


def _label(enc: Encoder) -> str:
    """``name(opt=value,...)`` with the options that differ from their defaults."""
    specs = type(enc)._option_specs
    parts = [
        f"{k}={v}" for k, v in enc.options.items()
        if specs[k].required or v != specs[k].default
    ]
    return f"{enc.name}({','.join(parts)})"


def parametrize_with_checks(
    encoders: Iterable[Any],
    *,
    backends: str | Sequence[str] | None = None,
    expected_failed_checks: Mapping[str, str] | None = None,
) -> Any:
    """A ``pytest.mark.parametrize`` over :func:`cases_for`, with ids
    ``<encoder>-<backend>-<check>`` and declared expected failures marked ``xfail(strict=True)``."""
    import pytest

    params = []
    for case in cases_for(encoders, backends=backends,
                          expected_failed_checks=expected_failed_checks):
        marks = []
        if case.expected_failure is not None:
            marks.append(pytest.mark.xfail(reason=case.expected_failure, strict=True,
                                           raises=CheckFailure))
        params.append(pytest.param(case, id=case.id, marks=marks))
    return pytest.mark.parametrize("case", params)


@dataclass(frozen=True)
class ReportRow:
    encoder: str
    backend: str
    check: str
    status: str  # "passed", "failed", "error", "xfail", "xpass"
    message: str = ""


@dataclass(frozen=True)
class Report:
    """Result of :func:`check_encoder`: one row per encoder x backend x check."""

    rows: tuple[ReportRow, ...]

    @property
    def ok(self) -> bool:
        """False if any check failed, errored, or passed although declared as expected to fail."""
        return all(r.status in ("passed", "xfail") for r in self.rows)

    @property
    def failures(self) -> list[ReportRow]:
        return [r for r in self.rows if r.status not in ("passed", "xfail")]

    def __str__(self) -> str:
        return format_table(self.rows)


def format_table(rows: Sequence[ReportRow]) -> str:
    head = ("encoder", "backend", "check", "status")
    body = [(r.encoder, r.backend, r.check, r.status) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=False)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for r, cells in zip(rows, body, strict=True):
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)))
        if r.message and r.status != "passed":
            lines.append(f"    {r.message}")
    n_bad = sum(r.status not in ("passed", "xfail") for r in rows)
    lines.append(f"{len(rows) - n_bad} ok, {n_bad} failed")
    return "\n".join(lines)


def run_case(case: Case) -> ReportRow:
    """Run one case and turn the outcome into a report row (never raises for a failing check)."""
    base = (case.encoder.name, case.backend.name, case.spec.name)
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


def check_encoder(
    name: Any,
    *,
    backends: str | Sequence[str] | None = None,
    expected_failed_checks: Mapping[str, str] | None = None,
    **options: Any,
) -> Report:
    """Run every applicable check of encoder ``name`` (built with ``options``) on every selected
    backend, and return the :class:`Report`. ``name`` may also be an encoder object."""
    spec = name if not isinstance(name, str) else (name, options)
    cases = cases_for([spec], backends=backends, expected_failed_checks=expected_failed_checks)
    return Report(tuple(run_case(c) for c in cases))
