"""Conformance checks of learned parameters (capability ``"learned"``, any kind):

* gradients exist, are finite and match a central finite difference of the encoder's float64
  NumPy result, through the framework's autodiff (``"grad"``: torch autograd, ``jax.grad``);
* two training steps in a row with the same shapes work and the second sees the new values
  (nothing derived from params is cached or carries autograd history);
* params with missing/extra keys or wrong shapes are rejected with an error naming what was
  expected.
"""

from __future__ import annotations

from typing import Any

from ._core import Case, CheckFailure, check
from ._drivers import DRIVERS, Probe, case_params, invoke, sample, to_backend
from ._numerics import max_err as _err
from ._numerics import wide_name as _wide


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


def _numpy_loss(case: Case, probe: Probe, arrays: Any, weight: Any, power: int) -> Any:
    """``params -> sum(weight · out**power)`` by the encoder on NumPy in float64, at the inputs
    the backend saw: the finite difference's reference, free of the backend's rounding."""
    import numpy as np

    enc, call = case.encoder, DRIVERS[case.encoder.kind][1]
    args = {k: (np.asarray(case.to_numpy(arrays[k]), dtype=np.float64) if k in probe.float_args
                else np.asarray(v)) for k, v in probe.args.items()}
    w = np.asarray(case.to_numpy(weight), dtype=np.float64)

    def fn(params: dict[str, Any]) -> float:
        out = np.asarray(call(enc, args, params, np.float64 if probe.dtype_arg else None),
                         dtype=np.float64)
        return float(np.sum(w * (out if power == 1 else out * out)))

    return fn


def _fd_compare(case: Case, fn: Any, params_np: dict[str, Any], grads: dict[str, Any],
                name: str, what: str) -> None:
    """Compare ``grads`` with central finite differences of the float64 NumPy loss ``fn`` at a
    few coordinates of each param (the largest gradients and a few random ones). The step,
    1e-6, is small enough not to straddle a ReLU's kink (FIRE's MLP) but where float64 keeps
    ~10 digits of the difference; the tolerance is the backend gradient's own rounding."""
    import numpy as np

    h = 1e-6
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
                vals.append(fn(pert))
            fd = (vals[0] - vals[1]) / (2 * h)
            mag = max(abs(vals[0]), abs(vals[1]), 1.0)
            tol = case.tolerance("float64", steps=64, scale=mag) / h  # the difference's rounding
            if name == "float64":
                tol += 1e-6 * max(1.0, abs(fd))
            else:  # a float32 gradient: its roundings, as a step of 1e-2 in float32 sees them
                tol += case.tolerance(name, steps=64, scale=mag) / 1e-2 + 1e-3 * max(1.0, abs(fd))
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
    difference of the encoder's float64 NumPy result."""
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
    _fd_compare(case, _numpy_loss(case, probe, arrays, weight, 1), params_np, grads, name,
                "sum(w·out)")


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
            # one SGD step of length <= 10 (backend arrays): large enough to move every
            # output, not so large that it leaves the region where the encoder responds
            big = max([1.0] + [float(np.max(np.abs(case.to_numpy(v)))) for v in g1.values()])
            p2 = {k: v - (10.0 / big) * g1[k] for k, v in p1.items()}
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
        _fd_compare(case, _numpy_loss(case, probe, arrays, weight, 2), p2_np, g2, name,
                    "second training step, sum(w·out²)")


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
