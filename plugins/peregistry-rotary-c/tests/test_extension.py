"""The C extension itself (``peregistry_rotary_c._rotary``), driven with NumPy buffers against an
independent float64/float32 formula and an independent bfloat16 rounding: every ISA path, every
dtype pair, threads, the worker pool, fork, and every buffer check (a plan it cannot serve is a
Python exception, never a read or write outside the buffers)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from peregistry_rotary_c import _rotary
from peregistry_rotary_c._numpy import broadcast_strides

ISAS = ["baseline", "avx2", "avx512"][: ["baseline", "avx2", "avx512"].index(_rotary.ISA) + 1]
CODES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.uint16): 2}


@pytest.fixture(params=ISAS)
def isa(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each code path this CPU has (they must all give the same bits)."""
    old = _rotary._set_isa(request.param)
    try:
        yield request.param
    finally:
        _rotary._set_isa(old)


# -- references ------------------------------------------------------------------------------------
def bf16_bits_to_f32(u: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return (u.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(v: Any) -> np.ndarray[Any, Any]:
    """Round to nearest, ties to even, derived independently of the kernel's bias trick: pick the
    nearer of the two bfloat16 neighbours by float64 distance; on a tie the even one."""
    v = np.asarray(v, dtype=np.float32)
    bits = v.view(np.uint32)
    lo = (bits >> 16).astype(np.uint32)  # truncation (towards zero in magnitude)
    hi = lo + 1
    f = v.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # inf - inf, nan: replaced below
        d_lo = np.abs(f - bf16_bits_to_f32(lo.astype(np.uint16)).astype(np.float64))
        d_hi = np.abs(f - bf16_bits_to_f32((hi & 0xFFFF).astype(np.uint16)).astype(np.float64))
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (lo % 2 == 1))
    out = np.where(pick_hi, hi, lo).astype(np.uint16)
    out = np.where(np.isinf(v), lo.astype(np.uint16), out)  # inf is exact
    return np.where(np.isnan(v), np.uint16(0x7FC0), out)


def ref_rotation(x: np.ndarray[Any, Any], cos: np.ndarray[Any, Any], sin: np.ndarray[Any, Any],
                 interleaved: bool) -> np.ndarray[Any, Any]:
    """x converted to the tables' dtype, each product and sum rounded there (NumPy never fuses),
    converted back; bfloat16 bits (uint16) come back as the float32/float64 values, unrounded."""
    wide = cos.dtype
    xa = bf16_bits_to_f32(x).astype(wide) if x.dtype == np.uint16 else x.astype(wide)
    h = x.shape[-1] // 2
    a, b = (xa[..., 0::2], xa[..., 1::2]) if interleaved else (xa[..., :h], xa[..., h:])
    with np.errstate(invalid="ignore", over="ignore"):
        o1, o2 = a * cos - b * sin, b * cos + a * sin
    out = np.empty(np.broadcast_shapes(xa.shape, (*cos.shape[:-1], 2 * h)), wide)
    if interleaved:
        out[..., 0::2], out[..., 1::2] = o1, o2
    else:
        out[..., :h], out[..., h:] = o1, o2
    return out if x.dtype == np.uint16 else out.astype(x.dtype)


def call(x: np.ndarray[Any, Any], cos: np.ndarray[Any, Any], sin: np.ndarray[Any, Any],
         interleaved: bool, threads: int = 1) -> np.ndarray[Any, Any]:
    """The extension on NumPy arrays (x: float32, float64, or uint16 = bfloat16 bits), the plan
    made from their own strides."""
    lead = x.shape[:-1]
    xstr = tuple(s // x.itemsize for s in x.strides[:-1])
    cstr = broadcast_strides(cos.shape[:-1], tuple(s // cos.itemsize for s in cos.strides[:-1]), lead)
    sstr = broadcast_strides(sin.shape[:-1], tuple(s // sin.itemsize for s in sin.strides[:-1]), lead)
    assert cstr is not None and sstr is not None
    out = np.empty(x.shape, x.dtype)
    _rotary.rotate(x, out, cos, sin, lead, xstr, cstr, sstr, x.shape[-1], interleaved,
                   CODES[x.dtype], CODES[cos.dtype], threads)
    return out


def tables(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> tuple[Any, Any]:
    ang = rng.uniform(-4, 4, shape)
    return np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)


# -- the arithmetic --------------------------------------------------------------------------------
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rd", [2, 6, 64, 128, 130])
@pytest.mark.parametrize(("xdt", "wdt"), [(np.float32, np.float32), (np.float64, np.float64),
                                          (np.float32, np.float64), (np.float64, np.float32)])
def test_formula_bit_for_bit_on_every_path(isa: str, interleaved: bool, rd: int, xdt: Any,
                                           wdt: Any) -> None:
    rng = np.random.default_rng(rd)
    x = rng.standard_normal((2, 3, 5, rd)).astype(xdt)
    cos, sin = tables(rng, (2, 1, 5, rd // 2), wdt)
    np.testing.assert_array_equal(call(x, cos, sin, interleaved), ref_rotation(x, cos, sin, interleaved))


def test_float64_rotation_within_float32_rounding() -> None:
    """Against RoFormer eq. (34) in float64 with exact angles: two roundings of the products,
    one of the sum, one of the tables."""
    rng = np.random.default_rng(1)
    ang = np.arange(4096)[:, None] * 10000.0 ** (-np.arange(64) / 64)
    x = rng.standard_normal((2, 4096, 128)).astype(np.float32)
    got = call(x, np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32), False, threads=2)
    xd = x.astype(np.float64)
    a, b = xd[..., :64], xd[..., 64:]
    want = np.concatenate((a * np.cos(ang) - b * np.sin(ang), b * np.cos(ang) + a * np.sin(ang)), -1)
    bound = 4 * float(np.finfo(np.float32).eps) * (np.abs(a) + np.abs(b)).max()
    assert np.abs(got - want).max() <= bound


@pytest.mark.parametrize("wdt", [np.float32, np.float64])
@pytest.mark.parametrize("interleaved", [False, True])
def test_bfloat16_rounds_once_to_nearest_even(isa: str, interleaved: bool, wdt: Any) -> None:
    """bfloat16 inputs with signed zeros, subnormals, infinities and NaN among them; float64
    tables round through float32, as torch's float64 -> bfloat16 copy does."""
    rng = np.random.default_rng(2)
    vals = rng.standard_normal((3, 7, 64)).astype(np.float32)
    vals.flat[:6] = [0.0, -0.0, 1e-39, -3e-40, np.inf, np.nan]
    xb = f32_to_bf16_bits(vals)
    cos, sin = tables(rng, (7, 32), wdt)
    got = call(xb, cos, sin, interleaved)
    wide = ref_rotation(xb, cos, sin, interleaved)
    want = f32_to_bf16_bits(wide.astype(np.float32))
    nan = np.isnan(wide)
    assert (got[nan] == 0xFFFF).all()  # torch's vectorized conversion writes NaN so
    np.testing.assert_array_equal(got[~nan], want[~nan])


def test_bfloat16_ties_go_to_even() -> None:
    """Values exactly halfway between two bfloat16 numbers round to the even neighbour, both
    ways (x = 1, cos = the value, sin = 0: out = value, rounded once)."""
    halfway = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 1.0], dtype=np.float64)
    xb = f32_to_bf16_bits(np.ones((4, 2), dtype=np.float32))
    got = call(xb, halfway.reshape(4, 1), np.zeros((4, 1)), False)
    np.testing.assert_array_equal(bf16_bits_to_f32(got[:, 0]),
                                  np.array([1.0, 1 + 2**-6, -1.0, 1.0], dtype=np.float32))


def test_special_values_pass_as_the_formula_says() -> None:
    """NaN, infinities, signed zeros and subnormals in x and in the tables."""
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-40, 3e38, 1.0], np.float32)
    rng = np.random.default_rng(3)
    x = rng.choice(specials, (4, 9, 16)).astype(np.float32)
    cos, sin = rng.choice(specials, (9, 8)).astype(np.float32), rng.choice(specials, (9, 8)).astype(np.float32)
    for interleaved in (False, True):
        got, want = call(x, cos, sin, interleaved), ref_rotation(x, cos, sin, interleaved)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        np.testing.assert_array_equal(got.view(np.uint32)[ok], want.view(np.uint32)[ok])


# -- layouts ---------------------------------------------------------------------------------------
def test_tables_broadcast_over_any_leading_axes() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 1, 3, 2, 4, 16)).astype(np.float32)
    for shape in [(4, 8), (2, 1, 1, 1, 4, 8), (3, 1, 4, 8), (2, 1, 3, 2, 4, 8), (1, 8), (8,)]:
        cos, sin = tables(rng, shape, np.float32)
        np.testing.assert_array_equal(call(x, cos, sin, True), ref_rotation(x, cos, sin, True))


def test_strided_tables_and_x_are_read_in_place() -> None:
    """Tables that are views (a row stride larger than their width), and x transposed, stepped,
    reversed (negative strides) and broadcast (zero strides): rows are read where they are."""
    rng = np.random.default_rng(5)
    big = np.cos(rng.uniform(-4, 4, (6, 20))).astype(np.float32)
    cos, sin = big[:, :8], big[:, 10:18]
    base = rng.standard_normal((4, 12, 6, 16)).astype(np.float32)
    for x in (base[:, ::2], base.transpose(0, 2, 1, 3)[:, :, :6][:, ::-1].transpose(0, 2, 1, 3)[:, :6],
              base[::-1, 6:, :, :], np.broadcast_to(base[:1, :1], (3, 5, 6, 16)),
              base[..., :16][:, 3]):
        for interleaved in (False, True):
            np.testing.assert_array_equal(call(x, cos, sin, interleaved), ref_rotation(x, cos, sin, interleaved))


def test_empty_and_one_dimensional() -> None:
    t = np.zeros((3, 4), dtype=np.float32)
    assert call(np.zeros((0, 3, 8), dtype=np.float32), t, t, False).shape == (0, 3, 8)
    v = np.arange(8, dtype=np.float32)
    c, s = np.full(4, 0.5, np.float32), np.full(4, 0.25, np.float32)
    np.testing.assert_array_equal(call(v, c, s, False), ref_rotation(v, c, s, False))


# -- threads ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_threads_give_the_same_bits(threads: int) -> None:
    """Chunked over threads (sizes past the per-thread minimum), an odd row count included."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 5, 4099, 64)).astype(np.float32)
    cos, sin = tables(rng, (3, 1, 4099, 32), np.float32)
    np.testing.assert_array_equal(call(x, cos, sin, False, threads=threads), ref_rotation(x, cos, sin, False))


@pytest.mark.parametrize("offset", [0, 3])
def test_chunks_by_the_outputs_addresses_give_the_same_bits(offset: int) -> None:
    """An output of two 2 MiB stretches per thread and more is cut at its 2 MiB-aligned
    addresses (one transparent huge page per chunk): rows of 520 bytes straddle those
    boundaries, the output starts at an aligned address or 12 bytes past one, and the last
    chunk is partial; every row is written, with the reference's bits."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 7, 4111, 130)).astype(np.float32)  # 14.3 MiB: 7 stretches
    cos, sin = tables(rng, (1, 1, 4111, 65), np.float32)
    page = (2 << 20) // 4
    buf = np.zeros(x.size + 2 * page, np.float32)
    start = (-buf.ctypes.data // 4) % page + offset
    out = buf[start:start + x.size].reshape(x.shape)
    assert (out.ctypes.data - offset * 4) % (2 << 20) == 0
    want = ref_rotation(x, cos, sin, False)
    for threads in (2, 3):
        out[...] = np.nan
        n = _rotary.rotate(x, out, cos, sin, x.shape[:-1], (7 * 4111 * 130, 4111 * 130, 130),
                           (0, 0, 65), (0, 0, 65), 130, False, 0, 0, threads)
        assert n == threads
        np.testing.assert_array_equal(out, want)


def test_thread_count_follows_the_request_and_the_size() -> None:
    x = np.zeros((8, 1024, 128), np.float32)  # 2^20 elements: 16 threads' worth
    t = np.zeros((1024, 64), np.float32)
    out = np.empty_like(x)
    args = (x.shape[:-1], (1024, 1), (0, 64), (0, 64), 128, False, 0, 0)
    assert _rotary.rotate(x, out, t, t, *args, 1) == 1
    assert _rotary.rotate(x, out, t, t, *args, 3) == 3
    assert _rotary.rotate(x, out, t, t, *args, 1000) == 16  # no more than the work pays
    small = np.zeros((1, 32, 1, 128), np.float32)  # a decode step: inline, no worker woken
    o2 = np.empty_like(small)
    assert _rotary.rotate(small, o2, t[:1], t[:1], small.shape[:-1], (4096, 128, 128), (0, 0, 0),
                          (0, 0, 0), 128, False, 0, 0, 8) == 1


def _task_count() -> int:
    return len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 0


def test_no_thread_is_started_per_call() -> None:
    """The pool is created once and reused: after a warm-up, calls start no thread (the
    process's thread count and the pool's size stay put)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 8, 512, 64)).astype(np.float32)
    cos, sin = tables(rng, (512, 32), np.float32)
    call(x, cos, sin, False, threads=3)
    size, tasks = _rotary.pool_threads(), _task_count()
    assert size >= 2
    for _ in range(20):
        call(x, cos, sin, False, threads=3)
    assert _rotary.pool_threads() == size and _task_count() == tasks


def test_python_threads_calling_at_once_get_their_own_bits() -> None:
    """Eight Python threads, each with its own arrays, large enough to want the pool: one gets
    the pool, the others rotate on their own thread; every answer is right."""
    rng = np.random.default_rng(8)
    jobs = []
    for k in range(8):
        x = rng.standard_normal((2, 4, 512 + k, 64)).astype(np.float32)
        c, s = tables(rng, (512 + k, 32), np.float32)
        jobs.append((x, c, s, ref_rotation(x, c, s, k % 2 == 1)))
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def run(k: int) -> None:
        x, c, s, want = jobs[k]
        barrier.wait()
        try:
            for _ in range(5):
                np.testing.assert_array_equal(call(x, c, s, k % 2 == 1, threads=2), want)
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


_FORK = textwrap.dedent("""
    import os, numpy as np
    from peregistry_rotary_c import _rotary
    x = np.random.default_rng(0).standard_normal((4, 8, 512, 64)).astype(np.float32)
    c = np.ones((512, 32), np.float32); s = np.zeros((512, 32), np.float32)
    def rot():
        out = np.empty_like(x)
        _rotary.rotate(x, out, c, s, x.shape[:-1], (8 * 512 * 64, 512 * 64, 64), (0, 0, 32),
                       (0, 0, 32), 64, False, 0, 0, 2)
        return out
    assert np.array_equal(rot(), x) and _rotary.pool_threads() >= 1
    pid = os.fork()
    if pid == 0:  # the child: no pool threads survive fork; the pool starts afresh
        ok = _rotary.pool_threads() == 0 and np.array_equal(rot(), x) and _rotary.pool_threads() >= 1
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, status
    assert np.array_equal(rot(), x)
    print("ok")
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_fork_gives_the_child_a_working_pool() -> None:
    r = subprocess.run([sys.executable, "-c", _FORK], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


# -- what the extension refuses ----------------------------------------------------------------------
def _args(x: Any, out: Any, c: Any, s: Any, shape: Any = (2,), xs: Any = (8,), cs: Any = (4,),
          ss: Any = (4,), rd: int = 8, xcode: int = 0, wcode: int = 0, threads: int = 1) -> tuple[Any, ...]:
    return (x, out, c, s, shape, xs, cs, ss, rd, False, xcode, wcode, threads)


@pytest.fixture
def ok() -> dict[str, Any]:
    return {"x": np.zeros((2, 8), np.float32), "out": np.zeros((2, 8), np.float32),
            "c": np.zeros((2, 4), np.float32), "s": np.zeros((2, 4), np.float32)}


def test_the_valid_plan_runs(ok: dict[str, Any]) -> None:
    assert _rotary.rotate(*_args(**ok)) == 1


@pytest.mark.parametrize(("change", "error", "match"), [
    # buffers shorter than the plan (the segfaults of a raw-address kernel)
    ({"x": np.zeros((1, 8), np.float32)}, ValueError,
     r"x: the plan reaches bytes \[0, 64\) of a buffer that holds \[0, 32\)"),
    ({"c": np.zeros(7, np.float32)}, ValueError, r"cos: the plan reaches bytes \[0, 32\)"),
    ({"s": np.zeros((1, 4), np.float32)}, ValueError, "sin: the plan reaches"),
    ({"xs": (9,)}, ValueError, "x: the plan reaches"),
    ({"xs": (-8,)}, ValueError, r"x: the plan reaches bytes \[-32, 32\)"),
    ({"cs": (1 << 62,)}, ValueError, "cos: offsets overflow"),
    ({"shape": (3,)}, ValueError, "out: expected a C-contiguous buffer of 96 bytes, got 64"),
    ({"out": np.zeros((2, 16), np.float32)[:, ::2]}, ValueError, "not C-contiguous"),
    ({"out": np.zeros((2, 8), np.float32)[:, :4]}, ValueError, "out: expected a C-contiguous buffer"),
    # wrong kinds of buffer
    ({"x": np.zeros((2, 8), np.int32)}, TypeError, "x: expected items of 4 bytes \\(float32\\), got format 'i'"),
    ({"x": np.zeros((2, 8), np.float64)}, TypeError, "x: expected items of 4 bytes"),
    ({"c": np.zeros((2, 4), np.float16)}, TypeError, "cos: expected items of 4 bytes"),
    ({"x": np.zeros((2, 8), ">f4")}, TypeError, "x: expected items"),
    ({"x": "x"}, TypeError, "x: expected an object with the buffer protocol"),
    ({"out": None}, TypeError, "out: expected an object with the buffer protocol"),
    # arguments
    ({"xcode": 7}, ValueError, "xdtype: unsupported code 7"),
    ({"wcode": 2}, ValueError, "wdtype: unsupported code 2"),
    ({"rd": 7}, ValueError, "rotary_dim: 7 must be even"),
    ({"rd": 0}, ValueError, "rotary_dim: 0 must be even and at least 2"),
    ({"threads": 0}, ValueError, "threads: 0 must be at least 1"),
    ({"cs": (4, 0)}, ValueError, "cos_strides: expected 1 entries, got 2"),
    ({"ss": ("4",)}, TypeError, "sin_strides: entries must be ints"),
    ({"shape": (-2,)}, ValueError, "shape: negative size"),
    ({"shape": (1,) * 65, "xs": (0,) * 65, "cs": (0,) * 65, "ss": (0,) * 65}, ValueError, "at most 64 axes"),
])
def test_plans_it_cannot_serve_raise(ok: dict[str, Any], change: dict[str, Any], error: Any,
                                     match: str) -> None:
    with pytest.raises(error, match=match):
        _rotary.rotate(*_args(**{**ok, **change}))


def test_read_only_output_raises(ok: dict[str, Any]) -> None:
    ro = np.zeros((2, 8), np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="out: the buffer is read-only"):
        _rotary.rotate(*_args(**{**ok, "out": ro}))


def test_too_many_elements_raise(ok: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="shape: too many elements"):
        _rotary.rotate(*_args(**{**ok, "shape": (1 << 40, 1 << 40), "xs": (0, 0), "cs": (0, 0),
                                 "ss": (0, 0)}))


def test_unaligned_and_overlapping_buffers_raise(ok: dict[str, Any]) -> None:
    raw = np.zeros(2 * 8 * 4 + 1, np.uint8)
    unaligned = raw[1:].view(np.float32).reshape(2, 8)
    with pytest.raises(ValueError, match="x: the buffer is not aligned to its 4-byte items"):
        _rotary.rotate(*_args(**{**ok, "x": unaligned}))
    same = np.zeros((2, 8), np.float32)
    with pytest.raises(ValueError, match="out overlaps x"):
        _rotary.rotate(*_args(**{**ok, "x": same, "out": same}))
    whole = np.zeros((2, 12), np.float32)
    with pytest.raises(ValueError, match="out overlaps cos"):  # out holds cos's rows too
        _rotary.rotate(whole[:, :8].copy(), whole.reshape(-1)[:16], whole, whole,
                       (2,), (8,), (12,), (12,), 8, False, 0, 0, 1)


def test_wrong_argument_count_raises(ok: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match="takes 13 positional arguments"):
        _rotary.rotate(*_args(**ok)[:12])


def test_memoryview_and_bytearray_buffers() -> None:
    """Any exporter works, also one without a float format (bytes: only sizes are checked)."""
    x = np.arange(8, dtype=np.float32)
    out = bytearray(32)
    c, s = np.full(4, 0.5, np.float32), np.full(4, 0.25, np.float32)
    with pytest.raises(TypeError, match="out: expected items of 4 bytes"):
        _rotary.rotate(x, out, c, s, (), (), (), (), 8, False, 0, 0, 1)
    mv = memoryview(out).cast("f")
    _rotary.rotate(memoryview(x.data), mv, c, s, (), (), (), (), 8, False, 0, 0, 1)
    np.testing.assert_array_equal(np.frombuffer(out, np.float32), ref_rotation(x, c, s, False))
