"""The built-in conformance checks.

Generic checks apply to every kind (namespace, device and dtype preservation, shapes, agreement
with float64 NumPy, no mutation, determinism, jit). Law checks apply where an encoder declares
the property in ``Encoder.properties``. Each raises :class:`CheckFailure` with a message of the
form ``what=<came>, but should be <expected> [where]``.
"""

from __future__ import annotations

from typing import Any

from ._core import Case, CheckFailure, check
from ._drivers import invoke, reference, sample, to_backend


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in x.shape)


def _max_err(a: Any, b: Any) -> float:
    import numpy as np

    return float(np.max(np.abs(a - b))) if np.size(a) else 0.0


@check()
def check_namespace_preserved(case: Case) -> None:
    """Outputs are arrays of the inputs' framework (torch in -> torch out)."""
    from ..registry import default_registry

    out = invoke(case, sample(case))
    owner = default_registry.backend_of(out)
    if owner is None or owner.name != case.backend.name:
        got = owner.name if owner is not None else f"{type(out).__module__}.{type(out).__name__}"
        raise CheckFailure(f"output is a {got} array, but should be {case.backend.name}")


@check()
def check_device_preserved(case: Case) -> None:
    """Outputs live on the inputs' device, for every device the backend offers for tests."""
    probe = sample(case)
    for device in case.backend.test_devices():
        out = invoke(case, probe, device=device)
        got = case.backend.device(out)
        if got != device:
            raise CheckFailure(f"output.device={got}, but should be {device} (the input's)")


@check()
def check_dtype_preserved(case: Case) -> None:
    """Each floating dtype asked for (or given, for rotary ``x``) is the dtype that comes out;
    ``None`` gives the namespace's default float dtype."""
    probe = sample(case)
    out = invoke(case, probe, dtype=None)
    default = case.backend.default_float_dtype(case.backend.device(out))
    if out.dtype != default:
        raise CheckFailure(f"output.dtype={out.dtype} with dtype=None, but should be the "
                           f"default float dtype {default}")
    for name, dt in case.float_dtypes.items():
        out = invoke(case, probe, dtype=name)
        if out.dtype != dt:
            raise CheckFailure(f"output.dtype={out.dtype}, but should be {name}")


@check()
def check_shapes(case: Case) -> None:
    """Output shape follows the positions: scalar, 1-D, and batched (broadcast) shapes."""
    for shape in [(), (7,), (2, 3), (2, 1, 4)]:
        probe = sample(case, shape=shape)
        out = invoke(case, probe)
        if _shape(out) != probe.expected_shape:
            raise CheckFailure(f"output.shape={_shape(out)}, but should be "
                               f"{probe.expected_shape} for input shape {shape}")


@check()
def check_matches_float64_numpy(case: Case) -> None:
    """Every dtype agrees with the float64 NumPy result within a tolerance set by the dtype."""
    import numpy as np

    probe = sample(case)
    ref = reference(case, probe)
    scale = max(1.0, float(np.max(np.abs(ref))) if ref.size else 1.0)
    for name in case.float_dtypes:
        got = case.to_numpy(invoke(case, probe, dtype=name))
        # float32 results come from float32 sin/cos on float32-only backends: a few more ulps.
        tol = case.tolerance(name, steps=8 if name != "float32" else 32, scale=scale)
        err = _max_err(got, ref)
        if got.shape != ref.shape or not err <= tol:
            raise CheckFailure(f"max |{name} - float64 NumPy| = {err:.3g}, but should be <= "
                               f"{tol:.3g}")


@check()
def check_inputs_not_mutated(case: Case) -> None:
    """No input array is modified (values compared before and after the call)."""
    import numpy as np

    probe = sample(case)
    name = "float32" if "float32" in case.float_dtypes else next(iter(case.float_dtypes))
    arrays = to_backend(case, probe, name)
    before = {k: case.to_numpy(v).copy() for k, v in arrays.items()}
    invoke(case, probe, dtype=name, arrays=arrays)
    for k, v in arrays.items():
        if not np.array_equal(case.to_numpy(v), before[k], equal_nan=True):
            raise CheckFailure(f"input {k!r} was modified by the call, but should be unchanged")


@check()
def check_deterministic(case: Case) -> None:
    """Two calls with the same inputs give bit-identical results."""
    import numpy as np

    probe = sample(case)
    a = case.to_numpy(invoke(case, probe))
    b = case.to_numpy(invoke(case, probe))
    if not np.array_equal(a, b, equal_nan=True):
        raise CheckFailure(f"two identical calls differ by up to {_max_err(a, b):.3g}, but "
                           f"should be identical")


@check(requires={"jit"})
def check_jit(case: Case) -> None:
    """The call compiles with the backend's tracing compiler (``jax.jit``,
    ``torch.compile(fullgraph=True)``) and agrees with eager execution."""
    probe = sample(case)
    name = "float32"
    arrays = to_backend(case, probe, name)
    enc = case.encoder
    params = None
    if enc.learned:
        from ._drivers import case_params

        params = case_params(case, enc, name, None)

    def fn(arrays: dict[str, Any], params: Any) -> Any:
        return invoke(case, probe, dtype=name, arrays=arrays, params=params)

    compiled = case.backend.jit(fn)
    assert compiled is not None
    try:
        got = compiled(arrays, params)
    except Exception as exc:
        raise CheckFailure(
            f"{case.backend.name} jit raised {type(exc).__name__}: {str(exc)[:500]}, but should "
            f"compile"
        ) from exc
    want = case.to_numpy(fn(arrays, params))
    got_np = case.to_numpy(got)
    tol = case.tolerance(name, steps=64, scale=max(1.0, float(abs(want).max())))
    if got_np.shape != want.shape or _max_err(got_np, want) > tol:
        raise CheckFailure(f"jit result differs from eager by {_max_err(got_np, want):.3g}, but "
                           f"should be <= {tol:.3g}")


@check(requires={"continuous"})
def check_real_positions(case: Case) -> None:
    """Continuous encoders accept real-valued positions; integer-valued reals equal integers."""
    import numpy as np

    probe = sample(case)
    for key in [k for k in probe.args if "position" in k]:
        ints = probe.args[key]
        probe_f = type(probe)({**probe.args, key: ints.astype(np.float32)}, probe.float_args,
                              probe.dtype_arg, probe.expected_shape)
        a = case.to_numpy(invoke(case, probe, dtype="float32"))
        b = case.to_numpy(invoke(case, probe_f, dtype="float32"))
        tol = case.tolerance("float32", steps=32)
        if _max_err(a, b) > tol:
            raise CheckFailure(f"float positions give results {_max_err(a, b):.3g} away from the "
                               f"same integer positions, but should agree within {tol:.3g}")


# -- laws of absolute encoders -------------------------------------------------------------------
def _encode_f64(case: Case, positions: Any) -> Any:
    """Encoding in float64 where the backend has it (float32 otherwise), as NumPy float64."""
    import numpy as np

    name = "float64" if "float64" in case.float_dtypes else "float32"
    out = case.encoder.encode(case.asarray(np.asarray(positions)),  # type: ignore[attr-defined]
                              dtype=case.float_dtypes[name])
    return case.to_numpy(out), name


@check(kinds={"absolute"}, requires={"shift-linear"})
def check_shift_linear(case: Case) -> None:
    """PE(p + k) = M(k)·PE(p) with one matrix M(k) for all p (the paper's relative-position
    property). M(k) is fitted on some positions and must hold on others."""
    import numpy as np

    dim = int(case.encoder.out_dim)  # type: ignore[attr-defined]
    fit = case.rng.integers(0, 20000, size=4 * dim + 16)
    held = case.rng.integers(0, 20000, size=64)
    a, name = _encode_f64(case, fit)
    pa, _ = _encode_f64(case, held)
    # Least squares amplifies rounding by the condition number of the fitted encodings.
    cond = float(np.linalg.cond(a))
    for k in (1, 5, 37):
        b, _ = _encode_f64(case, fit + k)
        m, *_ = np.linalg.lstsq(a, b, rcond=None)
        pb, _ = _encode_f64(case, held + k)
        err = _max_err(pa @ m, pb)
        # Angles p·ω carry a rounding error that grows with the position (~eps·p).
        tol = case.tolerance(name, steps=16, scale=cond * 20000)
        if err > tol:
            raise CheckFailure(f"PE(p+{k}) - M({k})·PE(p) = {err:.3g} on held-out positions, but "
                               f"should be <= {tol:.3g}: no single linear map shifts by {k}")


@check(kinds={"absolute"}, requires={"shift-invariant-dot"})
def check_shift_invariant_dot(case: Case) -> None:
    """PE(p+k)·PE(p) depends only on k, and equals PE(p-k)·PE(p) (symmetry)."""
    import numpy as np

    p = np.concatenate([np.arange(40, 60), case.rng.integers(100, 5000, size=20)])
    base, name = _encode_f64(case, p)
    scale = float(np.max(np.sum(base * base, axis=-1)))
    # Each product carries the angle error of its position (~eps·p): scale by the largest.
    tol = case.tolerance(name, steps=16, scale=scale * float(np.max(p) + 17))
    for k in (1, 3, 17):
        fwd = np.sum(_encode_f64(case, p + k)[0] * base, axis=-1)
        bwd = np.sum(_encode_f64(case, p - k)[0] * base, axis=-1)
        spread = float(fwd.max() - fwd.min())
        if spread > tol:
            raise CheckFailure(f"PE(p+{k})·PE(p) varies with p by {spread:.3g}, but should "
                               f"depend only on k (tolerance {tol:.3g})")
        asym = _max_err(fwd, bwd)
        if asym > tol:
            raise CheckFailure(f"PE(p+{k})·PE(p) - PE(p-{k})·PE(p) = {asym:.3g}, but should be 0 "
                               f"(symmetry; tolerance {tol:.3g})")
