"""Conformance checks of ``init`` (capability ``"learned"``): a seed means the same values on
every backend (NumPy's PCG64 on the host, Encoder.init's promise) and a new seed new values; the
params come back in the namespace, dtype and device asked for, with ``param_shapes()``."""

from __future__ import annotations

from typing import Any

from ._core import Case, CheckFailure, check
from ._numerics import max_err as _err


def _init(case: Case, seed: int, name: str, device: Any = None, xp: Any = None) -> Any:
    enc: Any = case.encoder
    target = case.backend.native() if xp is None else xp
    dtype = case.float_dtypes[name] if xp is None else getattr(xp, name)
    return enc.init(target, seed=seed, dtype=dtype, device=device)


@check(requires={"learned"})
def check_init_seed(case: Case) -> None:
    """init(seed=s) twice gives equal params, a new seed new ones (for each param drawn with
    ``init_std`` > 0), and every backend the values NumPy gives for that seed (rounded to the
    dtype)."""
    import numpy as np

    stds = {key: case.encoder.init_std(key) for key in case.encoder.param_shapes()}
    for name in case.float_dtypes:
        a, b = _init(case, 3, name), _init(case, 3, name)
        other = _init(case, 4, name)
        if any(stds.values()) and all(
                np.array_equal(case.to_numpy(a[k]), case.to_numpy(other[k])) for k in a):
            raise CheckFailure(f"init(seed=3) and init(seed=4) gave equal params in {name}: "
                               f"the seed is ignored")
        ref = _init(case, 3, "float64", xp=np)
        for key in a:
            ga, gb, go = (case.to_numpy(p[key]) for p in (a, b, other))
            if not np.array_equal(ga, gb):
                raise CheckFailure(f"init(seed=3) twice gave different {key!r} in {name}: "
                                   f"max difference {_err(ga, gb):.3g}, but should be equal")
            # (a parameter declared constant, init_std 0, starts at init_mean for every seed)
            if ga.size and stds[key] != 0 and np.array_equal(ga, go):
                raise CheckFailure(f"init(seed=3) and init(seed=4) gave equal {key!r} in {name}: "
                                   f"the seed is ignored")
            if stds[key] == 0 and ga.size and not np.all(ga == ga.ravel()[0]):
                raise CheckFailure(f"params[{key!r}] is declared constant (init_std 0) but "
                                   f"init(seed=3) gave different values in {name}")
            want = np.asarray(ref[key], dtype=np.float64)
            tol = case.tolerance(name, steps=1, scale=float(np.max(np.abs(want), initial=1.0)))
            if ga.shape != want.shape or _err(ga, want) > tol:
                raise CheckFailure(f"init(seed=3) {key!r} in {name} is {_err(ga, want):.3g} away "
                                   f"from NumPy's init(seed=3) (> {tol:.3g}): one seed must give "
                                   f"the same values on every backend")


@check(requires={"learned"})
def check_init_placement(case: Case) -> None:
    """init(xp, dtype=d, device=v) returns arrays of namespace xp, dtype d and device v, with
    the shapes of param_shapes()."""
    from ..registry import default_registry

    shapes = case.encoder.param_shapes()
    home = case.backend.default_device()
    for device in case.backend.test_devices():
        # Other test devices may hold fewer dtypes (array-api-strict's no_float64): their default.
        dts = dict(case.float_dtypes) if device == home else {
            case.dtype_name(d): d for d in [case.backend.default_float_dtype(device)]}
        for name, dt in dts.items():
            params = _init(case, 0, name, device=device)
            if set(params) != set(shapes):
                raise CheckFailure(f"init gave keys {sorted(params)}, but should give "
                                   f"param_shapes()'s {sorted(shapes)}")
            for key, value in params.items():
                owner = default_registry.backend_of(value)
                if owner is None or owner.name != case.backend.name:
                    got = owner.name if owner is not None else type(value).__name__
                    raise CheckFailure(f"init({case.backend.name}) gave {key!r} as a {got} "
                                       f"array, but should be {case.backend.name}")
                if value.dtype != dt:
                    raise CheckFailure(f"init(dtype={name}) gave {key!r} of dtype {value.dtype}")
                if case.backend.device(value) != device:
                    raise CheckFailure(f"init(device={device}) gave {key!r} on "
                                       f"{case.backend.device(value)}")
                if tuple(int(d) for d in value.shape) != tuple(shapes[key]):
                    raise CheckFailure(f"init gave {key!r} of shape {tuple(value.shape)}, but "
                                       f"param_shapes() says {tuple(shapes[key])}")
