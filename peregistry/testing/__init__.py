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

from ._cases import cases_for, parametrize_with_checks
from ._core import BACKENDS_ENV, Case, CheckFailure, CheckSpec, check
from ._report import Report, ReportRow, check_encoder
from ._report import format_table as format_table  # for the CLI
from ._report import run_case as run_case
from .checks import registered_checks
from .kernels import check_rotation_kernel

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
    "check_rotation_kernel",
    "parametrize_with_checks",
    "registered_checks",
]
