"""The conformance suite run on the built-in encoders, and tests of the suite's own machinery."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import peregistry as per
from peregistry.backends._torch import COMPILE_BACKEND_ENV
from peregistry.testing import Case, CheckFailure, cases_for, check_encoder, parametrize_with_checks
from peregistry.testing._core import selected_backends
from peregistry.testing._report import run_case

BUILTIN_CASES = [
    ("sinusoidal", {"dim": 8}),
    ("sinusoidal", {"dim": 64, "layout": "split"}),
    ("sinusoidal", {"dim": 2, "base": 100.0}),
    # chunks of 48 and 40 tokens: the suite's positions (up to 4000) cross many of them
    ("dual-chunk", {"dim": 16, "chunk_size": 64, "local_size": 16}),
    ("dual-chunk", {"dim": 24, "rotary_dim": 16, "chunk_size": 40, "local_size": 0,
                    "layout": "interleaved"}),
]


@parametrize_with_checks(BUILTIN_CASES)
def test_conformance(case: Case) -> None:
    case.run()


# -- torch.compile with inductor, once per family -----------------------------------------------
# conftest.py makes aot_eager the suite's torch.compile backend (graph capture without C++ code
# generation); inductor compiles C++ per graph, so it runs here for one encoder of each family.
INDUCTOR_CASES = [
    ("sinusoidal", {"dim": 8}),
    ("rotary", {"dim": 64}),
    ("mrope", {"dim": 16, "sections": (2, 3, 3)}),
    ("learned", {"num_positions": 16, "dim": 4}),
    ("t5", {"num_heads": 4}),
    ("transformer-xl", {"dim": 8}),
]


def _inductor_cases() -> list[Any]:
    if "torch" not in [b.name for b in selected_backends()]:
        return []
    return [pytest.param(c, id=c.id) for c in cases_for(
        INDUCTOR_CASES, backends="torch", checks=["check_jit", "check_rotary_jit_traces_once"])]


@pytest.mark.parametrize("case", _inductor_cases())
def test_torch_compile_with_inductor(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(COMPILE_BACKEND_ENV, "inductor")
    case.run()


# -- broken encoders are caught by the right check -----------------------------------------------
class GoodSin(per.AbsoluteEncoder):
    """A second, independent sinusoid used as the base of the broken variants below."""

    name = "test-good-sin"
    continuous = True
    properties = frozenset({"shift-linear", "shift-invariant-dot"})
    dim = per.Option(int)

    def example_positions(self, rng: Any, shape: tuple[int, ...]) -> Any:
        # The naive float32 product p·ω loses ~p·eps: keep positions small so that this simple
        # reference stays within the float32 tolerance on float32-only backends (jax, no x64).
        return rng.integers(0, 64, size=shape)

    def _angles(self, positions: Any, ctx: Any) -> Any:
        xp = ctx.xp
        i = xp.arange(self.dim // 2, dtype=ctx.wide, device=ctx.device)
        omega = xp.exp(-(2.0 * i / self.dim) * float(np.log(10000.0)))
        return xp.astype(positions, ctx.wide)[..., None] * omega

    def _encode(self, positions: Any, *, params: Any, ctx: Any) -> Any:
        a = self._angles(positions, ctx)
        return ctx.xp.concat((ctx.xp.sin(a), ctx.xp.cos(a)), axis=-1)


class WrongDtype(GoodSin):
    """Ignores half-precision requests and returns float32 (a common bug)."""

    name = "test-wrong-dtype"

    def encode(self, positions: Any, *, params: Any = None, dtype: Any = None) -> Any:
        out = super().encode(positions, params=params, dtype=dtype)
        backend = per.registry.default_registry.backend_of(out)
        if backend.dtype_name(out.dtype) in ("float16", "bfloat16"):
            return backend.namespace().astype(out, backend.float_dtypes()["float32"])
        return out


class NumpyOut(GoodSin):
    name = "test-numpy-out"

    def encode(self, positions: Any, *, params: Any = None, dtype: Any = None) -> Any:
        out = super().encode(positions, params=params, dtype=dtype)
        return per.registry.default_registry.backend_of(out).to_numpy(out)


class BrokenLaw(GoodSin):
    """Frequencies drift with the position: no longer a rotation of PE(p)."""

    name = "test-broken-law"

    def _angles(self, positions: Any, ctx: Any) -> Any:
        a = super()._angles(positions, ctx)
        p = ctx.xp.astype(positions, ctx.wide)[..., None]
        return a * (1.0 + 1e-5 * p)


def failing_checks(enc: per.Encoder, backend: str, *checks: str) -> set[str]:
    """Which of ``checks`` (the ones a test asserts on) fail or error."""
    rows = (run_case(c) for c in cases_for([enc], backends=backend, checks=checks))
    return {r.check for r in rows if r.status not in ("passed", "xfail")}


@pytest.fixture(params=[b.name for b in selected_backends()])
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_good_reference_encoder_passes(backend_name: str) -> None:
    report = check_encoder(GoodSin(dim=8), backends=backend_name)
    assert report.ok, str(report)


def test_wrong_dtype_is_caught(backend_name: str) -> None:
    if backend_name == "array_api_strict":
        pytest.skip("array_api_strict has no half precision, where this encoder goes wrong")
    assert "check_dtype_preserved" in failing_checks(WrongDtype(dim=8), backend_name,
                                                       "check_dtype_preserved")


def test_numpy_output_for_other_input_is_caught(backend_name: str) -> None:
    if backend_name == "numpy":
        pytest.skip("NumPy output is right for NumPy input")
    assert "check_namespace_preserved" in failing_checks(NumpyOut(dim=8), backend_name,
                                                           "check_namespace_preserved")


def test_broken_shift_law_is_caught(backend_name: str) -> None:
    failed = failing_checks(BrokenLaw(dim=8), backend_name, "check_shift_linear",
                            "check_shift_invariant_dot")
    assert {"check_shift_linear", "check_shift_invariant_dot"} <= failed


@pytest.mark.backend_free  # checks on numpy, named in the call
def test_failure_message_says_expected_and_came() -> None:
    report = check_encoder(WrongDtype(dim=8), backends="numpy")
    row = next(r for r in report.failures if r.check == "check_dtype_preserved")
    # WrongDtype overrides encode: the base class's guard on overrides names it.
    assert ("WrongDtype.encode (an override of the base class's) returned dtype float32, but "
            "should return float16") in row.message
    assert row.message.startswith("[test-wrong-dtype-numpy-check_dtype_preserved]")
    assert "failed" in str(report)


# -- expected failures ---------------------------------------------------------------------------
@pytest.mark.backend_free  # checks on numpy, named in the call
def test_expected_failure_with_reason_is_xfail_and_unexpected_pass_is_reported() -> None:
    # Every call asking for float16 meets the guard on overrides, comparisons of values too.
    report = check_encoder(WrongDtype(dim=8), backends="numpy",
                           expected_failed_checks={"check_dtype_preserved": "casts to float32",
                                                   "check_matches_float64_numpy": "the same"})
    assert report.ok
    row = next(r for r in report.rows if r.check == "check_dtype_preserved")
    assert row.status == "xfail" and "casts to float32" in row.message
    report = check_encoder(GoodSin(dim=8), backends="numpy",
                           expected_failed_checks={"check_deterministic": "claims to be random"})
    assert not report.ok
    assert next(r for r in report.rows if r.check == "check_deterministic").status == "xpass"


@pytest.mark.backend_free  # checks on numpy, named in the call
def test_expected_failure_naming_an_unknown_check_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown check 'check_dtypes'"):
        check_encoder("sinusoidal", dim=8, backends="numpy",
                      expected_failed_checks={"check_dtypes": "typo"})


@pytest.mark.backend_free  # checks on numpy, named in the call
def test_case_run_raises_check_failure_with_id() -> None:
    (case,) = cases_for([WrongDtype(dim=8)], backends="numpy", checks=["check_dtype_preserved"])
    with pytest.raises(CheckFailure, match=r"^\[test-wrong-dtype-numpy-check_dtype_preserved\]"):
        case.run()


@pytest.mark.backend_free  # checks on numpy, named in the call
def test_checks_are_chosen_by_kind_and_capability() -> None:
    class Plain(GoodSin):
        name = "test-plain"
        continuous = False
        properties = frozenset()

    names = {c.spec.name for c in cases_for([Plain(dim=4)], backends="numpy")}
    assert "check_shift_linear" not in names and "check_real_positions" not in names
    assert "check_jit" not in names  # numpy has no jit
    assert {"check_dtype_preserved", "check_matches_float64_numpy"} <= names


# -- backend selection ---------------------------------------------------------------------------
def run_pytest(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        capture_output=True, text=True, env={**os.environ, **env}, check=False,
        cwd=os.path.dirname(__file__),
    )


@pytest.mark.backend_free  # checks on numpy, named in the call
def test_backend_typo_is_an_error_not_an_empty_run() -> None:
    out = run_pytest(["--collect-only", "-q", "test_options.py"], {"PEREGISTRY_BACKENDS": "nupmy"})
    assert out.returncode != 0
    assert "PEREGISTRY_BACKENDS='nupmy': unknown backend 'nupmy'" in out.stderr + out.stdout


@pytest.mark.backend_free  # checks on numpy, named in the call
def test_header_prints_the_choice_and_ids_name_encoder_backend_check() -> None:
    out = run_pytest(["--collect-only", "-q", "test_conformance.py::test_conformance", "-v"],
                     {"PEREGISTRY_BACKENDS": "numpy"})
    assert out.returncode == 0, out.stderr
    assert "peregistry backends: numpy (PEREGISTRY_BACKENDS=numpy)" in out.stdout
    assert "test_conformance[sinusoidal(dim=8)-numpy-check_dtype_preserved]" in out.stdout
    assert "test_conformance[sinusoidal(dim=64,layout=split)-numpy-check_jit]" not in out.stdout
    assert "-torch-" not in out.stdout
