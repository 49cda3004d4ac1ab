"""Conformance laws of multi-axis rotary encoders (kind ``"rotary"`` with the ``"multi-axis"``
property, M-RoPE): with every axis at one position the encoder equals its single-axis rotary
encoder (``text_equivalent()``), and ``<R(P)q, R(P')k>`` depends only on the per-axis difference.
"""

from __future__ import annotations

from typing import Any

from ._core import Case, CheckFailure, check
from ._numerics import max_err as _err
from ._numerics import wide_name as _wide_name
from .checks_rotary import NEAR, PROBE, _head_dim, _pos


@check(kinds={"rotary"}, requires={"multi-axis"})
def check_mrope_equals_rotary_on_equal_axes(case: Case) -> None:
    """With every axis at the same position (text) the encoder equals its single-axis rotary
    encoder (``text_equivalent()``) exactly, in every float dtype."""
    import numpy as np

    enc: Any = case.encoder
    single = enc.text_equivalent()
    dim = _head_dim(case)
    pos = case.rng.integers(0, NEAR, size=(2, 1, *PROBE))
    x = case.rng.standard_normal((2, 3, *PROBE, dim))
    for name in case.float_dtypes:
        xb = case.asarray(x, dtype=name)
        a = case.to_numpy(enc.rotate(xb, _pos(case, pos)))
        b = case.to_numpy(single.rotate(xb, case.asarray(pos)))
        if not np.array_equal(a, b):
            raise CheckFailure(f"{name}: rotate with equal axes differs from "
                               f"{single!r}.rotate by {_err(a, b):.3g}, but should be identical")


@check(kinds={"rotary"}, requires={"multi-axis"})
def check_mrope_relative_per_axis(case: Case) -> None:
    """<R(P)q, R(P')k> depends only on the per-axis difference P - P': shifting every axis of
    both positions by its own amount leaves the dot product unchanged."""
    import numpy as np

    enc: Any = case.encoder
    dim = _head_dim(case)
    axes = int(np.asarray(enc.text_positions(np.asarray([0]))).shape[0])
    q, k = case.rng.standard_normal(dim), case.rng.standard_normal(dim)
    m0 = case.rng.integers(100, 2000, size=(axes, 1))
    n0 = m0 - case.rng.integers(-50, 50, size=(axes, 1))
    count = PROBE[0]  # q at m and k at n: the probe shape (2, count)
    shifts = case.rng.integers(0, 3000, size=(axes, count))
    m, n = m0 + shifts, n0 + shifts
    name = _wide_name(case)
    x = np.stack([np.tile(q, (count, 1)), np.tile(k, (count, 1))])
    out = case.to_numpy(enc.rotate(case.asarray(x, dtype=name),
                                   case.asarray(np.stack([m, n], axis=1))))
    dots = np.sum(out[0] * out[1], axis=-1)
    scale = float(np.linalg.norm(q) * np.linalg.norm(k))
    # each angle p·ω, rounded in the dtype, is off by up to |p|·eps/2 (ω <= 1)
    reach = float(np.max(np.abs(np.concatenate([m, n], axis=1))))
    tol = case.tolerance(name, steps=256, scale=scale) + case.tolerance(name, steps=2,
                                                                        scale=scale * reach)
    spread = float(dots.max() - dots.min())
    if spread > tol:
        raise CheckFailure(f"<R(P)q, R(P')k> varies by {spread:.3g} under per-axis shifts of both "
                           f"positions, but should depend only on P - P' (tolerance {tol:.3g})")
