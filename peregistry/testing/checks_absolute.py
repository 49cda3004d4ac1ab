"""Conformance laws of absolute encoders (kind ``"absolute"``), each applied where the encoder
declares the property in ``Encoder.properties``:

* ``"shift-linear"``: ``PE(p + k) = M(k)·PE(p)`` with one matrix ``M(k)`` for every ``p``
  (Vaswani et al. 2017, §3.5);
* ``"shift-invariant-dot"``: ``PE(p + k)·PE(p)`` depends on ``k`` only, and is symmetric in ``±k``.
"""

from __future__ import annotations

from typing import Any

from ._core import Case, CheckFailure, check
from ._numerics import max_err as _max_err


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
