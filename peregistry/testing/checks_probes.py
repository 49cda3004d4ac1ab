"""Conformance checks that probe where the other checks do not look: new positions of a shape
already seen (a result cached by shape), positions and distances near 2**20 (precision that every
backend loses alike), and the edges of a bounded encoder (positions past its table).

A bounded encoder says so with ``position_range() -> (low, high)``: integer positions
``low <= p < high`` are valid, every other one must raise (``learned``: ``(0, num_positions)``).
"""

from __future__ import annotations

import warnings
from typing import Any

from ._core import Case, CheckFailure, check
from ._drivers import Probe, invoke, reference, sample
from ._numerics import max_err as _max_err
from ._numerics import max_position as _max_position
from ._numerics import wide_name as _wide

#: Positions and distances the far-range probes reach (the rotary checks use the same).
FAR = 2**20


def position_range(enc: Any) -> tuple[int, int] | None:
    """The encoder's declared ``(low, high)`` of valid integer positions, or None (unbounded)."""
    method = getattr(enc, "position_range", None)
    return None if method is None else method()


def _positions_key(probe: Probe) -> list[str]:
    return [k for k in probe.args if k not in probe.float_args]


@check()
def check_fresh_positions(case: Case) -> None:
    """New positions of a shape already seen give their own outputs: an encoder must not serve
    a result cached by shape (compared with a fresh equal encoder on NumPy in float64)."""
    import numpy as np

    fresh = case.encoder.replace()  # built before any call: nothing cached on it
    name = _wide(case)
    first = sample(case)
    second = sample(case)
    for _ in range(8):  # draw until the positions differ (the rng moves on at every draw)
        if any(not np.array_equal(first.args[k], second.args[k]) for k in _positions_key(first)):
            break
        second = sample(case)
    else:
        return  # example_positions gives one set of positions only: nothing to compare
    for k in first.float_args:  # the same x, so only the positions change
        second.args[k] = first.args[k]
    _compare_fresh(case, fresh, first, second, name)
    if case.encoder.continuous:  # real positions take other paths (no integer tables)
        for probe in (first, second):
            for k in _positions_key(probe):
                probe.args[k] = probe.args[k] + 0.25
        _compare_fresh(case, fresh, first, second, name)


def _compare_fresh(case: Case, fresh: Any, first: Probe, second: Probe, name: str) -> None:
    import numpy as np

    invoke(case, first, dtype=name)
    got = case.to_numpy(invoke(case, second, dtype=name))
    want = reference(case, second, encoder=fresh)
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    tol = case.tolerance(name, steps=32, scale=scale)
    if case.encoder.continuous:  # angles p·ω rounded in the dtype: ~|p|·eps (check_matches_...)
        tol += case.tolerance(name, steps=4, scale=scale * _max_position(second))
    err = _max_err(got, want) if got.shape == want.shape else float("inf")
    if not err <= tol:
        pos = {k: second.args[k].ravel()[:6].tolist() for k in _positions_key(second)}
        raise CheckFailure(f"after a call at other positions of the same shape, the output at "
                           f"{pos} differs from a fresh encoder's by {err:.3g} (> {tol:.3g}): "
                           f"a result cached by shape, or state kept between calls")


@check(kinds={"absolute", "bias", "relative-embedding"}, requires={"far-range"})
def check_far_range(case: Case) -> None:
    """Positions near 2**20 (absolute) and distances up to ±2**20 (pairs) give finite outputs
    that agree with float64 NumPy, and pairs still depend on k - q alone there (unless the
    encoder is exempt from ``check_relative_toeplitz``)."""
    import numpy as np

    name = _wide(case)
    if case.encoder.kind == "absolute":
        probes = [Probe({"positions": np.asarray([FAR - 1, FAR, FAR + 3, 0], dtype=np.int64)})]
    else:
        q = np.asarray([0, 1, FAR - 2], dtype=np.int64)
        k = np.asarray([0, FAR - 1, FAR, 2], dtype=np.int64)
        probes = [Probe({"q_positions": q, "k_positions": k}),
                  Probe({"q_positions": q + FAR, "k_positions": k + FAR})]
    outs = []
    for probe in probes:
        with warnings.catch_warnings():  # an overflow is reported below, with the positions
            warnings.simplefilter("ignore", RuntimeWarning)
            got = case.to_numpy(invoke(case, probe, dtype=name))
        where = {k: v.tolist() for k, v in probe.args.items()}
        if not np.all(np.isfinite(got)):
            raise CheckFailure(f"output at {where} is not finite ({int(np.sum(~np.isfinite(got)))}"
                               f" of {got.size} values): the encoder overflows far from 0")
        want = reference(case, probe)
        # An angle or distance near 2**20 carries ~2**20·eps of rounding in the dtype.
        tol = case.tolerance(name, steps=16, scale=max(1.0, float(np.max(np.abs(want)))) * FAR)
        if _max_err(got, want) > tol:
            raise CheckFailure(f"output at {where} differs from float64 NumPy by "
                               f"{_max_err(got, want):.3g} (> {tol:.3g}) in {name}")
        outs.append(got)
    # the second half of the relative law: not for an encoder exempt from it (FIRE)
    if len(outs) == 2 and "check_relative_toeplitz" not in (case.encoder.exempt_checks or {}):
        tol = case.tolerance(name, steps=16, scale=max(1.0, float(np.abs(outs[0]).max())) * FAR)
        if _max_err(outs[0], outs[1]) > tol:
            raise CheckFailure(f"shifting q and k by 2**20 changed the output by "
                               f"{_max_err(outs[0], outs[1]):.3g} (> {tol:.3g}): not a function "
                               f"of k - q alone far from 0")


@check(requires={"bounded"})
def check_out_of_range_raises(case: Case) -> None:
    """Positions outside ``position_range()`` raise an error naming the positions, never wrap
    or clamp; the last valid position works."""
    import numpy as np

    low, high = position_range(case.encoder) or (0, 0)
    probe = sample(case, shape=(3,))
    key = _positions_key(probe)[0]
    valid = dict(probe.args)
    valid[key] = np.asarray([low, high - 1, low], dtype=np.int64)
    invoke(case, Probe(valid, probe.float_args, probe.dtype_arg))
    for bad in (high, high + 7, low - 1):
        args = dict(probe.args)
        args[key] = np.asarray([low, bad, low], dtype=np.int64)
        try:
            out = invoke(case, Probe(args, probe.float_args, probe.dtype_arg))
            case.to_numpy(out)
        except (ValueError, IndexError, TypeError) as exc:
            if "position" not in str(exc):
                raise CheckFailure(f"position {bad} (valid: {low}..{high - 1}) raised "
                                   f"{type(exc).__name__}: {exc}, which does not name the "
                                   f"positions") from exc
            continue
        raise CheckFailure(f"position {bad} is outside position_range() = ({low}, {high}), but "
                           f"gave an output instead of an error (wrapped or clamped)")
