"""The checks of issue 14, item 2, each shown catching the bug it exists for, on every selected
backend: a result cached by shape, a bias computed in float16, a relative embedding that clips
positions before subtracting, an ``init`` that ignores its seed or dtype, a bounded table that
wraps, and an output of the wrong framework named before its values. The built-ins pass them in
the conformance runs (tests/test_conformance*.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from mutants.references import RefTable
from test_conformance_laws import PlainBias, PlainSin
from test_one_init_path import PlainInitTable

import peregistry as per
from peregistry.encoders.rotary import Rotary
from peregistry.plugin import Ctx, distance, gather
from peregistry.testing import cases_for
from peregistry.testing._core import selected_backends
from peregistry.testing._report import run_case


@pytest.fixture(params=[b.name for b in selected_backends()])
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def failing(enc: per.Encoder, backend: str, *checks: str) -> dict[str, str]:
    """``{check: message}`` of the given checks that failed or errored."""
    cases = cases_for([enc], backends=backend, checks=checks)
    assert {c.spec.name for c in cases} == set(checks), "a check did not apply"
    rows = (run_case(c) for c in cases)
    return {r.check: r.message for r in rows if r.status not in ("passed", "xfail")}


# -- a result cached by shape ----------------------------------------------------------------------
class ShapeCachedSin(PlainSin):
    name = "test-shape-cached-sin"

    def encode(self, positions: Any, *, params: Any = None, dtype: Any = None) -> Any:
        cache = self._cache.setdefault("by_shape", {})
        key = (tuple(positions.shape), str(dtype))
        if key not in cache:
            cache[key] = super().encode(positions, params=params, dtype=dtype)
        return cache[key]


class ShapeCachedRotary(Rotary):
    name = "test-shape-cached-rotary"

    def rotate(self, x: Any, positions: Any = None, **kw: Any) -> Any:
        cache = self._cache.setdefault("by_shape", {})
        key = tuple(x.shape)
        if key not in cache:
            cache[key] = super().rotate(x, positions, **kw)
        return cache[key]


@pytest.mark.parametrize("make", [ShapeCachedSin, lambda: ShapeCachedRotary(dim=8)],
                         ids=["absolute", "rotary"])
def test_a_result_cached_by_shape_is_caught(make: Any, backend_name: str) -> None:
    # a new encoder per backend: one cache keyed by shape alone would hand the next backend
    # the previous one's arrays
    failed = failing(make(), backend_name, "check_fresh_positions")
    assert "cached by shape" in failed.get("check_fresh_positions", ""), failed


# -- precision lost alike on every backend ---------------------------------------------------------
class Float16Bias(PlainBias):
    """Computes the distances in float16 (exact below 2048, so every near probe passes)."""

    name = "test-float16-bias"

    def _bias(self, q: Any, k: Any, *, params: Any, ctx: Any, dtype: Any) -> Any:
        xp = ctx.xp
        d = xp.astype(k[..., None, :], xp.float16) - xp.astype(q[..., :, None], xp.float16)
        heads = xp.arange(1, self.num_heads + 1, dtype=ctx.wide, device=ctx.device)
        return -xp.abs(xp.astype(d, ctx.wide))[..., None, :, :] * heads[:, None, None]


def test_a_bias_computed_in_float16_is_caught_far_from_zero(backend_name: str) -> None:
    if backend_name == "array_api_strict":
        pytest.skip("array-api-strict has no float16 (the standard has none): no such bug there")
    failed = failing(Float16Bias(), backend_name, "check_far_range")
    assert "not finite" in failed.get("check_far_range", "") or \
        "k - q alone" in failed.get("check_far_range", ""), failed


# -- positions clipped before subtracting ----------------------------------------------------------
class ClippedFirst(PlainInitTable):
    """Shaw's table, but clipping each position to [0, M] before subtracting (the bug)."""

    name = "test-clipped-first"
    max_distance = per.Option(int, 8)
    dim = per.Option(int, 4)

    def _embed(self, q: Any, k: Any, *, params: Any, ctx: Ctx, dtype: Any) -> Any:
        m = self.max_distance
        qc, kc = ctx.xp.clip(q, 0, m), ctx.xp.clip(k, 0, m)
        return gather(params["table"], distance(qc, kc, ctx=ctx) + m, axis=0, ctx=ctx)


def test_clipping_positions_before_subtracting_is_caught(backend_name: str) -> None:
    failed = failing(ClippedFirst(), backend_name, "check_relative_toeplitz")
    assert "k - q alone" in failed.get("check_relative_toeplitz", ""), failed


# -- init ------------------------------------------------------------------------------------------
class Table(RefTable):
    """A correct bounded learned table that declares its range (the corpus's reference)."""

    name = "test-table"


class SeedIgnored(Table):
    name = "test-seed-ignored"

    def init(self, xp: Any, *, seed: int = 0, dtype: Any = None, device: Any = None) -> Any:
        return super().init(xp, seed=0, dtype=dtype, device=device)


class ConstantDrawn(Table):
    """Declares its table a constant (init_std 0) but draws it: the declaration would hide an
    ignored seed, so the suite holds it to its word."""

    name = "test-constant-drawn"

    def init_std(self, name: str) -> float:
        return 0.0

    def init(self, xp: Any, *, seed: int = 0, dtype: Any = None, device: Any = None) -> Any:
        return Table().init(xp, seed=seed, dtype=dtype, device=device)


class DtypeIgnored(Table):
    name = "test-dtype-ignored"

    def init(self, xp: Any, *, seed: int = 0, dtype: Any = None, device: Any = None) -> Any:
        return super().init(xp, seed=seed, dtype=None, device=device)


class Wrapping(Table):
    name = "test-wrapping"

    def _encode(self, positions: Any, *, params: Any, ctx: Ctx) -> Any:
        return gather(params["table"], positions % self.num_positions, axis=0, ctx=ctx)


def test_a_correct_bounded_table_passes_the_new_checks(backend_name: str) -> None:
    assert failing(Table(), backend_name, "check_init_seed", "check_init_placement",
                   "check_out_of_range_raises", "check_fresh_positions") == {}


@pytest.mark.parametrize(("enc", "check", "says"), [
    (SeedIgnored(), "check_init_seed", "the seed is ignored"),
    (ConstantDrawn(), "check_init_seed", "declared constant (init_std 0)"),
    (DtypeIgnored(), "check_init_placement", "of dtype"),
    (Wrapping(), "check_out_of_range_raises", "wrapped or clamped"),
], ids=["seed", "constant", "dtype", "wrap"])
def test_init_and_bounds_bugs_are_caught(enc: per.Encoder, check: str, says: str,
                                         backend_name: str) -> None:
    failed = failing(enc, backend_name, check)
    assert says in failed.get(check, ""), failed


# -- the framework of the output, before its values ------------------------------------------------
class NumpyOut(PlainSin):
    name = "test-numpy-out-values"

    def encode(self, positions: Any, *, params: Any = None, dtype: Any = None) -> Any:
        out = super().encode(positions, params=params, dtype=dtype)
        return np.asarray(per.registry.default_registry.backend_of(out).to_numpy(out))


def test_the_wrong_framework_is_named_before_values(backend_name: str) -> None:
    if backend_name == "numpy":
        pytest.skip("a NumPy array is the right output for NumPy input")
    failed = failing(NumpyOut(), backend_name, "check_matches_float64_numpy",
                     "check_fresh_positions")
    for message in failed.values():  # from the guard on overrides, before any value is read
        assert f"returned a numpy array for {backend_name} input" in message, failed
    assert len(failed) == 2
