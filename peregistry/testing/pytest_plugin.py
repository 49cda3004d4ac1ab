"""pytest plugin (entry point ``pytest11``): prints the suite's backend choice in the report
header and refuses a mistyped ``PEREGISTRY_BACKENDS`` before anything runs."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Resolve ``PEREGISTRY_BACKENDS`` once, before collection: a mistyped or uninstalled
    backend is a usage error, not an empty run."""
    from ._core import selected_backends

    try:
        config._peregistry_backends = [b.name for b in selected_backends()]  # type: ignore[attr-defined]
    except ValueError as exc:
        raise pytest.UsageError(f"peregistry: {exc}") from None


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The header line naming the backends under test and the variable that chose them."""
    import os

    from ._core import BACKENDS_ENV

    names = getattr(config, "_peregistry_backends", [])
    raw = os.environ.get(BACKENDS_ENV, "all (unset)")
    return [f"peregistry backends: {', '.join(names)} ({BACKENDS_ENV}={raw})"]
