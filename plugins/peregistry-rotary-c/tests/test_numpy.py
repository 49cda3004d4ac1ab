"""The kernel on NumPy arrays, held against peregistry's generic rotation bit for bit: shapes,
broadcast tables, strides of every kind, dtypes, special values, read-only inputs, threads."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from peregistry_rotary_c import CRotationKernel, _numpy
from peregistry_rotary_c.kernel import numpy_threads

from conftest import LAYOUTS, assert_same_bits, generic, rotate_at_once


def tables(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any = np.float32) -> tuple[Any, Any]:
    ang = rng.uniform(-4, 4, shape)
    return np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)


def check(k: CRotationKernel, x: Any, cos: Any, sin: Any, layout: str, *, answers: bool | None = True) -> Any:
    """The kernel's answer equals the generic rotation (or it declines, where ``answers`` is
    None or False); returns the answer."""
    got = k.rotate(x, cos, sin, layout=layout)
    if answers is False:
        assert got is None
    if answers:
        assert got is not None, "declined"
    if got is not None:
        assert_same_bits(got, generic(x, cos, sin, layout))
    return got


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("xdt", "wdt"), [("float32", "float32"), ("float64", "float64"),
                                          ("float32", "float64"), ("float64", "float32")])
@pytest.mark.parametrize(("xshape", "tshape"), [
    ((1, 32, 64, 128), (64, 64)),            # prefill, tables shared by batch and heads
    ((2, 3, 17, 64), (2, 1, 17, 32)),         # per-batch positions
    ((2, 3, 17, 64), (2, 3, 17, 32)),         # full tables
    ((1, 32, 1, 128), (1, 64)),               # a decode step
    ((5, 2), (5, 1)),                         # one pair
    ((6,), (3,)),                             # one position
    ((2, 1, 3, 4, 10), (3, 1, 5)),            # odd sizes, a broadcast axis inside
])
def test_kernel_is_the_generic_rotation(kernel: CRotationKernel, layout: str, xdt: str, wdt: str,
                                        xshape: tuple[int, ...], tshape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(sum(xshape))
    x = rng.standard_normal(xshape).astype(xdt)
    cos, sin = tables(rng, tshape, wdt)
    got = check(kernel, x, cos, sin, layout)
    assert got.flags.c_contiguous and got.base is None


def test_strided_views_are_rotated_or_declined(kernel: CRotationKernel) -> None:
    """Transposed, stepped, negative-stride, broadcast (zero-stride), Fortran-ordered,
    unaligned, partial-rotary slices and strided tables: correct where answered; answered
    wherever the rows are contiguous."""
    rng = np.random.default_rng(1)
    base = rng.standard_normal((2, 16, 4, 96)).astype(np.float32)
    cos, sin = tables(rng, (16, 32))
    heads_first = base.transpose(0, 2, 1, 3)  # (2, 4, 16, 96): rows of 96, 64 of them rotary
    rows_contiguous = {
        "transposed": heads_first[..., 32:],
        "stepped": heads_first[:, ::2, :, :64],
        "negative": heads_first[::-1, ::-1, ::-1, :64],
        "broadcast": np.broadcast_to(heads_first[:1, :1, :, :64], (3, 5, 16, 64)),
        "partial rotary slice": heads_first[..., :64],
    }
    for name, x in rows_contiguous.items():
        for layout in LAYOUTS:
            assert x.shape[-2:] == (16, 64), name
            check(kernel, x, cos, sin, layout)
    declined = {
        "fortran": np.asfortranarray(base[0, :, 0, :64]),
        "stepped features": base[0, :, 0, ::2][:, :48][:, :32],
        "reversed features": base[0, :, 0, ::-1][:, :64],
    }
    c2, s2 = tables(rng, (16, 16))
    for x in declined.values():
        half = x.shape[-1] // 2
        check(kernel, x, cos[:, :half] if half == 32 else c2, sin[:, :half] if half == 32 else s2,
              "half", answers=False)
    raw = np.zeros(16 * 64 * 4 + 1, np.uint8)
    unaligned = raw[1:].view(np.float32).reshape(16, 64)
    unaligned[...] = base[0, :, 0, :64]
    check(kernel, unaligned, cos, sin, "half", answers=False)
    wide = np.cos(rng.uniform(-4, 4, (16, 80))).astype(np.float32)
    check(kernel, base[0, :, 0, :64], wide[:, :32], wide[:, 40:72], "interleaved")  # strided tables
    check(kernel, base[0, :, 0, :64], wide[:, ::2][:, :32], wide[:, 1::2][:, :32], "half", answers=False)


def test_declined_arrays(kernel: CRotationKernel) -> None:
    """float16 and byte-swapped arrays, masked arrays, mixed table dtypes, tables that would
    enlarge x, tables that do not broadcast, odd and empty feature axes, empty arrays, other
    array types: None (the generic rotation takes them)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 8, 16)).astype(np.float32)
    cos, sin = tables(rng, (8, 8))
    cases = [
        (x.astype(np.float16), cos, sin),
        (x, cos.astype(np.float16), sin.astype(np.float16)),
        (x.astype(">f4"), cos, sin),
        (np.ma.masked_array(x), cos, sin),
        (x, np.ma.masked_array(cos), sin),
        (x, cos, sin.astype(np.float64)),
        (x, cos[None, None], sin[None, None]),     # (1, 1, 8, 8): the result would be 4-D
        (x, cos[:4], sin[:4]),                     # 4 positions against 8
        (x[..., :15], cos[:, :7], sin[:, :7]),    # odd width
        (x[:0], cos, sin),
        (x.tolist(), cos, sin),
        (x, cos.tolist(), sin),
    ]
    for args in cases:
        assert kernel.rotate(*args, layout="half") is None


def test_special_values(kernel: CRotationKernel) -> None:
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -2e-39, 1e-310, 3e38, -1.0])
    rng = np.random.default_rng(3)
    for dt in ("float32", "float64"):
        x = rng.choice(specials, (3, 7, 16)).astype(dt)
        cos, sin = rng.choice(specials, (7, 8)).astype(dt), rng.choice(specials, (7, 8)).astype(dt)
        with np.errstate(all="ignore"):
            for layout in LAYOUTS:
                check(kernel, x, cos, sin, layout)


def test_read_only_inputs_are_never_written(kernel: CRotationKernel) -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 4, 512, 64)).astype(np.float32)  # big enough for the pool
    cos, sin = tables(rng, (512, 32))
    copies = [a.copy() for a in (x, cos, sin)]
    for a in (x, cos, sin):
        a.setflags(write=False)
    for layout in LAYOUTS:
        out = check(kernel, x, cos, sin, layout)
        assert out.flags.writeable and not np.shares_memory(out, x)
    for a, c in zip((x, cos, sin), copies, strict=True):
        np.testing.assert_array_equal(a, c)


def test_threads_at_once(kernel: CRotationKernel) -> None:
    rng = np.random.default_rng(5)
    jobs = []
    for k in range(8):
        x = rng.standard_normal((1, 4, 300 + 50 * k, 128)).astype(np.float32)
        c, s = tables(rng, (300 + 50 * k, 64))
        jobs.append((x, c, s, LAYOUTS[k % 2], generic(x, c, s, LAYOUTS[k % 2])))
    rotate_at_once(kernel, jobs)


# -- threads the kernel is given -------------------------------------------------------------------
def test_numpy_threads_follow_omp_num_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert numpy_threads() == cores
    for value, want in (("3", 3), ("2,1", 2), (" 5 ", 5), ("0", cores), ("many", cores), ("", cores)):
        monkeypatch.setenv("OMP_NUM_THREADS", value)
        assert numpy_threads() == want, value


def test_the_extension_is_given_those_threads(kernel: CRotationKernel, monkeypatch: pytest.MonkeyPatch,
                                               threads_seen: list[int]) -> None:
    """A large array is rotated on OMP_NUM_THREADS threads; a small one on one, without reading
    the variable."""
    seen = threads_seen
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    rng = np.random.default_rng(6)
    big = rng.standard_normal((1, 8, 512, 64)).astype(np.float32)
    c, s = tables(rng, (512, 32))
    assert kernel.rotate(big, c, s, layout="half") is not None
    assert kernel.rotate(big[:, :1, :4], c[:4], s[:4], layout="half") is not None
    assert seen == [3, 1]


def test_plans_are_cached_by_layout(kernel: CRotationKernel) -> None:
    _numpy.PLANS.clear()
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 8, 16)).astype(np.float32)
    c, s = tables(rng, (8, 8))
    for _ in range(3):
        kernel.rotate(x, c, s, layout="half")
    assert len(_numpy.PLANS) == 1
