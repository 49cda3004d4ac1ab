"""Conformance checks of relative encoders (kinds ``bias`` and ``relative-embedding``) and of
learned parameters (any kind).

Laws, selected by the encoder's declared properties:

* ``"relative"``: the output depends on ``k - q`` only — shifting every query and key position
  by one amount changes nothing, and for ``q = a + arange(Q)``, ``k = b + arange(K)`` the
  ``(Q, K)`` matrix is Toeplitz (constant along each diagonal);
* ``"causal-future-alike"``: every key after the query (``k - q >= 1``) gets the same output
  (T5's decoder buckets);
* ``"alibi-slopes"``: ``bias = -m_h·|q - k|`` with the slopes of Press et al. 2022: for ``n``
  heads and ``p`` the largest power of two <= ``n``, ``m_1..m_p`` is the geometric sequence
  ``r, r², …, r^p``, ``r = 2^(-8/p)``, and the remaining heads take ``2^(-4/p)^(1, 3, 5, …)``.

Learned parameters (capability ``"learned"``):

* gradients exist, are finite and match a central finite difference (float64 where the backend
  has it), through the framework's autodiff (``"grad"``: torch autograd, ``jax.grad``);
* two training steps in a row with the same shapes work and the second sees the new values
  (nothing derived from params is cached or carries autograd history);
* params with missing/extra keys or wrong shapes are rejected with an error naming what was
  expected.
"""

from __future__ import annotations

from typing import Any

from ._core import Case, CheckFailure, check
from ._drivers import DRIVERS, Probe, case_params, invoke, sample, to_backend


def _wide(case: Case) -> str:
    return "float64" if "float64" in case.float_dtypes else "float32"


def _err(a: Any, b: Any) -> float:
    import numpy as np

    return float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) if np.size(a) else 0.0


def _pair(case: Case, q: Any, k: Any, *, params: Any = None) -> Any:
    """The pair method (bias/embed) at NumPy positions, as float64 NumPy; params default to the
    case's seed-0 params in the wide dtype."""
    import numpy as np

    name = _wide(case)
    probe = Probe({"q_positions": np.asarray(q, dtype=np.int64),
                   "k_positions": np.asarray(k, dtype=np.int64)})
    if params is None and case.encoder.learned:
        params = case_params(case, case.encoder, name, None)
    return case.to_numpy(invoke(case, probe, dtype=name, params=params))


def _qk_axes(case: Case) -> tuple[int, int]:
    """Axes of Q and K in the output of one unbatched call."""
    return (-2, -1) if case.encoder.kind == "bias" else (-3, -2)


@check(kinds={"bias", "relative-embedding"}, requires={"relative"})
def check_relative_toeplitz(case: Case) -> None:
    """Output depends only on k - q: invariant under a common shift of q and k, and Toeplitz
    (constant diagonals) for consecutive positions."""
    import numpy as np

    qa, ka = _qk_axes(case)
    name = _wide(case)
    q = 200 + np.arange(6)
    k = 190 + np.arange(9)
    base = _pair(case, q, k)
    scale = max(1.0, float(np.max(np.abs(base))))
    tol = case.tolerance(name, steps=64, scale=scale)
    for s in (1, 37, 700):
        shifted = _pair(case, q + s, k + s)
        if _err(shifted, base) > tol:
            raise CheckFailure(f"output(q+{s}, k+{s}) differs from output(q, k) by "
                               f"{_err(shifted, base):.3g}, but should be equal (<= {tol:.3g}): "
                               f"the encoder does not depend on k - q alone")
    m = np.moveaxis(base, (qa, ka), (0, 1))
    diag = _err(m[1:, 1:], m[:-1, :-1])
    if diag > tol:
        raise CheckFailure(f"output[i+1, j+1] - output[i, j] = {diag:.3g} for consecutive q and "
                           f"k, but should be 0 (<= {tol:.3g}; Toeplitz in (q, k))")


@check(kinds={"bias", "relative-embedding"}, requires={"causal-future-alike"})
def check_causal_future_alike(case: Case) -> None:
    """Every future key (k - q >= 1) gets the same output, whatever its distance."""
    import numpy as np

    qa, ka = _qk_axes(case)
    name = _wide(case)
    future = np.asarray([1, 2, 3, 7, 50, 127, 128, 129, 1000, 5000])
    for q0 in (0, 300):
        out = _pair(case, [q0], q0 + future)
        m = np.moveaxis(out, (qa, ka), (0, 1))[0]  # (K, ...)
        spread = _err(m, m[:1])
        if spread > case.tolerance(name, steps=0.5):
            raise CheckFailure(f"outputs for future keys k - q in {future.tolist()} differ by "
                               f"{spread:.3g} (query at {q0}), but should be identical: a causal "
                               f"encoder treats all future distances alike")


def _paper_slopes(n: int) -> list[float]:
    import math

    p = 2 ** math.floor(math.log2(n))
    r = 2.0 ** (-8.0 / p)
    first = [r ** (i + 1) for i in range(p)]
    r2 = 2.0 ** (-4.0 / p)
    return first + [r2 ** (2 * i + 1) for i in range(n - p)]


@check(kinds={"bias"}, requires={"alibi-slopes"})
def check_alibi_slopes(case: Case) -> None:
    """bias = -m_h·|q - k| with the geometric slopes of the ALiBi paper (and its rule for head
    counts that are not powers of two)."""
    import numpy as np

    name = _wide(case)
    d = np.asarray([0, 1, 2, 5, 64, 1000])
    fwd = _pair(case, [3000], 3000 + d)[:, 0, :]  # (H, len(d))
    bwd = _pair(case, [3000], 3000 - d)[:, 0, :]
    slopes = -fwd[:, 1]
    n = slopes.shape[0]
    want = np.asarray(_paper_slopes(n))
    rel = float(np.max(np.abs(slopes - want) / want))
    if rel > 8 * case.tolerance(name):
        h = int(np.argmax(np.abs(slopes - want) / want))
        raise CheckFailure(f"slope of head {h} = {slopes[h]:.9g}, but should be {want[h]:.9g} "
                           f"(paper's rule for {n} heads: geometric, ratio 2^(-8/p)); "
                           f"all: {np.round(slopes, 6).tolist()}")
    lin = -want[:, None] * d[None, :]
    tol = case.tolerance(name, steps=16, scale=float(np.max(np.abs(lin))))
    for what, got in (("k - q = +d", fwd), ("k - q = -d", bwd)):
        if _err(got, lin) > tol:
            raise CheckFailure(f"bias at {what} differs from -m_h·d by {_err(got, lin):.3g}, but "
                               f"should be <= {tol:.3g} (linear in |q - k|, symmetric)")


# -- learned parameters --------------------------------------------------------------------------
def _numpy_params(case: Case, params: Any) -> dict[str, Any]:
    return {k: case.to_numpy(v) for k, v in params.items()}


def _loss_fn(case: Case, probe: Probe, arrays: Any, name: str, weight: Any,
             power: int) -> Any:
    """``params -> sum(weight · out**power)`` on the case's backend."""
    xp = case.xp

    def fn(params: Any) -> Any:
        out = invoke(case, probe, dtype=name, arrays=arrays, params=params)
        return xp.sum(weight * (out if power == 1 else out * out))

    return fn


def _fd_compare(case: Case, fn: Any, params_np: dict[str, Any], grads: dict[str, Any],
                name: str, what: str) -> None:
    """Compare ``grads`` with central finite differences of ``fn`` at a few coordinates of each
    param (the largest gradients and a few random ones)."""
    import numpy as np

    h = 1e-4 if name == "float64" else 1e-2
    for key, p in params_np.items():
        g = case.to_numpy(grads[key])
        flat = np.abs(g).ravel()
        picks = set(np.argsort(flat)[-3:].tolist())
        picks |= set(case.rng.integers(0, flat.size, size=2).tolist())
        for j in sorted(picks):
            idx = np.unravel_index(j, p.shape)
            vals = []
            for sign in (1.0, -1.0):
                pert = {kk: vv.copy() for kk, vv in params_np.items()}
                pert[key][idx] += sign * h
                arr = {kk: case.asarray(vv, dtype=name) for kk, vv in pert.items()}
                vals.append(float(case.to_numpy(fn(arr))))
            fd = (vals[0] - vals[1]) / (2 * h)
            mag = max(abs(vals[0]), abs(vals[1]), 1.0)
            tol = case.tolerance(name, steps=64, scale=mag) / h + 1e-3 * max(1.0, abs(fd))
            if name == "float64":
                tol = 1e-6 * max(1.0, abs(fd))
            if not abs(fd - g[idx]) <= tol:
                raise CheckFailure(f"d loss/d params[{key!r}]{list(idx)} = {g[idx]:.6g} by "
                                   f"{case.backend.name} autodiff, but the finite difference "
                                   f"gives {fd:.6g} (tolerance {tol:.3g}) [{what}]")


def _check_grads_shape_finite(case: Case, grads: Any, params_np: dict[str, Any],
                              what: str) -> None:
    import numpy as np

    if set(grads) != set(params_np):
        raise CheckFailure(f"gradient keys {sorted(grads)}, but should be {sorted(params_np)} "
                           f"[{what}]")
    for key, p in params_np.items():
        g = case.to_numpy(grads[key])
        if g.shape != p.shape:
            raise CheckFailure(f"gradient of params[{key!r}] has shape {g.shape}, but should be "
                               f"{p.shape} [{what}]")
        if not np.all(np.isfinite(g)):
            raise CheckFailure(f"gradient of params[{key!r}] has non-finite values, but should "
                               f"be finite [{what}]")
    if all(not np.any(case.to_numpy(grads[k])) for k in params_np):
        raise CheckFailure(f"every gradient is zero, but the output depends on the params "
                           f"[{what}]")


@check(requires={"learned", "grad"})
def check_gradients(case: Case) -> None:
    """Autodiff gradients of the params exist, are finite, and match a central finite
    difference (float64 where the backend has it)."""
    import numpy as np

    grad = case.backend.grad
    name = _wide(case)
    probe = sample(case)
    arrays = to_backend(case, probe, name)
    params = case_params(case, case.encoder, name, None)
    weight = case.asarray(case.rng.standard_normal(probe.expected_shape), dtype=name)
    fn = _loss_fn(case, probe, arrays, name, weight, power=1)
    g = grad(fn)
    assert g is not None
    try:
        grads = g(params)
    except Exception as exc:
        raise CheckFailure(f"{case.backend.name} autodiff raised {type(exc).__name__}: "
                           f"{str(exc)[:300]}, but gradients should flow") from exc
    params_np = {k: np.asarray(v, dtype=np.float64) for k, v in _numpy_params(case, params).items()}
    _check_grads_shape_finite(case, grads, params_np, "sum(w·out)")
    _fd_compare(case, fn, params_np, grads, name, "sum(w·out)")


@check(requires={"learned"})
def check_params_fresh(case: Case) -> None:
    """Two training steps with the same shapes work, and the second call sees the updated
    params (nothing derived from params is cached or keeps autograd history)."""
    import numpy as np

    name = _wide(case)
    probe = sample(case)
    arrays = to_backend(case, probe, name)
    p1 = case_params(case, case.encoder, name, None)
    weight = case.asarray(case.rng.standard_normal(probe.expected_shape), dtype=name)
    fn = _loss_fn(case, probe, arrays, name, weight, power=2)
    g = case.backend.grad(fn)
    out1 = case.to_numpy(invoke(case, probe, dtype=name, arrays=arrays, params=p1))
    if g is not None:
        try:
            g1 = g(p1)
            p2 = {k: v - 10.0 * g1[k] for k, v in p1.items()}  # one SGD step, backend arrays
            g2 = g(p2)
        except Exception as exc:
            raise CheckFailure(f"the second of two training steps raised {type(exc).__name__}: "
                               f"{str(exc)[:300]}, but should work (stale cache or autograd "
                               f"history kept from the first?)") from exc
    else:  # no autodiff: a new set of values, as an optimizer would produce
        p2 = {k: case.asarray(2.0 * case.to_numpy(v) + 0.5, dtype=name) for k, v in p1.items()}
    p2_np = {k: np.asarray(case.to_numpy(v), dtype=np.float64) for k, v in p2.items()}
    out2 = case.to_numpy(invoke(case, probe, dtype=name, arrays=arrays, params=p2))
    # The float64 NumPy result with the updated values, from a fresh encoder object (whose
    # instance caches are empty).
    fresh = type(case.encoder)(**case.encoder.options)
    ref_args = {k: np.asarray(v) for k, v in probe.args.items()}
    ref2 = np.asarray(DRIVERS[fresh.kind][1](fresh, ref_args, p2_np, np.float64),
                      dtype=np.float64)
    scale = max(1.0, float(np.max(np.abs(ref2))) if ref2.size else 1.0)
    tol = case.tolerance(name, steps=8, scale=scale)
    if _err(out2, ref2) > tol or _err(out2, out1) == 0.0:
        stale = " (it equals the first step's output: stale)" if _err(out2, out1) <= tol else ""
        raise CheckFailure(f"after a params update the output is {_err(out2, ref2):.3g} away from "
                           f"the result with the new values{stale}, but should match (<= "
                           f"{tol:.3g}) and differ from the output before the update")
    if g is not None:
        _check_grads_shape_finite(case, g2, p2_np, "second training step")
        _fd_compare(case, fn, p2_np, g2, name, "second training step, sum(w·out²)")


@check(requires={"learned"})
def check_bad_params_named(case: Case) -> None:
    """Params with a missing key, an extra key or a wrong shape raise an error that names what
    was expected."""
    probe = sample(case)
    name = _wide(case)
    good = case_params(case, case.encoder, name, None)
    shapes = case.encoder.param_shapes()
    first = next(iter(shapes))
    import numpy as np

    bad_shape = (*shapes[first][:-1], shapes[first][-1] + 1)
    variants = {
        "missing key": ({k: v for k, v in good.items() if k != first}, [repr(first)]),
        "extra key": ({**good, "bogus": good[first]}, [repr(first)]),
        "wrong shape": ({**good, first: case.asarray(np.zeros(bad_shape), dtype=name)},
                        [str(tuple(shapes[first])), first]),
    }
    for what, (params, must_name) in variants.items():
        try:
            invoke(case, probe, dtype=name, params=params)
        except (TypeError, ValueError) as exc:
            msg = str(exc)
            missing = [m for m in must_name if m not in msg]
            if missing:
                raise CheckFailure(f"params with a {what} raised {type(exc).__name__}({msg!r}), "
                                   f"but the message should name {missing}") from exc
        else:
            raise CheckFailure(f"params with a {what} were accepted, but should raise "
                               f"ValueError/TypeError naming the expected keys and shapes")
