"""FIRE (issue 33, item 4) against the paper (Li et al. 2023, arXiv:2310.04418, eq. 6 and the
PyTorch listing of its appendix): the formula in float64 NumPy on every selected backend, the
listing as a torch module (``nn.Linear`` layers holding our params) for outputs and gradients,
and a training step on every backend with autodiff."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import peregistry as per


def reference(p: dict[str, np.ndarray[Any, Any]], q: np.ndarray[Any, Any],
              k: np.ndarray[Any, Any], init_L: float = 512.0, eps: float = 1e-6) -> Any:
    """``MLP(log(|c(i-j)| + 1) / (log(|c·max(i, |L_mult·init_L|)| + 1) + eps))`` in float64,
    as ``(heads, Q, K)``, the MLP written out unit by unit."""
    c, threshold = float(p["c"]), abs(float(p["L_multiplier"]) * init_L)
    out = np.zeros((p["w2"].shape[0], q.size, k.size))
    for a, i in enumerate(q.astype(np.float64)):
        norm = np.log(abs(c * max(i, threshold)) + 1.0) + eps
        for b, j in enumerate(k.astype(np.float64)):
            x = np.log(abs(c * (i - j)) + 1.0) / norm
            hidden = np.maximum(p["w1"][:, 0] * x + p["b1"], 0.0)
            out[:, a, b] = p["w2"] @ hidden + p["b2"]
    return out


def _params(enc: Any, seed: int = 1) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    p = {key: rng.standard_normal(shape) * 0.7 for key, shape in enc.param_shapes().items()}
    p["c"], p["L_multiplier"] = np.array(0.3), np.array(0.02)  # L = 0.02 * init_L
    return p


@pytest.mark.parametrize("options", [{}, {"mlp_width": 5, "init_L": 200.0, "eps": 0.0}])
def test_matches_the_paper(backend: Any, options: dict[str, Any]) -> None:
    enc = per.get_encoder("fire", num_heads=3, **options)
    params_np = _params(enc)
    # queries below and above the threshold L (0.02·init_L), keys before and after them
    q, k = np.array([0, 3, 9, 17, 300, 2**20]), np.array([0, 1, 9, 17, 40, 300, 2**20 + 5])
    wide = "float64" if "float64" in backend.float_dtypes() else "float32"
    params = {key: backend.from_numpy(v, dtype=backend.float_dtypes()[wide])
              for key, v in params_np.items()}
    got = backend.to_numpy(enc.bias(backend.from_numpy(q), backend.from_numpy(k), params=params))
    want = reference({key: backend.to_numpy(v).astype(np.float64) for key, v in params.items()},
                     q, k, init_L=enc.options["init_L"], eps=enc.options["eps"])
    eps = float(np.finfo(np.float64 if wide == "float64" else np.float32).eps)
    scale = float(np.abs(want).max())
    # a few roundings in log1p, the division and each MLP layer (mlp_width terms)
    np.testing.assert_allclose(got, want, rtol=0, atol=64 * eps * scale)
    assert got.shape == (3, 6, 7)
    # not a function of k - q alone: the normalizer follows the query past the threshold
    near, far = (backend.to_numpy(enc.bias(backend.from_numpy(np.array([i])),
                                           backend.from_numpy(np.array([i - 10])), params=params))
                 for i in (20, 400))
    assert not np.allclose(near, far)


def test_fresh_params() -> None:
    enc = per.get_encoder("fire", num_heads=4, init_c=0.25)
    p = enc.init(np, seed=0, dtype=np.float64)
    assert {k: v.shape for k, v in p.items()} == {"w1": (32, 1), "b1": (32,), "w2": (4, 32),
                                                   "b2": (4,), "c": (), "L_multiplier": ()}
    assert float(p["c"]) == float(np.float32(0.25)) and float(p["L_multiplier"]) == 1.0
    # nn.Linear's variances: 1/3 for the first layer (fan_in 1), 1/96 for the second (32)
    assert 0.2 < float(np.var(np.concatenate([p["w1"][:, 0], p["b1"]]))) < 0.5
    assert 0.004 < float(np.var(p["w2"])) < 0.02
    other = enc.init(np, seed=1, dtype=np.float64)
    assert float(other["c"]) == float(p["c"]) and not np.array_equal(other["w2"], p["w2"])


def test_bad_options() -> None:
    for option, value in (("mlp_width", 0), ("init_c", 0.0), ("init_L", -1.0), ("eps", -1e-6)):
        with pytest.raises(ValueError, match=f"option '{option}'"):
            per.get_encoder("fire", num_heads=2, **{option: value})


def test_trains(backend: Any) -> None:
    """After one training step the output is the formula at the new values, and every
    parameter received a gradient."""
    grad = backend.grad
    if grad(lambda p: p["x"]) is None:
        pytest.skip(f"{backend.name} has no autodiff")
    enc = per.get_encoder("fire", num_heads=2, mlp_width=6, init_L=8.0)
    wide = "float64" if "float64" in backend.float_dtypes() else "float32"
    dt = backend.float_dtypes()[wide]
    params = enc.init(backend.native(), seed=3, dtype=dt)
    q, k = np.arange(12), np.arange(12)
    qb, kb = backend.from_numpy(q), backend.from_numpy(k)
    mask = backend.from_numpy((k[None, :] <= q[:, None]).astype(np.float64), dtype=dt)

    def loss(p: Any) -> Any:
        return ((enc.bias(qb, kb, params=p) * mask - 1.0) ** 2).sum()

    g = grad(loss)(params)
    assert all(float(np.abs(backend.to_numpy(g[key])).max()) > 0 for key in g)
    new = {key: params[key] - 1e-4 * g[key] for key in params}  # a small step: loss falls
    got = backend.to_numpy(enc.bias(qb, kb, params=new))
    want = reference({key: backend.to_numpy(v).astype(np.float64) for key, v in new.items()},
                     q, k, init_L=8.0)
    eps = float(np.finfo(np.float64 if wide == "float64" else np.float32).eps)
    np.testing.assert_allclose(got, want, rtol=0, atol=64 * eps * float(np.abs(want).max()))
    assert float(backend.to_numpy(loss(new))) < float(backend.to_numpy(loss(params)))


def test_against_the_papers_torch_listing(backend: Any) -> None:
    """The appendix's module (``nn.Sequential(Linear(1, w), ReLU(), Linear(w, H))``, ``c``,
    ``L_multiplier``, ``init_L``) holding our params, in float64: equal outputs on positions
    ``arange(seq)`` and equal gradients of every param."""
    if backend.name != "torch":
        pytest.skip("the listing is a torch module (the torch env)")
    import torch

    heads, width, init_L, seq = 3, 8, 6.0, 20
    enc = per.get_encoder("fire", num_heads=heads, mlp_width=width, init_L=init_L)
    np_params = {k: np.asarray(v) for k, v in enc.init(np, seed=5, dtype=np.float64).items()}
    mlp = torch.nn.Sequential(torch.nn.Linear(1, width), torch.nn.ReLU(),
                              torch.nn.Linear(width, heads)).double()
    with torch.no_grad():
        for layer, (w, b) in ((mlp[0], ("w1", "b1")), (mlp[2], ("w2", "b2"))):
            layer.weight.copy_(torch.from_numpy(np_params[w]))
            layer.bias.copy_(torch.from_numpy(np_params[b]))
    c = torch.tensor(float(np_params["c"]), dtype=torch.float64, requires_grad=True)
    mult = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    positions = torch.arange(seq, dtype=torch.float64)
    rel = positions[:, None] - positions[None, :]
    normalizer = torch.max(positions, torch.abs(mult * init_L))[:, None]
    x = torch.log(torch.abs(c * rel) + 1) / (torch.log(torch.abs(c * normalizer) + 1) + 1e-6)
    want = mlp(x.unsqueeze(-1)).permute(2, 0, 1)
    weight = torch.from_numpy(np.random.default_rng(0).standard_normal((heads, seq, seq)))
    (want * weight).sum().backward()

    params = {k: torch.tensor(v, requires_grad=True) for k, v in np_params.items()}
    got = enc.bias(torch.arange(seq), torch.arange(seq), params=params)
    (got * weight).sum().backward()
    eps = torch.finfo(torch.float64).eps
    scale = float(want.detach().abs().max())
    torch.testing.assert_close(got, want, rtol=0, atol=64 * eps * scale)
    theirs = {"w1": mlp[0].weight.grad, "b1": mlp[0].bias.grad, "w2": mlp[2].weight.grad,
              "b2": mlp[2].bias.grad, "c": c.grad, "L_multiplier": mult.grad}
    for key, g in theirs.items():
        assert g is not None
        mine = params[key].grad
        assert mine is not None
        torch.testing.assert_close(mine, g, rtol=1e-10, atol=1e-10 * float(g.abs().max() + 1))
    assert float(theirs["L_multiplier"].abs()) > 0  # queries below L: the threshold is live
