"""Which cases apply: every encoder × selected backend × check whose kinds and required
capabilities match, and the pytest mark that makes one test of each (ids
``<encoder>-<backend>-<check>``, declared expected failures as strict ``xfail``, an encoder's
exemptions from a law of its kind as non-strict ``xfail`` that says so)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ._core import Case, CheckFailure, capabilities, selected_backends
from .checks import registered_checks

if TYPE_CHECKING:
    from ..kinds.base import Encoder

_F = TypeVar("_F", bound=Callable[..., Any])


def _as_encoder(spec: Any) -> Encoder:
    from ..kinds.base import Encoder
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
    chosen = selected_backends(backends if backends is None or isinstance(backends, str)
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
        exempt = exemptions(enc, all_checks)
        for backend in chosen:
            caps = capabilities(enc, backend)
            for chk in all_checks.values():
                if wanted is not None and chk.name not in wanted:
                    continue
                if chk.kinds is not None and enc.kind not in chk.kinds:
                    continue
                if not chk.requires <= caps:
                    continue
                reason = expected.get(f"{backend.name}:{chk.name}", expected.get(chk.name))
                out.append(Case(enc, backend, chk, expected_failure=reason,
                                exempt=exempt.get(chk.name), label=label))
    return out


def exemptions(enc: Encoder, known: Mapping[str, Any]) -> dict[str, str]:
    """The encoder's ``exempt_checks``, validated: known check names, each with a reason."""
    declared = enc.exempt_checks
    if not isinstance(declared, Mapping):
        raise TypeError(f"{enc.name}: exempt_checks must be a mapping of check name to reason, "
                        f"got {type(declared).__name__}")
    for key, reason in declared.items():
        if key not in known:
            raise ValueError(f"{enc.name}: exempt_checks names unknown check {key!r}; known: "
                             f"{', '.join(known)}")
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"{enc.name}: exempt_checks[{key!r}] needs a reason (a non-empty "
                             f"string saying why the law does not hold), got {reason!r}")
    return dict(declared)


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
) -> Callable[[_F], _F]:
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
        elif case.exempt is not None:
            marks.append(pytest.mark.xfail(reason=f"exempt: {case.exempt}", strict=False))
        params.append(pytest.param(case, id=case.id, marks=marks))
    mark: Callable[[_F], _F] = pytest.mark.parametrize("case", params)  # (typed: the test stays typed)
    return mark
