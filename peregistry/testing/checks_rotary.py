"""Conformance checks of the laws of rotary encoders (kind ``"rotary"``).

* norm preservation: each rotated pair keeps its length (times the attention factor, which
  ``cos_sin`` reveals as ``cos² + sin²``); features past ``rotary_dim`` pass through unchanged;
* relative positions: ``<R(m)q, R(n)k>`` depends only on ``m - n``;
* ``positions=None, offset=o`` equals the explicit positions ``o + arange(seq)``;
* ``rotate`` agrees with ``x·cos + rotate_pairs(x)·sin`` from ``cos_sin`` (the public table);
* ``layout="half"`` and ``layout="interleaved"`` are the same rotation up to a fixed permutation
  of the last axis (encoders with the ``"rope-layouts"`` property);
* the backend's native fast path agrees with the generic Array API rotation;
* angles stay accurate (1e-5 absolute) at positions near 2**20, float32-only backends included;
* ``jax.jit`` / ``torch.compile(fullgraph=True)`` trace once, without warnings (a compiler's
  notice of how it traced, such as Dynamo tracing through ``functools.lru_cache``, excepted).

The rotated features are the first ``rotary_dim`` of the last axis, as in every RoPE
implementation; ``rotary_dim`` is read from the width of ``cos_sin``.
"""

from __future__ import annotations

import functools
from typing import Any

from ._compile_warnings import describe, run_compiled
from ._core import Case, CheckFailure, check
from ._numerics import max_err as _err
from ._numerics import wide_name as _wide_name

#: The sequence length of most probes: checks that share input shapes share the programs a
#: compiling backend (eager JAX) builds per shape, which are most of a check's time there.
PROBE = (5,)
#: The law probes' positions stay below this, inside one position table (4096 rows), for the
#: same reason, yet past the first table (1024 rows), where a grown table or a scaling's
#: threshold may go wrong; positions near 2**20 are check_far_range's and
#: check_rotary_large_positions'.
NEAR = 4000


def _rotary_dim_and_factor(case: Case) -> tuple[int, float]:
    """``rotary_dim`` (width of ``cos_sin``) and the attention factor ``sqrt(cos² + sin²)``."""
    import numpy as np

    name = _wide_name(case)
    cos, sin = case.encoder.cos_sin(_pos(case, [3, 0, 1, 2, 4]),  # type: ignore[attr-defined]
                                    dtype=case.float_dtypes[name])
    c, s = case.to_numpy(cos), case.to_numpy(sin)
    return int(c.shape[-1]), float(np.sqrt(c[0, 0] ** 2 + s[0, 0] ** 2))


def _rotate(case: Case, x: Any, positions: Any = None, *, dtype: str | None = None,
            encoder: Any = None, **kw: Any) -> Any:
    """``rotate`` on the case's backend, NumPy in, float64 NumPy out."""
    import numpy as np

    enc: Any = case.encoder if encoder is None else encoder
    name = dtype or _wide_name(case)
    xb = case.asarray(np.asarray(x), dtype=name)
    pb = None if positions is None else _pos(case, positions, encoder=enc)
    return case.to_numpy(enc.rotate(xb, pb, **kw))


def _pos(case: Case, positions: Any, *, encoder: Any = None, device: Any = None) -> Any:
    """Backend positions for tokens at the given scalar positions (every axis equal, for
    multi-axis encoders such as M-RoPE: ``encoder.text_positions``)."""
    import numpy as np

    enc: Any = case.encoder if encoder is None else encoder
    return case.asarray(np.asarray(enc.text_positions(np.asarray(positions))), device=device)


def _head_dim(case: Case) -> int:
    return int(case.encoder._head_dim())  # type: ignore[attr-defined]


@check(kinds={"rotary"})
def check_rotary_norm_preserved(case: Case) -> None:
    """|rotated pair| = attention factor x |pair|; features past rotary_dim are unchanged."""
    import numpy as np

    dim = _head_dim(case)
    rd, af = _rotary_dim_and_factor(case)
    x = case.rng.standard_normal((2, *PROBE, dim))
    pos = case.rng.integers(0, NEAR, size=(2, *PROBE))
    out = _rotate(case, x, pos)
    name = _wide_name(case)
    got = np.sum(out[..., :rd] ** 2, axis=-1)
    want = af**2 * np.sum(x[..., :rd] ** 2, axis=-1)
    tol = case.tolerance(name, steps=64, scale=float(want.max()))
    if _err(got, want) > tol:
        raise CheckFailure(f"|rotate(x)[..., :{rd}]|² differs from (attention factor {af:.6g})² "
                           f"x |x[..., :{rd}]|² by {_err(got, want):.3g}, but should be <= "
                           f"{tol:.3g}: the rotation does not preserve norms")
    if rd < dim:
        rest = _err(out[..., rd:], x[..., rd:])
        if rest > case.tolerance(name, steps=1):
            raise CheckFailure(f"features past rotary_dim={rd} changed by {rest:.3g}, but "
                               f"should pass through unchanged")


@check(kinds={"rotary"})
def check_rotary_relative(case: Case) -> None:
    """<R(m)q, R(n)k> depends only on m - n (the reason RoPE exists)."""
    import numpy as np

    dim = _head_dim(case)
    q = case.rng.standard_normal(dim)
    k = case.rng.standard_normal(dim)
    name = _wide_name(case)
    shifts = case.rng.integers(0, NEAR - 513 - 50, size=PROBE[0] - 1)
    scale = float(np.linalg.norm(q) * np.linalg.norm(k))
    for delta in (0, 1, 7, -40, 513):
        # one pair at the origin (min(m, n) = 0), where clipping or offset bugs show first
        m = np.concatenate([shifts + max(delta, 0) + 50, [max(delta, 0)]])
        n = m - delta
        # q and k in one call, so they share one sequence length (dynamic scalings)
        both = _rotate(case, np.stack([np.tile(q, (m.size, 1)), np.tile(k, (n.size, 1))]),
                       np.stack([m, n]))
        rq, rk = both[0], both[1]
        dots = np.sum(rq * rk, axis=-1)
        spread = float(dots.max() - dots.min())
        # and each angle p·ω, rounded in the dtype, is off by up to |p|·eps/2 (ω <= 1)
        reach = float(np.max(np.abs(np.concatenate([m, n]))))
        tol = case.tolerance(name, steps=256, scale=scale) + case.tolerance(
            name, steps=2, scale=scale * reach)
        if spread > tol:
            raise CheckFailure(f"<R(m)q, R(m-{delta})k> varies with m by {spread:.3g}, but "
                               f"should depend only on m - n (tolerance {tol:.3g})")


@check(kinds={"rotary"})
def check_rotary_offset(case: Case) -> None:
    """rotate(x, offset=o) equals rotate(x, o + arange(seq)), also for offset=0 and a decode
    step of one token."""
    import numpy as np

    dim = _head_dim(case)
    name = _wide_name(case)
    # the decode step reads the last row of the probes' position table (4096 rows)
    for seq, o in ((PROBE[0], 0), (PROBE[0], 1000), (1, 4095)):
        x = case.rng.standard_normal((2, seq, dim))
        a = _rotate(case, x, offset=o)
        b = _rotate(case, x, o + np.arange(seq))
        tol = case.tolerance(name, steps=2, scale=float(np.abs(b).max()))
        if _err(a, b) > tol:
            raise CheckFailure(f"rotate(x, offset={o}) differs from rotate(x, {o} + "
                               f"arange({seq})) by {_err(a, b):.3g}, but should be <= {tol:.3g}")


def _pair_perm(rd: int, dim: int) -> Any:
    """Indices that take a half-layout vector to interleaved: [a0 .. a_h-1 b0 ..] -> [a0 b0 ..]."""
    import numpy as np

    h = rd // 2
    perm = np.empty(rd, dtype=np.int64)
    perm[0::2] = np.arange(h)
    perm[1::2] = np.arange(h) + h
    return np.concatenate([perm, np.arange(rd, dim)])


def _interleaved(enc: Any) -> bool:
    return bool(enc._interleaved())


@check(kinds={"rotary"})
def check_rotary_matches_cos_sin(case: Case) -> None:
    """rotate(x, p) = x·cos + rotate_pairs(x)·sin with (cos, sin) = cos_sin(p), in the encoder's
    layout (# half: [x0 x1 | x2 x3] -> [-x2 -x3 | x0 x1]; interleaved: [x0 x1 x2 x3] ->
    [-x1 x0 -x3 x2])."""
    import numpy as np

    enc = case.encoder
    dim = _head_dim(case)
    name = _wide_name(case)
    pos = case.rng.integers(0, NEAR, size=PROBE)
    cos, sin = enc.cos_sin(_pos(case, pos), dtype=case.float_dtypes[name])  # type: ignore[attr-defined]
    c, s = case.to_numpy(cos), case.to_numpy(sin)
    rd = c.shape[-1]
    if c.shape != (*PROBE, rd) or s.shape != (*PROBE, rd):
        raise CheckFailure(f"cos_sin(positions of shape {PROBE}) gave shapes {c.shape} and "
                           f"{s.shape}, but should be ({PROBE[0]}, rotary_dim) each")
    x = case.rng.standard_normal((2, *PROBE, dim))
    xr = x[..., :rd]
    if _interleaved(enc):
        rot = np.stack((-xr[..., 1::2], xr[..., 0::2]), axis=-1).reshape(xr.shape)
    else:
        rot = np.concatenate((-xr[..., rd // 2:], xr[..., :rd // 2]), axis=-1)
    want = np.concatenate((xr * c + rot * s, x[..., rd:]), axis=-1)
    got = _rotate(case, x, pos)
    tol = case.tolerance(name, steps=16, scale=float(np.abs(want).max()))
    if _err(got, want) > tol:
        raise CheckFailure(f"rotate(x, p) differs from x·cos + rotate_pairs(x)·sin built from "
                           f"cos_sin(p) by {_err(got, want):.3g}, but should be <= {tol:.3g}")


@check(kinds={"rotary"}, requires={"rope-layouts"})
def check_rotary_layouts(case: Case) -> None:
    """layout='half' and layout='interleaved' are one rotation up to a fixed permutation P of the
    last axis: rotate_interleaved(x[..., P]) = rotate_half(x)[..., P]."""
    import numpy as np

    enc = case.encoder
    half = enc.replace(layout="half")
    inter = enc.replace(layout="interleaved")
    dim = _head_dim(case)
    rd = _rotary_dim_and_factor(case)[0]
    perm = _pair_perm(rd, dim)
    x = case.rng.standard_normal((2, *PROBE, dim))
    pos = case.rng.integers(0, NEAR, size=PROBE)
    a = _rotate(case, x[..., perm], pos, encoder=inter)
    b = _rotate(case, x, pos, encoder=half)[..., perm]
    name = _wide_name(case)
    tol = case.tolerance(name, steps=4, scale=float(np.abs(b).max()))
    if _err(a, b) > tol:
        raise CheckFailure(f"rotate_interleaved(x[..., P]) differs from rotate_half(x)[..., P] "
                           f"by {_err(a, b):.3g}, but should be <= {tol:.3g}")


@check(kinds={"rotary"})
def check_rotary_native_matches_generic(case: Case) -> None:
    """The backend's native fast path (if any) agrees with the generic Array API rotation, for
    every float dtype, partial broadcasting included."""
    import numpy as np

    enc = case.encoder
    dim = _head_dim(case)
    x = case.rng.standard_normal((2, 3, 5, dim))
    pos = case.rng.integers(0, NEAR, size=(2, 1, *PROBE))
    pb = _pos(case, pos)
    for name in case.float_dtypes:
        xb = case.asarray(x, dtype=name)
        fast = enc._rotate(xb, pb, offset=0, params=None, seq_len=None,  # type: ignore[attr-defined]
                           native=True)
        ref = enc._rotate(xb, pb, offset=0, params=None, seq_len=None,  # type: ignore[attr-defined]
                          native=False)
        if fast.dtype != ref.dtype or tuple(fast.shape) != tuple(ref.shape):
            raise CheckFailure(f"native path gave {tuple(fast.shape)} {fast.dtype}, but should "
                               f"be {tuple(ref.shape)} {ref.dtype} like the generic path")
        f, r = case.to_numpy(fast), case.to_numpy(ref)
        # Both round once from float32 (or wider); fused multiply-adds may move one ulp.
        tol = case.tolerance(name, steps=2, scale=float(np.abs(r).max()))
        if _err(f, r) > tol:
            raise CheckFailure(f"native {name} rotation differs from the generic one by "
                               f"{_err(f, r):.3g}, but should be <= {tol:.3g}")


@check(kinds={"rotary"})
def check_rotary_large_positions(case: Case) -> None:
    """cos_sin at positions near 2**20, in float32, is within 1e-5 (x attention factor) of the
    float64 NumPy result: exact angle reduction, also without float64 on the device."""
    import numpy as np

    from ..registry import default_registry

    enc = case.encoder
    pos = np.asarray([2**20 - 7, 2**20 - 1, 2**20, 2**20 + 3, 987_654], dtype=np.int64)
    np_backend = default_registry.backend("numpy")
    ref = [np_backend.to_numpy(t)
           for t in enc.cos_sin(enc.text_positions(pos), dtype=np.float64)]  # type: ignore[attr-defined]
    _, af = _rotary_dim_and_factor(case)
    devices = case.backend.test_devices()
    for device in devices:
        got = enc.cos_sin(_pos(case, pos, device=device),  # type: ignore[attr-defined]
                          dtype=case.float_dtypes["float32"])
        for what, g, r in zip(("cos", "sin"), got, ref, strict=True):
            err = _err(case.to_numpy(g), r)
            tol = 1e-5 * max(1.0, af)
            if err > tol:
                raise CheckFailure(f"float32 {what} at positions near 2**20 is {err:.3g} from "
                                   f"float64 NumPy on {device}, but should be <= {tol:.3g}")


@check(kinds={"rotary"}, requires={"jit"})
def check_rotary_jit_traces_once(case: Case) -> None:
    """Under the backend's compiler (jax.jit, torch.compile(fullgraph=True)) rotate, with
    explicit positions and with positions=None + offset, traces once for calls with new values
    of the same shapes, emits no warnings, and agrees with eager execution."""
    import numpy as np

    enc = case.encoder
    dim = _head_dim(case)

    def fn(x: Any, pos: Any) -> Any:
        return enc.rotate(x, pos) + enc.rotate(x, offset=11)  # type: ignore[attr-defined]

    compiled, traces = case.backend.jit_counted(fn)
    assert compiled is not None
    out = None
    xs = []
    faults = []
    for _ in range(3):
        x = case.asarray(case.rng.standard_normal((2, 5, dim)), dtype="float32")
        pos = _pos(case, case.rng.integers(0, NEAR, size=PROBE))
        xs.append((x, pos))
        try:
            out, found = run_compiled(functools.partial(compiled, x, pos))
        except Exception as exc:
            raise CheckFailure(f"{case.backend.name} jit of rotate raised "
                               f"{type(exc).__name__}: {str(exc)[:600]}, but should compile "
                               f"without warnings") from exc
        faults += found
    if faults:
        raise CheckFailure(f"{case.backend.name} jit of rotate warned: {describe(faults)}; it "
                           f"should compile once, in one graph, without warnings (a "
                           f"compiler's notice of how it traced is not counted)")
    if traces() != 1:
        raise CheckFailure(f"rotate was traced {traces()} times for 3 calls with same-shaped "
                           f"inputs, but should be traced once")
    want = case.to_numpy(fn(*xs[-1]))
    got = case.to_numpy(out)
    tol = case.tolerance("float32", steps=64, scale=max(1.0, float(np.abs(want).max())))
    if _err(got, want) > tol:
        raise CheckFailure(f"jit rotate differs from eager by {_err(got, want):.3g}, but should "
                           f"be <= {tol:.3g}")
