"""KERPLE (issue 33, item 4) against the paper's formulas in float64 (Chi et al. 2022, eqs. 5-6,
as the authors' ``ParallelKerpleLog``/``ParallelKerplePower`` compute them: ``-p·log(1 + a·|d|)``
and ``-a·|d|^p``), on every selected backend, and trained: gradients reach both parameters."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import peregistry as per


def reference(variant: str, params: dict[str, np.ndarray[Any, Any]], q: np.ndarray[Any, Any],
              k: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The paper's bias in float64, with ``r = softplus(param)`` / ``2·sigmoid(param)``."""
    softplus = np.logaddexp(0.0, params["scale"])[:, None, None]
    d = np.abs(k[None, :] - q[:, None]).astype(np.float64)[None]
    if variant == "log":
        return -softplus * np.log(1.0 + np.logaddexp(0.0, params["rate"])[:, None, None] * d)
    power = 2.0 / (1.0 + np.exp(-params["power"]))[:, None, None]
    return -softplus * d ** power


@pytest.mark.parametrize("variant", ["log", "power"])
def test_matches_the_paper(backend: Any, xp: Any, variant: str) -> None:
    enc = per.get_encoder("kerple", num_heads=3, variant=variant)
    rng = np.random.default_rng(0)
    params_np = {k: rng.standard_normal(3) for k in enc.param_shapes()}
    q, k = np.array([0, 5, 17, 300]), np.array([0, 1, 9, 17, 40, 300])
    wide = "float64" if "float64" in backend.float_dtypes() else "float32"
    params = {key: backend.from_numpy(v, dtype=backend.float_dtypes()[wide])
              for key, v in params_np.items()}
    got = backend.to_numpy(enc.bias(backend.from_numpy(q), backend.from_numpy(k), params=params))
    want = reference(variant, {key: backend.to_numpy(v).astype(np.float64)
                               for key, v in params.items()}, q, k)
    eps = float(np.finfo(np.float64 if wide == "float64" else np.float32).eps)
    np.testing.assert_allclose(got, want, rtol=16 * eps, atol=16 * eps)
    assert got.shape == (3, 4, 6) and np.all(got <= 0)  # a penalty, 0 at distance 0
    assert np.all(got[:, 0, 0] == 0) and np.all(got[:, 2, 3] == 0)


def test_fresh_params_are_near_the_papers_start() -> None:
    log = per.get_encoder("kerple", num_heads=4)
    p = log.init(np, seed=0)
    assert set(p) == {"scale", "rate"} and p["scale"].shape == (4,)
    r1 = np.logaddexp(0.0, p["scale"])
    np.testing.assert_allclose(r1, np.log(2.0), atol=0.1)  # softplus(~0)
    power = per.get_encoder("kerple", num_heads=4, variant="power")
    assert set(power.param_shapes()) == {"scale", "power"}


def test_large_parameters_stay_finite() -> None:
    enc = per.get_encoder("kerple", num_heads=2, variant="power")
    params = {"scale": np.array([1e6, -1e6]), "power": np.array([1e6, -1e6])}
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # exp(-1e6) -> 0 is fine
        out = enc.bias(np.arange(4), np.arange(4), params=params)
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out[0, 0, 3], -1e6 * 9.0)  # r1 = 1e6, r2 = 2: -r1·3²


def test_bad_options() -> None:
    with pytest.raises(ValueError, match="variant"):
        per.get_encoder("kerple", num_heads=2, variant="cubic")


def test_power_variant_trains_with_ordinary_steps(backend: Any) -> None:
    """After one ordinary training step the output is the formula at the new values, and
    every parameter moved."""
    grad = backend.grad
    if grad(lambda p: p["x"]) is None:
        pytest.skip(f"{backend.name} has no autodiff")
    enc = per.get_encoder("kerple", num_heads=2, variant="power")
    wide = "float64" if "float64" in backend.float_dtypes() else "float32"
    dt = backend.float_dtypes()[wide]
    q, k = np.arange(6), np.arange(8)
    params = {key: backend.from_numpy(np.array([0.3, -0.2]), dtype=dt)
              for key in enc.param_shapes()}
    qb, kb = backend.from_numpy(q), backend.from_numpy(k)

    def loss(p: Any) -> Any:
        return (enc.bias(qb, kb, params=p) ** 2).sum()

    g = grad(loss)(params)
    new = {key: params[key] - 1e-3 * g[key] for key in params}
    got = backend.to_numpy(enc.bias(qb, kb, params=new))
    want = reference("power", {key: backend.to_numpy(v).astype(np.float64)
                               for key, v in new.items()}, q, k)
    eps = float(np.finfo(np.float64 if wide == "float64" else np.float32).eps)
    np.testing.assert_allclose(got, want, rtol=64 * eps, atol=64 * eps)
    assert all(float(np.abs(backend.to_numpy(g[key])).max()) > 0 for key in g)
    assert not np.allclose(got, backend.to_numpy(enc.bias(qb, kb, params=params)))
