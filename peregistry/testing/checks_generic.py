"""Conformance checks every encoder gets, whatever its kind: namespace, device and dtype
preservation, shapes, agreement with float64 NumPy, inputs not mutated, determinism, the
backend's jit, and real-valued positions for continuous encoders. Each raises
:class:`CheckFailure` with a message of the form ``what=<came>, but should be <expected>``.
"""

from __future__ import annotations

from typing import Any

from ._compile_warnings import reissue, run_compiled
from ._core import Case, CheckFailure, check
from ._drivers import case_params, invoke, numpy_inputs, reference, sample, to_backend
from ._numerics import max_err as _max_err
from ._numerics import max_position as _max_position
from ._numerics import shape_of as _shape


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
    """Every dtype on this backend agrees with the encoder's own float64 NumPy result within a
    tolerance set by the dtype: agreement across backends and dtypes, not the formula (an
    encoder's ``float64_reference`` is that: :func:`check_matches_reference`)."""
    probe = sample(case)
    _compare(case, probe, reference(case, probe), "float64 NumPy")


@check(requires={"reference"})
def check_matches_reference(case: Case) -> None:
    """Every dtype agrees with the encoder's ``float64_reference``, code independent of the
    encoder's (the paper's formula in float64 NumPy), within a tolerance set by the dtype."""
    import numpy as np

    probe = sample(case)
    enc = case.encoder
    inputs, params = numpy_inputs(probe, enc)  # params: the values every case's hold (seed 0)
    fn = type(enc).float64_reference
    assert fn is not None
    want = np.asarray(fn(enc, inputs, params), dtype=np.float64)
    _compare(case, probe, want, f"{type(enc).__name__}.float64_reference")


def _compare(case: Case, probe: Any, ref: Any, what: str) -> None:
    import numpy as np

    scale = max(1.0, float(np.max(np.abs(ref))) if ref.size else 1.0)
    # A continuous encoder's angle p·ω, rounded in the dtype, is off by up to |p|·eps (ω <= 1):
    # a correct float32 encoder's error grows with the positions.
    reach = _max_position(probe) if case.encoder.continuous else 0.0
    for name in case.float_dtypes:
        got = case.to_numpy(invoke(case, probe, dtype=name))
        # float32 results come from float32 sin/cos on float32-only backends: a few more ulps.
        tol = case.tolerance(name, steps=8 if name != "float32" else 32, scale=scale)
        tol += case.tolerance(name, steps=4, scale=scale * reach)
        err = _max_err(got, ref)
        if got.shape != ref.shape or not err <= tol:
            shapes = f" (shape {got.shape}, {what} {ref.shape})" if got.shape != ref.shape else ""
            raise CheckFailure(f"max |{name} - {what}| = {err:.3g}{shapes}, but should be <= "
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
    ``torch.compile(fullgraph=True)``) and agrees with eager execution. Where the backend
    compiles for symbolic sizes (``torch.compile(dynamic=True)``, the sequence axes marked
    dynamic), one compilation serves two sequence lengths."""
    probes = [sample(case), sample(case, shape=(2, 7))]
    name = "float32"
    inputs = [to_backend(case, p, name) for p in probes]
    # the axes that follow the sequence length (5, then 7) are marked on both calls' inputs
    dynamic = False
    for key, a in inputs[0].items():
        b = inputs[1][key]
        if len(a.shape) == len(b.shape):
            for axis, (m, n) in enumerate(zip(a.shape, b.shape, strict=True)):
                if m != n and case.backend.mark_dynamic(a, axis):
                    dynamic = case.backend.mark_dynamic(b, axis)
    if not dynamic:  # (static sizes: a second length would only be traced again)
        del probes[1:], inputs[1:]
    enc = case.encoder
    params = None
    if enc.learned:
        params = case_params(case, enc, name, None)
    probe = probes[0]

    def fn(arrays: dict[str, Any], params: Any) -> Any:
        return invoke(case, probe, dtype=name, arrays=arrays, params=params)

    compiled = case.backend.jit(fn, dynamic=True) if dynamic else case.backend.jit(fn)
    assert compiled is not None
    how = " with the sequence axes dynamic" if dynamic else ""
    for probe, arrays in zip(probes, inputs, strict=True):
        try:
            got, faults = run_compiled(lambda: compiled(arrays, params))  # noqa: B023
        except Exception as exc:
            raise CheckFailure(
                f"{case.backend.name} jit{how} raised {type(exc).__name__}: {str(exc)[:500]}, "
                f"but should compile"
            ) from exc
        reissue(faults)  # the caller's filters judge them; a compiler's notice is not passed on
        want = case.to_numpy(fn(arrays, params))
        got_np = case.to_numpy(got)
        tol = case.tolerance(name, steps=64, scale=max(1.0, float(abs(want).max())))
        if got_np.shape != want.shape or _max_err(got_np, want) > tol:
            pos = {k: v.ravel()[:6].tolist() for k, v in probe.args.items()
                   if k not in probe.float_args}
            raise CheckFailure(f"jit{how} result differs from eager at the same positions {pos} "
                               f"by {_max_err(got_np, want):.3g}, but should be <= {tol:.3g} "
                               f"(values kept from an earlier call or from tracing: see "
                               f"check_fresh_positions)")


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
