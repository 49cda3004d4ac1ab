"""The suite is itself tested: deliberately broken encoders, each caught by the right check.

Complements ``test_conformance.py`` (wrong dtype, NumPy array for other input, broken shift law)
and ``test_conformance_learned_relative.py`` (Toeplitz, causal, slopes, stale params): here an
input mutated, the rotary relative law broken by one frequency pair, a non-deterministic
encoder, one that breaks under ``jax.jit``/``torch.compile``, and one that drops the device.
Each test runs per selected backend; where a backend cannot show the fault, it is skipped with
the reason.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np
import pytest
from test_conformance import GoodSin

import peregistry as per
from peregistry.encoders.rotary import Rotary
from peregistry.testing import cases_for, check_encoder
from peregistry.testing._core import selected_backends
from peregistry.testing._report import run_case


@pytest.fixture(params=[b.name for b in selected_backends()])
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def failing(enc: per.Encoder, backend: str, *checks: str) -> dict[str, str]:
    """``{check: message}`` of every one of ``checks`` that failed or errored (the checks a test
    asserts on, caught or not: the others would only cost time)."""
    rows = (run_case(c) for c in cases_for([enc], backends=backend, checks=checks))
    return {r.check: r.message for r in rows if r.status not in ("passed", "xfail")}


def backend_of(x: Any) -> Any:
    b = per.registry.default_registry.backend_of(x)
    assert b is not None
    return b


# -- input mutated ---------------------------------------------------------------------------------
class Mutating(GoodSin):
    """Computes the right result, then writes into its positions (an in-place "normalisation")."""

    name = "test-mutating"

    def encode(self, positions: Any, *, params: Any = None, dtype: Any = None) -> Any:
        out = super().encode(positions, params=params, dtype=dtype)
        positions[...] = positions + 1
        return out


def test_input_mutation_is_caught(backend_name: str) -> None:
    if backend_name == "jax":
        pytest.skip("jax arrays are immutable: an encoder cannot write into its input")
    failed = failing(Mutating(dim=8), backend_name, "check_inputs_not_mutated")
    assert "check_inputs_not_mutated" in failed
    assert "input 'positions' was modified by the call, but should be unchanged" in \
        failed["check_inputs_not_mutated"]


# -- rotary relative law broken by one pair -------------------------------------------------------
class OnePairOff(Rotary):
    """RoPE whose last frequency pair turns by ``1e-6·p²`` instead of ``p·ω``: still a rotation
    (norms kept), but that one pair's angle is not linear in the position."""

    name = "test-rope-one-pair-off"

    def _half_cos_sin(self, positions: Any, *, ctx: Any, seq_len: int | None) -> tuple[Any, Any]:
        cos, sin = super()._half_cos_sin(positions, ctx=ctx, seq_len=seq_len)
        xp = ctx.xp
        p = xp.astype(positions, ctx.wide)
        bad = 1e-6 * p * p
        return (xp.concat((cos[..., :-1], xp.cos(bad)[..., None]), axis=-1),
                xp.concat((sin[..., :-1], xp.sin(bad)[..., None]), axis=-1))


def test_rotary_relative_law_broken_by_one_pair_is_caught(backend_name: str) -> None:
    enc = OnePairOff(dim=16)
    failed = failing(enc, backend_name, "check_rotary_relative", "check_rotary_norm_preserved",
                     "check_shapes", "check_dtype_preserved")
    assert "check_rotary_relative" in failed
    assert "should depend only on m - n" in failed["check_rotary_relative"]
    # ... and not mistaken for a broken rotation: norms are still preserved.
    assert "check_rotary_norm_preserved" not in failed
    assert "check_shapes" not in failed and "check_dtype_preserved" not in failed


def test_the_unbroken_rotary_passes_the_same_checks(backend_name: str) -> None:
    report = check_encoder(Rotary(dim=16), backends=backend_name)
    assert report.ok, str(report)


# -- non-deterministic ----------------------------------------------------------------------------
_calls = itertools.count()


class Flaky(GoodSin):
    """Every other call is off by a few ulps (as a racy reduction or a stray RNG would be)."""

    name = "test-flaky"

    def _encode(self, positions: Any, *, params: Any, ctx: Any) -> Any:
        out = super()._encode(positions, params=params, ctx=ctx)
        return out * (1.0 + 1e-6 * (next(_calls) % 2))


def test_non_determinism_is_caught(backend_name: str) -> None:
    failed = failing(Flaky(dim=8), backend_name, "check_deterministic")
    assert "check_deterministic" in failed
    assert "two identical calls differ by up to" in failed["check_deterministic"]


# -- breaks under jax.jit / torch.compile ---------------------------------------------------------
class NotTraceable(GoodSin):
    """Reads a value out of its positions (``float(xp.max(p))``) to validate them: fine
    eagerly, impossible on a tracer."""

    name = "test-not-traceable"

    def _encode(self, positions: Any, *, params: Any, ctx: Any) -> Any:
        if positions.ndim and float(ctx.xp.max(positions)) > 1e9:
            raise ValueError("positions too large")
        return super()._encode(positions, params=params, ctx=ctx)


def test_breaking_under_jit_is_caught(backend_name: str) -> None:
    backend = per.registry.default_registry.backend(backend_name)
    if backend.jit(lambda: None) is None:
        pytest.skip(f"{backend_name} has no tracing compiler, so check_jit does not apply")
    failed = failing(NotTraceable(dim=8), backend_name, "check_jit", "check_matches_float64_numpy")
    assert "check_jit" in failed
    assert re.search(r"jit( with the sequence axes dynamic)? raised", failed["check_jit"])
    assert "but should compile" in failed["check_jit"]
    assert "check_matches_float64_numpy" not in failed  # eager results are right


# -- device dropped -------------------------------------------------------------------------------
class DeviceDropped(GoodSin):
    """Round-trips its output through the host, landing on the default device."""

    name = "test-device-dropped"

    def encode(self, positions: Any, *, params: Any = None, dtype: Any = None) -> Any:
        out = super().encode(positions, params=params, dtype=dtype)
        b = backend_of(out)
        return b.from_numpy(np.asarray(b.to_numpy(out)), dtype=out.dtype)


def test_dropped_device_is_caught(backend_name: str) -> None:
    backend = per.registry.default_registry.backend(backend_name)
    if len(backend.test_devices()) < 2:
        pytest.skip(f"{backend_name} offers one device here ({backend.test_devices()[0]}); "
                    f"array_api_strict's device1 shows this without a GPU")
    failed = failing(DeviceDropped(dim=8), backend_name, "check_device_preserved")
    assert "check_device_preserved" in failed
    assert "but should be" in failed["check_device_preserved"]
    assert "(the input's)" in failed["check_device_preserved"]
