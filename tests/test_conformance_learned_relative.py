"""The conformance suite on the learned and relative encoders, and proof that the new checks
(Toeplitz law, causal future buckets, ALiBi slopes, gradients, fresh params, params errors)
catch encoders that break them."""

from __future__ import annotations

from typing import Any

import pytest

import peregistry as per
from peregistry.encoders.learned import Learned
from peregistry.encoders.relative import ALiBi, T5Bias
from peregistry.testing import Case, cases_for, parametrize_with_checks
from peregistry.testing._core import selected_backends
from peregistry.testing._report import run_case

CASES = [
    ("learned", {"num_positions": 16, "dim": 4}),
    ("learned-2d", {"height": 5, "width": 6, "dim": 3}),
    ("t5", {"num_heads": 4}),
    ("t5", {"num_heads": 3, "bidirectional": False, "num_buckets": 16, "max_distance": 20}),
    ("alibi", {"num_heads": 8}),
    ("alibi", {"num_heads": 6}),
    ("shaw", {"max_distance": 4, "dim": 5}),
    ("transformer-xl", {"dim": 8}),
    ("kerple", {"num_heads": 4}),
    ("kerple", {"num_heads": 3, "variant": "power"}),
    ("fire", {"num_heads": 4}),
    ("fire", {"num_heads": 3, "mlp_width": 8, "init_c": 0.5, "init_L": 4.0}),
    ("fope", {"dim": 16, "max_position_embeddings": 64}),
    ("fope", {"dim": 16, "max_position_embeddings": 64, "num_inv_freq": 5, "sep_head": True,
              "num_kv_heads": 1, "layout": "interleaved", "init_factor": 0.5}),
]


@parametrize_with_checks(CASES)
def test_conformance(case: Case) -> None:
    case.run()


@pytest.fixture(params=[b.name for b in selected_backends()])
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def failing(enc: per.Encoder, backend: str, *checks: str) -> set[str]:
    """Which of ``checks`` (the ones a test asserts on) fail or error."""
    rows = (run_case(c) for c in cases_for([enc], backends=backend, checks=checks))
    return {r.check for r in rows if r.status not in ("passed", "xfail")}


class QueryDependentT5(T5Bias):
    """Adds a term in the query position: no longer a function of k - q."""

    name = "test-t5-query-dependent"

    def _bias(self, q: Any, k: Any, *, params: Any, ctx: Any, dtype: Any) -> Any:
        out = super()._bias(q, k, params=params, ctx=ctx, dtype=dtype)
        xp = ctx.xp
        return out + 1e-3 * xp.astype(xp.expand_dims(q, axis=-1), out.dtype)


class CausalLeaky(T5Bias):
    """Causal T5 whose future keys are bucketed like past ones."""

    name = "test-t5-causal-leaky"

    def _lut_index(self, d: Any, *, ctx: Any) -> Any:
        return super()._lut_index(-ctx.xp.abs(d), ctx=ctx)


class WrongSlopes(ALiBi):
    """Slopes 1/h instead of the paper's geometric sequence."""

    name = "test-alibi-wrong-slopes"

    @property
    def slopes(self) -> tuple[float, ...]:
        return tuple(1.0 / (h + 1) for h in range(int(self._values["num_heads"])))


class StaleLearned(Learned):
    """Caches its output by shape (as transformers' DETR embedding does)."""

    name = "test-learned-stale"

    def _encode(self, positions: Any, *, params: Any, ctx: Any) -> Any:
        key = ("out", tuple(positions.shape), str(ctx.backend.name))
        if key not in self._cache:
            self._cache[key] = super()._encode(positions, params=params, ctx=ctx)
        return self._cache[key]


class NoGradLearned(Learned):
    """Copies the table through the host: values right, gradient lost."""

    name = "test-learned-no-grad"

    def _encode(self, positions: Any, *, params: Any, ctx: Any) -> Any:
        table = ctx.backend.from_numpy(ctx.backend.to_numpy(params["table"]),
                                       dtype=params["table"].dtype, device=ctx.device)
        return super()._encode(positions, params={"table": table}, ctx=ctx)


class LaxParams(Learned):
    """Accepts any params dict (uses the first value whatever its key or shape)."""

    name = "test-learned-lax"

    def _check_params(self, params: Any, ctx: Any) -> Any:
        return {"table": next(iter(params.values()))}


def test_query_dependence_is_caught(backend_name: str) -> None:
    assert "check_relative_toeplitz" in failing(QueryDependentT5(num_heads=2), backend_name, "check_relative_toeplitz")


def test_future_keys_told_apart_is_caught(backend_name: str) -> None:
    enc = CausalLeaky(num_heads=2, bidirectional=False)
    assert "check_causal_future_alike" in failing(enc, backend_name, "check_causal_future_alike")


def test_wrong_alibi_slopes_are_caught(backend_name: str) -> None:
    assert "check_alibi_slopes" in failing(WrongSlopes(num_heads=8), backend_name, "check_alibi_slopes")


def test_stale_cache_is_caught(backend_name: str) -> None:
    assert "check_params_fresh" in failing(StaleLearned(num_positions=16, dim=4), backend_name, "check_params_fresh")


def test_lost_gradient_is_caught(backend_name: str) -> None:
    from peregistry.registry import default_registry

    if default_registry.backend(backend_name).grad(lambda p: None) is None:
        pytest.skip(f"{backend_name} has no autodiff")
    failed = failing(NoGradLearned(num_positions=16, dim=4), backend_name, "check_gradients")
    assert "check_gradients" in failed


def test_lax_params_are_caught(backend_name: str) -> None:
    enc = LaxParams(num_positions=16, dim=4)
    assert "check_bad_params_named" in failing(enc, backend_name, "check_bad_params_named")


def test_t5_properties_depend_on_options() -> None:
    assert "causal-future-alike" not in per.get_encoder("t5", num_heads=2).properties
    assert "causal-future-alike" in per.get_encoder("t5", num_heads=2,
                                                    bidirectional=False).properties
