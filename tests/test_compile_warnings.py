"""The conformance suite accepts the ecosystem's standard idiom: a rotary plugin whose ``rotate``
override gets its namespace with ``array_api_compat.array_namespace(x)`` passes the compile
checks on every backend, though Dynamo warns that it traces through array-api-compat's
``lru_cache``; a warning that signals a real fault still fails them (issue 30, item 11)."""

from __future__ import annotations

import warnings
from typing import Any

import array_api_compat
import pytest

import peregistry as per
from peregistry.plugin import Ctx, Frequencies, cos_sin
from peregistry.testing._cases import cases_for
from peregistry.testing._compile_warnings import is_fault
from peregistry.testing._report import run_case

CHECKS = ["check_rotary_jit_traces_once", "check_jit"]


class NamespaceRope(per.RotaryEncoder):
    """RoPE whose rotate override finds its namespace the standard Array API way."""

    name = "test-namespace-rope"
    __slots__ = ()
    dim = per.Option(int, 8)

    def _half_cos_sin(self, positions: Any, *, ctx: Ctx, seq_len: int | None) -> Any:
        freqs = Frequencies.from_omega(10000.0 ** (-2 * i / self.dim) for i in range(self.dim // 2))
        return cos_sin(positions, freqs, ctx=ctx)

    def rotate(self, x: Any, positions: Any = None, *, offset: Any = 0, params: Any = None,
               seq_len: int | None = None) -> Any:
        xp = array_api_compat.array_namespace(x)
        out = super().rotate(x, positions, offset=offset, params=params, seq_len=seq_len)
        return out * xp.asarray(1.0, dtype=out.dtype, device=array_api_compat.device(out))


class WarningRope(NamespaceRope):
    """The same, warning from its own code on every trace: a fault the check must report."""

    name = "test-warning-rope"
    __slots__ = ()

    def rotate(self, x: Any, positions: Any = None, *, offset: Any = 0, params: Any = None,
               seq_len: int | None = None) -> Any:
        warnings.warn("positions beyond the trained length", UserWarning, stacklevel=2)
        return super().rotate(x, positions, offset=offset, params=params, seq_len=seq_len)


def _forget_dynamo_notices(backend: Any) -> None:
    """Dynamo warns each message once per process: forget which, so this test sees them."""
    if backend.name == "torch":
        import torch._dynamo.utils

        torch._dynamo.utils.warn_once_cache.clear()


def _compiling(backend: Any) -> None:
    if backend.jit(lambda: None) is None:
        pytest.skip(f"{backend.name} has no tracing compiler")


def test_the_idiom_warns_under_torch_compile(backend: Any, xp: Any) -> None:
    """The premise: the idiom does make Dynamo warn (else the next test would prove nothing)."""
    if backend.name != "torch":
        pytest.skip("Dynamo's notice is torch.compile's")
    import torch

    _forget_dynamo_notices(backend)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: array_api_compat.array_namespace(x).sin(x), fullgraph=True,
                             backend="eager")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled(torch.zeros(3))
    notices = [w for w in caught if "lru_cache" in str(w.message)]
    assert notices, [str(w.message)[:80] for w in caught]
    assert not any(is_fault(w) for w in notices)


@pytest.mark.parametrize("check", CHECKS)
def test_array_namespace_override_passes(backend: Any, check: str) -> None:
    _compiling(backend)
    _forget_dynamo_notices(backend)
    (case,) = cases_for([NamespaceRope()], backends=[backend.name], checks=[check])
    row = run_case(case)
    assert row.status == "passed", row.message


def test_a_warning_of_the_encoder_still_fails(backend: Any) -> None:
    _compiling(backend)
    (case,) = cases_for([WarningRope()], backends=[backend.name],
                        checks=["check_rotary_jit_traces_once"])
    row = run_case(case)
    assert row.status == "failed", row
    assert "positions beyond the trained length" in row.message or "raised" in row.message


def _message(text: str, filename: str) -> warnings.WarningMessage:
    return warnings.WarningMessage(UserWarning(text), UserWarning, filename, 1)


DYNAMO = "/site-packages/torch/_dynamo/variables/functions.py"


@pytest.mark.parametrize(("text", "filename", "fault"), [
    ("Dynamo detected a call to a `functools.lru_cache`-wrapped function", DYNAMO, False),
    ("Graph break from `Tensor.item()`", DYNAMO, True),
    ("torch._dynamo hit config.recompile_limit (8)", "/torch/_dynamo/convert_frame.py", True),
    ("Recompiling function fn", DYNAMO, True),
    ("Explicitly requested dtype float64 is not available", "/jax/_src/numpy/lax_numpy.py", True),
    ("positions beyond the trained length", "/my_plugin/rope.py", True),
])
def test_which_warnings_are_faults(text: str, filename: str, fault: bool) -> None:
    assert is_fault(_message(text, filename)) is fault
