"""The optional C rotation kernel (``peregistry/_native/rotary.c``) and the rope engine's torch
fast path through it.

Kernel-level tests drive it with NumPy buffers (it is framework-free) against an independent
float64 formula and an independent bfloat16 rounding; torch-level tests check that the eager path
through the kernel is bit for bit the pure-torch expression and Hugging Face's, on every thread
count, with both thread runners.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from peregistry.rope import _kernel
from peregistry.rope import _torch_kernel as _torch_paths
from peregistry.testing._core import selected_backends

SELECTED = [b.name for b in selected_backends()]

#: Set by tox (every env builds the package with a C compiler at hand): a kernel that failed to
#: build is then a failure, not a skip.
EXPECT_ENV = "PEREGISTRY_EXPECT_NATIVE"


@pytest.fixture(scope="module")
def kernel() -> Any:
    k = _kernel.load_kernel()
    if k is None:
        if os.environ.get(EXPECT_ENV) == "1":
            pytest.fail(f"{EXPECT_ENV}=1 but the native kernel is {_kernel.kernel_status()}")
        pytest.skip(f"native kernel {_kernel.kernel_status()}")
    return k


def test_kernel_is_built_where_expected() -> None:
    if os.environ.get(EXPECT_ENV) != "1":
        pytest.skip(f"{EXPECT_ENV} not set: this environment may lack a C compiler")
    assert _kernel.kernel_status() == "on"


# -- references ------------------------------------------------------------------------------------
def bf16_bits_to_f32(u: np.ndarray) -> np.ndarray:
    return (u.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(v: np.ndarray) -> np.ndarray:
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


def ref_rotation(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, rd: int, interleaved: bool,
                 wide: Any) -> np.ndarray:
    """The rotation in the tables' dtype, each product and sum rounded (NumPy never fuses), in
    the tables' dtype; the features past ``rd`` copied from ``x`` unchanged."""
    if x.dtype == np.uint16:  # bfloat16 bits: rotate their float32 values; the caller rounds
        x = bf16_bits_to_f32(x).astype(wide)
    out = x.copy()
    h = rd // 2
    xa = x.astype(wide)
    a, b = (xa[..., 0:rd:2], xa[..., 1:rd:2]) if interleaved else (xa[..., :h], xa[..., h:rd])
    c, s = cos.astype(wide), sin.astype(wide)
    o1, o2 = a * c - b * s, b * c + a * s
    if interleaved:
        out[..., 0:rd:2], out[..., 1:rd:2] = o1, o2
    else:
        out[..., :h], out[..., h:rd] = o1, o2
    return out


def run_kernel(k: Any, x: np.ndarray, cos: np.ndarray, sin: np.ndarray, rd: int,
               interleaved: bool, threads: int = 1, xcode: int | None = None,
               gomp: int = 0) -> np.ndarray:
    """Call the kernel on NumPy buffers; cos/sin broadcast against x.shape[:-1]."""
    assert x.flags.c_contiguous
    out = np.empty_like(x)
    lead = x.shape[:-1]
    cstr = _torch_paths.broadcast_strides(cos.shape, tuple(s // cos.itemsize for s in cos.strides), lead)
    sstr = _torch_paths.broadcast_strides(sin.shape, tuple(s // sin.itemsize for s in sin.strides), lead)
    assert cstr is not None and sstr is not None
    code = {np.dtype(np.float32): 0, np.dtype(np.float64): 1}.get(x.dtype) if xcode is None else xcode
    wcode = {np.dtype(np.float32): 0, np.dtype(np.float64): 1}[cos.dtype]
    k.rotate(x.ctypes.data, out.ctypes.data, cos.ctypes.data, sin.ctypes.data, code, wcode,
             x.shape[-1], rd, interleaved, lead, cstr, sstr, threads, gomp)
    return out


# -- kernel, through NumPy buffers -----------------------------------------------------------------
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize(("dim", "rd"), [(64, 64), (128, 128), (96, 64), (10, 6), (2, 2), (8, 0)])
@pytest.mark.parametrize(("xdt", "wdt"), [(np.float32, np.float32), (np.float64, np.float64),
                                          (np.float32, np.float64), (np.float64, np.float32)])
def test_kernel_matches_formula_bit_for_bit(kernel: Any, interleaved: bool, dim: int, rd: int,
                                            xdt: Any, wdt: Any) -> None:
    rng = np.random.default_rng(dim * 7 + rd)
    x = rng.standard_normal((2, 3, 5, dim)).astype(xdt)
    ang = rng.uniform(-4, 4, (2, 1, 5, rd // 2))
    cos, sin = np.cos(ang).astype(wdt), np.sin(ang).astype(wdt)
    got = run_kernel(kernel, x, cos, sin, rd, interleaved)
    want = ref_rotation(x, cos, sin, rd, interleaved, wdt)
    assert want.dtype == xdt
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[..., rd:], x[..., rd:])  # pass-through is a copy


def test_kernel_matches_float64_rotation_within_float32_rounding(kernel: Any) -> None:
    """Against RoFormer eq. (34) in float64 with exact angles: two roundings of the products, one
    of the sum, one of the tables."""
    rng = np.random.default_rng(1)
    pos = np.arange(4096)[:, None]
    inv = 10000.0 ** (-np.arange(64) / 64)
    ang = pos * inv
    x = rng.standard_normal((2, 4096, 128)).astype(np.float32)
    got = run_kernel(kernel, x, np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32),
                     128, False)
    xd = x.astype(np.float64)
    a, b = xd[..., :64], xd[..., 64:]
    want = np.concatenate((a * np.cos(ang) - b * np.sin(ang), b * np.cos(ang) + a * np.sin(ang)), -1)
    eps = float(np.finfo(np.float32).eps)
    bound = 4 * eps * (np.abs(a) + np.abs(b)).max()
    assert np.abs(got - want).max() <= bound


@pytest.mark.parametrize("interleaved", [False, True])
def test_kernel_bfloat16_rounds_once_to_nearest_even(kernel: Any, interleaved: bool) -> None:
    rng = np.random.default_rng(2)
    # bfloat16 inputs, with signed zeros, subnormals, infinities and NaN among them.
    vals = rng.standard_normal((3, 7, 64)).astype(np.float32)
    vals.flat[:6] = [0.0, -0.0, 1e-39, -3e-40, np.inf, np.nan]
    xb = f32_to_bf16_bits(vals)
    ang = rng.uniform(-4, 4, (7, 32))
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    got = run_kernel(kernel, xb, cos, sin, 64, interleaved, xcode=2)
    with np.errstate(invalid="ignore"):
        wide = ref_rotation(xb, cos, sin, 64, interleaved, np.float32)
    want = f32_to_bf16_bits(wide)
    nan = np.isnan(wide)
    np.testing.assert_array_equal(np.isnan(bf16_bits_to_f32(got)), nan)
    np.testing.assert_array_equal(got[~nan], want[~nan])


def test_kernel_bfloat16_ties_go_to_even(kernel: Any) -> None:
    """Values exactly halfway between two bfloat16 numbers (cos=1, sin=0 makes out = x in
    float32) round to the even neighbour, both ways."""
    # 1 + 2**-8 lies halfway between 1 and 1 + 2**-7 (even: 1); 1 + 3 * 2**-8 between
    # 1 + 2**-7 (odd) and 1 + 2**-6 (even: up).
    x32 = np.array([[1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 1.0]], dtype=np.float32)
    # The kernel reads bfloat16, so feed the halfway values through float64 tables instead:
    # x = 1 (exact), cos = value, sin = 0 gives out = value, rounded once.
    xb = f32_to_bf16_bits(np.ones((4, 2), dtype=np.float32))
    cos = x32.reshape(4, 1).astype(np.float64)
    sin = np.zeros((4, 1))
    got = run_kernel(kernel, xb, cos, sin, 2, False, xcode=2)
    np.testing.assert_array_equal(bf16_bits_to_f32(got[:, 0]),
                                  np.array([1.0, 1 + 2**-6, -1.0, 1.0], dtype=np.float32))


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_kernel_threads_give_the_same_bits(kernel: Any, threads: int) -> None:
    """Chunked over threads (sizes past the per-thread minimum), an odd row count included."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 5, 4099, 64)).astype(np.float32)
    ang = rng.uniform(-4, 4, (3, 1, 4099, 32))
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    got = run_kernel(kernel, x, cos, sin, 64, False, threads=threads)
    np.testing.assert_array_equal(got, ref_rotation(x, cos, sin, 64, False, np.float32))


def test_kernel_broadcasts_tables_over_any_leading_axes(kernel: Any) -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 1, 3, 2, 4, 16)).astype(np.float32)
    for shape in [(4, 8), (2, 1, 1, 1, 4, 8), (3, 1, 4, 8), (2, 1, 3, 2, 4, 8), (1, 8)]:
        ang = rng.uniform(-4, 4, shape)
        cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
        got = run_kernel(kernel, x, cos, sin, 16, True)
        np.testing.assert_array_equal(got, ref_rotation(x, cos, sin, 16, True, np.float32))


def test_kernel_strided_tables(kernel: Any) -> None:
    """Tables that are views (a row stride larger than their width) are read in place."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 6, 16)).astype(np.float32)
    big = np.cos(rng.uniform(-4, 4, (6, 20))).astype(np.float32)
    cos, sin = big[:, :8], big[:, 10:18]
    got = run_kernel(kernel, x, cos, sin, 16, False)
    np.testing.assert_array_equal(got, ref_rotation(x, cos, sin, 16, False, np.float32))


def test_kernel_empty_and_one_dimensional(kernel: Any) -> None:
    x = np.zeros((0, 3, 8), dtype=np.float32)
    t = np.zeros((3, 4), dtype=np.float32)
    assert run_kernel(kernel, x, t, t, 8, False).shape == (0, 3, 8)
    v = np.arange(8, dtype=np.float32)
    c, s = np.full(4, 0.5, np.float32), np.full(4, 0.25, np.float32)
    np.testing.assert_array_equal(run_kernel(kernel, v, c, s, 8, False),
                                  ref_rotation(v, c, s, 8, False, np.float32))


def test_kernel_rejects_bad_arguments(kernel: Any) -> None:
    x = np.zeros((2, 8), dtype=np.float32)
    t = np.zeros((2, 4), dtype=np.float32)
    args = [x.ctypes.data, x.ctypes.data, t.ctypes.data, t.ctypes.data]
    with pytest.raises(ValueError, match="xdtype: unsupported code 7"):
        kernel.rotate(*args, 7, 0, 8, 8, False, (2,), (4,), (4,), 1)
    with pytest.raises(ValueError, match="wdtype: unsupported code 2"):
        kernel.rotate(*args, 0, 2, 8, 8, False, (2,), (4,), (4,), 1)
    with pytest.raises(ValueError, match="rotary_dim: 7 must be even"):
        kernel.rotate(*args, 0, 0, 8, 7, False, (2,), (4,), (4,), 1)
    with pytest.raises(ValueError, match="cos_strides: expected 1 entries, got 2"):
        kernel.rotate(*args, 0, 0, 8, 8, False, (2,), (4, 0), (4,), 1)
    with pytest.raises(ValueError, match="shape: at most 16 axes"):
        kernel.rotate(*args, 0, 0, 8, 8, False, (1,) * 17, (0,) * 17, (0,) * 17, 1)


def test_broadcast_strides() -> None:
    bs = _torch_paths.broadcast_strides
    assert bs((5, 8), (8, 1), (2, 3, 5)) == (0, 0, 8)
    assert bs((2, 1, 5, 8), (40, 40, 8, 1), (2, 3, 5)) == (40, 0, 8)
    assert bs((1, 8), (8, 1), (2, 3, 5)) == (0, 0, 0)
    assert bs((4, 8), (8, 1), (2, 3, 5)) is None  # 4 does not broadcast to 5
    assert bs((1, 2, 3, 5, 8), (0, 0, 0, 0, 1), (2, 3, 5)) is None  # more axes than x


def _status_in_subprocess(value: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PEREGISTRY_NATIVE=value)
    return subprocess.run([sys.executable, "-c", "from peregistry.rope._kernel import "
                           "kernel_status; print(kernel_status())"],
                          env=env, capture_output=True, text=True, timeout=60)


def test_native_switch_off_and_bad_value() -> None:
    r = _status_in_subprocess("0")
    assert r.returncode == 0 and r.stdout.strip() == "off (PEREGISTRY_NATIVE=0)"
    r = _status_in_subprocess("maybe")
    assert r.returncode != 0
    assert "PEREGISTRY_NATIVE='maybe': expected 1 or 0" in r.stderr


# -- the NumPy path ---------------------------------------------------------------------------------
@pytest.fixture
def numpy_selected() -> None:
    if "numpy" not in SELECTED:
        pytest.skip("backend numpy not selected by PEREGISTRY_BACKENDS")


def test_numpy_kernel_takes_arrays_as_buffers(kernel: Any) -> None:
    """The kernel reads an array given itself (its buffer) as it reads its address."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 4, 16)).astype(np.float32)
    cos, sin = rng.standard_normal((2, 4, 8)).astype(np.float32)
    by_address = run_kernel(kernel, x, cos, sin, 16, False)
    out = np.empty_like(x)
    kernel.rotate(x, out, cos, sin, 0, 0, 16, 16, False, x.shape[:-1], (0, 8), (0, 8), 1)
    np.testing.assert_array_equal(out, by_address)
    with pytest.raises(TypeError):  # an object that is neither an address nor a buffer
        kernel.rotate(x, "out", cos, sin, 0, 0, 16, 16, False, x.shape[:-1], (0, 8), (0, 8), 1)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [None, 48])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("pos_shape", [None, (64,), (2, 1, 64), (2, 3, 64)])
def test_numpy_kernel_is_the_generic_rotation(
        numpy_selected: None, kernel: Any, monkeypatch: pytest.MonkeyPatch, layout: str,
        rotary_dim: int | None, dtype: str, pos_shape: tuple[int, ...] | None) -> None:
    """NumPy arrays rotate through the C kernel (one call each), bit for bit the generic Array API
    rotation (the reference), for both layouts, partial rotary and tables broadcast over batch
    and heads; through ``tables()`` too."""
    import peregistry as per

    enc = per.get_encoder("rotary", dim=64, rotary_dim=rotary_dim, layout=layout)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 64, 64)).astype(dtype)
    pos = None if pos_shape is None else rng.integers(0, 5000, size=pos_shape)
    calls = _native_calls(monkeypatch, kernel)
    fast = enc.rotate(x, pos)
    via_tables = enc.tables(np.arange(64) if pos is None else pos).rotate(x)
    assert len(calls) == 2
    ref = enc._rotate(x, pos, offset=0, params=None, seq_len=None, native=False)
    assert fast.dtype == x.dtype and fast.shape == x.shape
    np.testing.assert_array_equal(fast, ref)
    np.testing.assert_array_equal(via_tables, ref)


def test_numpy_kernel_is_skipped_where_it_does_not_apply(numpy_selected: None, kernel: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Views that are not C-contiguous, float16, masked arrays and the kernel switched off take
    the generic rotation, with its bits."""
    import peregistry as per

    enc = per.get_encoder("rotary", dim=16)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 8, 16))
    calls = _native_calls(monkeypatch, kernel)
    for arr in (x[:, ::2], x.astype(np.float16), np.ma.masked_array(x)):
        got = enc.rotate(arr)
        ref = enc._rotate(np.asarray(arr), None, offset=0, params=None, seq_len=None,
                          native=False)
        np.testing.assert_array_equal(np.asarray(got), ref)
    assert calls == []
    monkeypatch.setattr(_kernel.KERNEL, "module", None)
    np.testing.assert_array_equal(enc.rotate(x), enc._rotate(x, None, offset=0, params=None,
                                                            seq_len=None, native=False))


# -- the torch adapter -----------------------------------------------------------------------------
@pytest.fixture
def torch() -> Any:
    if "torch" not in SELECTED:
        pytest.skip("backend torch not selected by PEREGISTRY_BACKENDS")
    return pytest.importorskip("torch")


def _pure_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Switch the kernel off for the rest of the test (the pure-torch eager path)."""
    monkeypatch.setattr(_kernel.KERNEL, "module", None)


def _rotate_both(monkeypatch: pytest.MonkeyPatch, enc: Any, x: Any, pos: Any) -> tuple[Any, Any]:
    fast = enc.rotate(x, pos)
    with monkeypatch.context() as m:
        _pure_torch(m)
        slow = enc.rotate(x, pos)
    return fast, slow


def _native_calls(monkeypatch: pytest.MonkeyPatch, kernel: Any) -> list[int]:
    calls: list[int] = []
    real = kernel.rotate

    class Spy:
        ISA = kernel.ISA

        @staticmethod
        def rotate(*args: Any) -> None:
            calls.append(args[13] if len(args) > 13 else 0)  # the GOMP_parallel address
            real(*args)

    monkeypatch.setattr(_kernel.KERNEL, "module", Spy)
    return calls


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [None, 48])
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("pos_shape", [None, (64,), (2, 1, 64), (2, 3, 64)])
def test_torch_eager_kernel_is_the_pure_torch_expression(
        torch: Any, kernel: Any, monkeypatch: pytest.MonkeyPatch, layout: str,
        rotary_dim: int | None, dtype: str, pos_shape: tuple[int, ...] | None) -> None:
    import peregistry as per

    opts: dict[str, Any] = {"dim": 64, "layout": layout}
    if rotary_dim is not None:
        opts["rotary_dim"] = rotary_dim
    enc = per.get_encoder("rotary", **opts)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 64, 64, generator=g).to(getattr(torch, dtype))
    pos = None if pos_shape is None else torch.randint(0, 1 << 16, pos_shape, generator=g)
    calls = _native_calls(monkeypatch, kernel)
    fast = enc.rotate(x, pos)
    assert len(calls) == 1, "the kernel was not used"
    with monkeypatch.context() as m:
        _pure_torch(m)
        slow = enc.rotate(x, pos)
    generic = enc._rotate(x, pos, offset=0, params=None, seq_len=None, native=False)
    assert fast.dtype == x.dtype and fast.shape == x.shape
    assert torch.equal(fast, slow)
    assert torch.equal(fast, generic)


def test_torch_kernel_uses_torch_openmp_team(torch: Any, kernel: Any,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """With torch on OpenMP (Linux wheels), the kernel is handed torch's GOMP_parallel, and the
    result equals the POSIX-threads runner and one thread."""
    from peregistry.rope._torch_kernel import torch_gomp

    if not torch.backends.openmp.is_available() or not sys.platform.startswith("linux"):
        pytest.skip("torch is not built with OpenMP here, or not on Linux (/proc/self/maps)")
    gomp = torch_gomp()
    assert gomp != 0
    rng = np.random.default_rng(6)
    x = rng.standard_normal((4, 8, 512, 64)).astype(np.float32)
    ang = rng.uniform(-4, 4, (512, 32))
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    one = run_kernel(kernel, x, cos, sin, 64, False, threads=1)
    np.testing.assert_array_equal(run_kernel(kernel, x, cos, sin, 64, False, 2, gomp=gomp), one)
    np.testing.assert_array_equal(run_kernel(kernel, x, cos, sin, 64, False, 2, gomp=0), one)
    calls = _native_calls(monkeypatch, kernel)
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        import peregistry as per

        per.get_encoder("rotary", dim=64).rotate(torch.from_numpy(x))
    finally:
        torch.set_num_threads(old)
    assert calls == [gomp]


def test_torch_kernel_is_skipped_where_it_does_not_apply(torch: Any, kernel: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Non-contiguous x, float16 and a negated view go the pure-torch way, with equal results."""
    import peregistry as per

    enc = per.get_encoder("rotary", dim=32)
    x = torch.randn(2, 16, 4, 32, generator=torch.Generator().manual_seed(0))
    calls = _native_calls(monkeypatch, kernel)
    for arg in (x.transpose(1, 2), x.to(torch.float16), x._neg_view()):
        fast = enc.rotate(arg)
        generic = enc._rotate(arg, None, offset=0, params=None, seq_len=None, native=False)
        assert torch.equal(fast, generic)
    assert calls == []


def test_torch_kernel_under_grad_and_compile_is_not_used(torch: Any, kernel: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import peregistry as per

    enc = per.get_encoder("rotary", dim=32)
    x = torch.randn(2, 4, 32, generator=torch.Generator().manual_seed(1), requires_grad=True)
    calls = _native_calls(monkeypatch, kernel)
    y = enc.rotate(x)
    y.sum().backward()
    assert calls == [] and x.grad is not None


def test_hf_llama_bit_for_bit_through_the_kernel(torch: Any, kernel: Any,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Hugging Face's ``apply_rotary_pos_emb`` on our float32 tables equals the kernel's float32
    rotation bit for bit (prefill-sized, so the multithreaded path runs)."""
    pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    import peregistry as per

    enc = per.get_encoder("rotary", dim=128)
    q = torch.randn(1, 8, 1024, 128, generator=torch.Generator().manual_seed(2))
    calls = _native_calls(monkeypatch, kernel)
    ours = enc.rotate(q)
    assert len(calls) == 1
    cos, sin = enc.cos_sin(torch.arange(1024))
    hq, _ = apply_rotary_pos_emb(q, q, cos[None], sin[None])
    assert torch.equal(ours, hq)


# -- tensors the kernel must not touch (found in review) -------------------------------------------
_FAKE_AND_FUNCTIONAL = r"""
import torch, peregistry as per, peregistry.rope
from torch._subclasses.fake_tensor import FakeTensorMode
enc = per.get_encoder("rotary", dim=64)
x = torch.randn(2, 4, 8, 64, generator=torch.Generator().manual_seed(0))
with FakeTensorMode() as m:
    y = enc.rotate(m.from_tensor(x))
    assert type(y).__name__ == "FakeTensor" and y.shape == x.shape, y
assert per.rope.table_cache_bytes()[0] == 0, "fake tables were kept"
assert torch.equal(torch.func.functionalize(enc.rotate)(x), enc.rotate(x))
assert torch.equal(torch.vmap(enc.rotate)(x), enc.rotate(x))
print("ok")
"""


def test_fake_functional_and_vmapped_tensors_never_reach_the_kernel(torch: Any, kernel: Any) -> None:
    """Their ``data_ptr`` is no buffer of theirs (the kernel would read freed or foreign memory):
    run in a subprocess, so that a regression is a failed test, not a crashed run."""
    r = subprocess.run([sys.executable, "-c", _FAKE_AND_FUNCTIONAL], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])


# torch 2.13's forward-AD decompositions script a helper on first use (its warning, not ours).
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_forward_mode_ad_keeps_the_tangent(torch: Any, kernel: Any) -> None:
    """Rotation is linear in x, so the tangent of rotate(x) along t is rotate(t)."""
    import torch.autograd.forward_ad as fwad

    import peregistry as per

    enc = per.get_encoder("rotary", dim=16)
    gen = torch.Generator().manual_seed(3)
    x, t = torch.randn(2, 8, 16, generator=gen), torch.randn(2, 8, 16, generator=gen)
    with fwad.dual_level():
        tangent = fwad.unpack_dual(enc.rotate(fwad.make_dual(x, t))).tangent
    assert tangent is not None
    torch.testing.assert_close(tangent, enc.rotate(t))


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32"])
def test_narrow_integer_positions_are_positions_not_masks(torch: Any, dtype: str) -> None:
    import peregistry as per

    enc = per.get_encoder("rotary", dim=16)
    x = torch.randn(1, 1024, 16, generator=torch.Generator().manual_seed(4))
    p = torch.ones(1024, dtype=getattr(torch, dtype))
    assert torch.equal(enc.rotate(x, p), enc.rotate(x, p.long()))


def test_float64_x_with_float32_tables_rotates_in_float64(torch: Any, kernel: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the torch fast path directly (rotate() itself widens the tables first): type
    promotion makes it a float64 rotation, which the kernel's float32 rows are not, so it is
    left out."""
    from peregistry.rope import _torch

    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 4, 64, 64, dtype=torch.float64, generator=gen)
    ang = torch.rand(64, 32, dtype=torch.float64, generator=gen) * 8 - 4
    c, s = ang.cos().float(), ang.sin().float()
    calls = _native_calls(monkeypatch, kernel)
    got = _torch.rotate(x, c, s, rotary_dim=64, interleaved=False)
    assert calls == []
    a, b = x[..., :32], x[..., 32:]
    assert torch.equal(got, torch.cat((a * c - b * s, b * c + a * s), -1))


def test_inference_mode_tables_serve_training_later(torch: Any) -> None:
    import peregistry as per

    enc = per.get_encoder("rotary", dim=64)
    x = torch.randn(2, 4, 8, 64, generator=torch.Generator().manual_seed(6))
    with torch.inference_mode():
        enc.rotate(x, offset=3)
        enc.rotate(x, torch.arange(8))
    for kwargs in ({"offset": 3}, {"offset": 5}, {"positions": torch.arange(8)}):
        xr = x.clone().requires_grad_()
        enc.rotate(xr, **kwargs).sum().backward()
        assert xr.grad is not None


def test_bfloat16_nan_bits_match_torch(torch: Any, kernel: Any,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """NaN is written as torch's own float32 -> bfloat16 copy writes it (0xFFFF on ATen's
    vectorized CPU path), so results are bitwise equal with NaN in the input too."""
    import peregistry as per

    enc = per.get_encoder("rotary", dim=64)
    x = torch.randn(2, 4, 64, 64, generator=torch.Generator().manual_seed(7))
    x[0, 0, 0, 0], x[0, 0, 1, 3], x[0, 0, 2, 5] = float("nan"), -float("nan"), float("inf")
    xb = x.to(torch.bfloat16)
    fast = enc.rotate(xb)
    with monkeypatch.context() as m:
        _pure_torch(m)
        slow = enc.rotate(xb)
    assert torch.isnan(fast).any()
    assert torch.equal(fast.view(torch.int16), slow.view(torch.int16))
