"""Conformance laws of relative encoders (kinds ``bias`` and ``relative-embedding``), selected by
the encoder's declared properties:

* ``"relative"``: the output depends on ``k - q`` only — shifting every query and key position
  by one amount changes nothing, and for ``q = a + arange(Q)``, ``k = b + arange(K)`` the
  ``(Q, K)`` matrix is Toeplitz (constant along each diagonal);
* ``"causal-future-alike"``: every key after the query (``k - q >= 1``) gets the same output
  (T5's decoder buckets);
* ``"alibi-slopes"``: ``bias = -m_h·|q - k|`` with the slopes of Press et al. 2022: for ``n``
  heads and ``p`` the largest power of two <= ``n``, ``m_1..m_p`` is the geometric sequence
  ``r, r², …, r^p``, ``r = 2^(-8/p)``, and the remaining heads take ``2^(-4/p)^(1, 3, 5, …)``.
"""

from __future__ import annotations

from typing import Any

from ._core import Case, CheckFailure, check
from ._drivers import Probe, case_params, invoke
from ._numerics import max_err as _err
from ._numerics import wide_name as _wide


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
    start = int(case.rng.integers(800, 5000))
    # (first query, first key, shifts): from the origin, from a random start with negative
    # shifts down to 0 and positive ones, so that clipping positions before subtracting shows.
    probes = ((200, 190, (1, 37, 700, -37, -190)), (0, 0, (1, 37, 700)), (0, 3, (5, 700)),
              (start, start - 4, (-(start - 4), -1, 1, 999)))
    for q0, k0, shifts in probes:
        q, k = q0 + np.arange(6), k0 + np.arange(9)
        base = _pair(case, q, k)
        scale = max(1.0, float(np.max(np.abs(base))))
        tol = case.tolerance(name, steps=64, scale=scale)
        for s in shifts:
            shifted = _pair(case, q + s, k + s)
            if _err(shifted, base) > tol:
                raise CheckFailure(
                    f"output(q+{s}, k+{s}) differs from output(q, k) by {_err(shifted, base):.3g}"
                    f" for q = {q0}..{q0 + 5}, k = {k0}..{k0 + 8}, but should be equal (<= "
                    f"{tol:.3g}): the encoder does not depend on k - q alone")
        m = np.moveaxis(base, (qa, ka), (0, 1))
        diag = _err(m[1:, 1:], m[:-1, :-1])
        if diag > tol:
            raise CheckFailure(f"output[i+1, j+1] - output[i, j] = {diag:.3g} for q = "
                               f"{q0}..{q0 + 5}, k = {k0}..{k0 + 8}, but should be 0 (<= "
                               f"{tol:.3g}; Toeplitz in (q, k))")


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


def _paper_slopes(n: int, max_bias: float = 8.0) -> list[float]:
    import math

    p = 2 ** math.floor(math.log2(n))
    r = 2.0 ** (-max_bias / p)
    first = [r ** (i + 1) for i in range(p)]
    r2 = 2.0 ** (-max_bias / 2 / p)
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
    # B = 8 in the paper; an encoder may offer another range as ``max_bias`` (MPT's option).
    want = np.asarray(_paper_slopes(n, float(getattr(case.encoder, "max_bias", 8.0))))
    rel = float(np.max(np.abs(slopes - want) / want))
    if rel > 8 * case.tolerance(name):
        h = int(np.argmax(np.abs(slopes - want) / want))
        raise CheckFailure(f"slope of head {h} = {slopes[h]:.9g}, but should be {want[h]:.9g} "
                           f"(paper's rule for {n} heads: geometric, ratio 2^(-B/p)); "
                           f"all: {np.round(slopes, 6).tolist()}")
    lin = -want[:, None] * d[None, :]
    tol = case.tolerance(name, steps=16, scale=float(np.max(np.abs(lin))))
    for what, got in (("k - q = +d", fwd), ("k - q = -d", bwd)):
        if _err(got, lin) > tol:
            raise CheckFailure(f"bias at {what} differs from -m_h·d by {_err(got, lin):.3g}, but "
                               f"should be <= {tol:.3g} (linear in |q - k|, symmetric)")
