"""The public rope engine (:mod:`peregistry.rope`): each pure function against an independent float64
formula, the fast application (:func:`apply_rotary`, :class:`RotaryTables`, the framework
dispatch) against the generic reference bit for bit, on every selected backend; the base classes
plugins build on; the dispatch living in the engine, not in the backend adapters."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import peregistry as per
from peregistry import rope
from peregistry.testing._core import selected_backends

SELECTED = [b.name for b in selected_backends()]


def _arr(backend: Any, a: np.ndarray, dtype: str = "float32") -> Any:
    return backend.from_numpy(a, dtype=backend.float_dtypes()[dtype])


def ref_rotate64(x: np.ndarray, angles: np.ndarray, *, rotary_dim: int, interleaved: bool) -> Any:
    """Independent float64 reference: a 2x2 rotation matrix per pair, applied pair by pair."""
    x = np.asarray(x, dtype=np.float64)
    out = x.copy()
    h = rotary_dim // 2
    for i in range(h):
        ia, ib = (2 * i, 2 * i + 1) if interleaved else (i, i + h)
        c, s = np.cos(angles[..., i]), np.sin(angles[..., i])
        a, b = x[..., ia], x[..., ib]
        out[..., ia] = c * a - s * b
        out[..., ib] = s * a + c * b
    return out


# -- the pure functions ------------------------------------------------------------------------
@pytest.mark.parametrize(("d", "theta"), [(2, 10000.0), (64, 10000.0), (128, 500000.0), (6, 3.5)])
def test_inv_freq_is_roformer_and_the_scalings_base(d: int, theta: float) -> None:
    got = rope.inv_freq(d, theta)
    assert got.dtype == np.float64 and got.shape == (d // 2,)
    want = np.array([theta ** (-2.0 * i / d) for i in range(d // 2)])
    np.testing.assert_allclose(got, want, rtol=4e-16, atol=0)
    np.testing.assert_array_equal(got, per.get_encoder("rotary", dim=d, theta=theta).inv_freq())
    with pytest.warns(DeprecationWarning, match="peregistry.rope.inv_freq"):
        from peregistry.rope.scalings import base_inv_freq  # its older name
    assert base_inv_freq is rope.inv_freq


@pytest.mark.parametrize(("args", "pattern"), [
    ((0, 1e4), "rotary_dim must be a positive even integer"), ((5, 1e4), "got 5"),
    ((True, 1e4), "got True"), ((8, 1.0), "theta must be a finite number > 0"),
    ((8, -2.0), "got -2.0"), ((8, float("inf")), "got inf"),
])
def test_inv_freq_rejects_bad_arguments(args: tuple[Any, Any], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        rope.inv_freq(*args)


def test_layout_functions_on_numpy_by_hand() -> None:
    half = np.array([[1.0, 2.0, 3.0]])
    np.testing.assert_array_equal(rope.full_width(half), [[1, 2, 3, 1, 2, 3]])
    np.testing.assert_array_equal(rope.full_width(half, layout="interleaved"),
                                  [[1, 1, 2, 2, 3, 3]])
    for layout in rope.LAYOUTS:
        np.testing.assert_array_equal(rope.half_width(rope.full_width(half, layout=layout),
                                                      layout=layout), half)
    x = np.array([0.0, 1.0, 2.0, 3.0])
    np.testing.assert_array_equal(rope.rotate_half(x), [-2, -3, 0, 1])
    np.testing.assert_array_equal(rope.rotate_every_two(x), [-1, 0, -3, 2])
    with pytest.raises(ValueError, match="layout must be one of 'half', 'interleaved', got 'neox'"):
        rope.full_width(half, layout="neox")  # type: ignore[arg-type]


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary_dim", [16, 10])
def test_apply_rotation_is_the_float64_formula(backend: Any, interleaved: bool,
                                               rotary_dim: int) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 5, 16))
    ang = rng.uniform(-7, 7, (5, rotary_dim // 2))
    wide = "float64" if "float64" in backend.float_dtypes() else "float32"
    xp = backend.namespace()
    xb, c, s = _arr(backend, x, wide), _arr(backend, np.cos(ang), wide), _arr(backend, np.sin(ang),
                                                                            wide)
    got = rope.apply_rotation(xb, c, s, rotary_dim=rotary_dim, interleaved=interleaved,
                              cdt=xb.dtype, xp=xp)
    tol = 1e-12 if wide == "float64" else 2e-6
    np.testing.assert_allclose(backend.to_numpy(got), ref_rotate64(
        x, ang, rotary_dim=rotary_dim, interleaved=interleaved), rtol=0, atol=tol)
    layout = "interleaved" if interleaved else "half"
    public = rope.apply_rotary(xb, c, s, layout=layout)
    np.testing.assert_array_equal(backend.to_numpy(public), backend.to_numpy(got))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_hf_expression_with_full_width_tables_is_the_rotation(layout: str) -> None:
    """``x·cos + rotate_pairs(x)·sin`` on full-width tables (Hugging Face / GPT-J) equals the
    pairwise rotation bit for bit: negation is exact, and each product and sum rounds once."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 7, 8)).astype(np.float32)
    ang = rng.uniform(-5, 5, (7, 4))
    c, s = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    swap = rope.rotate_every_two if layout == "interleaved" else rope.rotate_half
    hf = x * rope.full_width(c, layout=layout) + swap(x) * rope.full_width(s, layout=layout)  # type: ignore[arg-type]
    import array_api_compat.numpy as xp

    ours = rope.apply_rotation(x, c, s, rotary_dim=8, interleaved=layout == "interleaved",
                               cdt=np.float32, xp=xp)
    np.testing.assert_array_equal(hf, ours)


# -- the fast application ------------------------------------------------------------------------
@pytest.mark.parametrize("opts", [
    {"dim": 32}, {"dim": 32, "layout": "interleaved", "rotary_dim": 16},
    {"dim": 32, "scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}},
])
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_tables_rotate_equals_rotate_bit_for_bit(backend: Any, opts: dict[str, Any],
                                                 dtype: str) -> None:
    if dtype not in backend.float_dtypes():
        pytest.skip(f"{backend.name} has no {dtype}")
    enc = per.get_encoder("rotary", **opts)
    rng = np.random.default_rng(3)
    ids = backend.from_numpy(np.array([[[0, 5, 4097, 9]], [[2, 2, 1, 70000]]]))  # (2, 1, 4)
    q, k = (_arr(backend, rng.standard_normal((2, 3, 4, 32)), dtype) for _ in range(2))
    tables = enc.tables(ids)  # type: ignore[attr-defined]
    assert isinstance(tables, rope.RotaryTables) and tables.rotary_dim == enc._rotary_dim()  # type: ignore[attr-defined]
    for _ in range(2):  # the second time from the per-dtype cast kept in eager mode
        tq, tk = tables.rotate_all(q, k)
        for got, x in ((tq, q), (tk, k)):
            assert got.dtype == x.dtype and tuple(got.shape) == tuple(x.shape)
            np.testing.assert_array_equal(backend.to_numpy(got),
                                          backend.to_numpy(enc.rotate(x, ids)))


def test_mrope_tables_equal_rotate(backend: Any) -> None:
    enc = per.get_encoder("mrope", dim=16, sections=(3, 3, 2), interleaved=True)
    ids = backend.from_numpy(np.random.default_rng(4).integers(0, 999, (3, 6)))
    x = _arr(backend, np.random.default_rng(5).standard_normal((2, 6, 16)))
    np.testing.assert_array_equal(backend.to_numpy(enc.tables(ids).rotate(x)),  # type: ignore[attr-defined]
                                  backend.to_numpy(enc.rotate(x, ids)))


def test_rotary_tables_errors_name_what_is_wrong(backend: Any) -> None:
    enc = per.get_encoder("rotary", dim=8)
    tables = enc.tables(backend.from_numpy(np.arange(4)))  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"rotary: x.shape=\(4, 6\), but x.shape\[-1\] should be == 8"):
        tables.rotate(_arr(backend, np.zeros((4, 6))))
    with pytest.raises(ValueError, match=r"tables of positions \(4,\) do not broadcast"):
        tables.rotate(_arr(backend, np.zeros((5, 8))))
    with pytest.raises(TypeError, match="real floating"):
        tables.rotate(backend.from_numpy(np.zeros((4, 8), dtype=np.int64)))
    if backend.name != "numpy":
        with pytest.raises(TypeError, match=f"x must be an array of {backend.name}"):
            tables.rotate(np.zeros((4, 8)))
    c = _arr(backend, np.ones((4, 3)))
    with pytest.raises(ValueError, match="one shape and dtype"):
        rope.RotaryTables(c, _arr(backend, np.ones((4, 2))))
    with pytest.raises(ValueError, match="layout must be one of"):
        rope.RotaryTables(c, c, layout="neox")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="head_dim=4 is smaller than the 6 features"):
        rope.RotaryTables(c, c, head_dim=4)


def test_torch_fast_paths_equal_the_reference_through_the_dispatch() -> None:
    if "torch" not in SELECTED:
        pytest.skip("torch is not among the selected backends")
    import array_api_compat.torch as xp
    import torch

    from peregistry.rope import _delegation, _torch

    gen = torch.Generator().manual_seed(0)
    for shape, interleaved, rd in (((2, 4, 64, 64), False, 64), ((2, 4, 64, 64), True, 48),
                                   ((4, 8, 512, 128), False, 128), ((1, 1, 64), True, 64)):
        x = torch.randn(shape, generator=gen)
        ang = torch.rand(shape[-2], rd // 2, generator=gen, dtype=torch.float64) * 20 - 10
        c, s = ang.cos().float(), ang.sin().float()
        for dt in (torch.float32, torch.bfloat16):
            xd = x.to(dt)
            ref = rope.apply_rotation(xd, c, s, rotary_dim=rd, interleaved=interleaved,
                                      cdt=torch.float32, xp=xp)
            fast = _delegation.rotate(xd, c, s, rotary_dim=rd, interleaved=interleaved,
                                      cdt=torch.float32, xp=xp)
            assert torch.equal(fast, ref)
            assert torch.equal(_torch.rotate(xd, c, s, rotary_dim=rd, interleaved=interleaved),
                               ref)


_THREADS = r"""
import sys, threading, torch, peregistry as per
enc = per.get_encoder("rotary", dim=16)
x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(0))
errors, seen, barrier = [], [], threading.Barrier(8, timeout=120)
def backend(gm, example_inputs):
    seen.append(sum(str(n.target) == "peregistry.materialize.default" for n in gm.graph.nodes))
    return gm
def work(i):
    try:
        e = enc.replace(theta=float(i + 2))
        e.rotate(x)  # eager: needs no op
        assert "peregistry.rope._torch_op" not in sys.modules, "eager torch loaded the op"
        f = torch.compile(lambda v: e.rotate(v), fullgraph=True, backend=backend)
        barrier.wait()
        assert torch.equal(f(x), e.rotate(x))
    except Exception as err:
        barrier.abort()
        errors.append(repr(err))
ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
[t.start() for t in ts]
[t.join() for t in ts]
assert not errors, errors
assert seen == [2] * 8, seen
print("ok")
"""


def test_torch_op_defined_once_by_cold_compiled_calls_from_8_threads() -> None:
    """Eager torch rotations (8 threads) load no op; then 8 threads' first compiled calls, at
    once, define it once (the import lock; two definitions crash torch), each graph has the
    boundary on cos and sin, and each result is eager's."""
    if "torch" not in SELECTED:
        pytest.skip("torch is not among the selected backends")
    r = subprocess.run([sys.executable, "-c", _THREADS], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_torch_op_batches_under_vmap_without_the_fallback() -> None:
    """The op has its own vmap rule (torch warns on the slow generic fallback otherwise)."""
    if "torch" not in SELECTED:
        pytest.skip("torch is not among the selected backends")
    import warnings

    import torch

    import peregistry.rope._torch_op  # noqa: F401  (defines the op)

    x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = torch.vmap(torch.ops.peregistry.materialize, in_dims=1)(x)
    assert torch.equal(y, x.movedim(1, 0)) and y.data_ptr() != x.data_ptr()


def test_torch_vmap_over_tables_with_a_plain_x() -> None:
    """Eager ``torch.func.vmap`` over offsets, positions or tables with ``x`` not batched: the
    stacked single calls (the eager out= ops have no batching rule; a batched table alone must
    take the plain expression)."""
    if "torch" not in SELECTED:
        pytest.skip("torch is not among the selected backends")
    import torch
    from torch.func import vmap

    enc = per.get_encoder("rotary", dim=16)
    x = torch.randn(4, 6, 16, generator=torch.Generator().manual_seed(4))
    ids = torch.stack([torch.arange(6), torch.arange(6) + 7])
    cases = [(lambda o: enc.rotate(x, offset=o), torch.tensor([0, 5, 9])),
             (lambda p: enc.rotate(x, p), ids),
             (lambda p: enc.rotate(x, p), ids.to(torch.float32) + 0.5),
             (lambda p: enc.tables(p).rotate(x), ids)]
    for fn, batch in cases:
        assert torch.equal(vmap(fn)(batch), torch.stack([fn(b) for b in batch]))


# torch's first forward-mode call loads decompositions through torch.jit.script (torch 2.13)
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_torch_compiled_transforms_through_real_positions() -> None:
    """Inside ``torch.compile``, ``torch.func`` transforms with respect to real-valued positions
    give eager's derivatives: tables that may carry one do not pass the opaque boundary op (it
    has no forward-mode rule; through it a jvp came out all zeros and a grad raised)."""
    if "torch" not in SELECTED:
        pytest.skip("torch is not among the selected backends")
    import torch
    from torch.func import grad, jacfwd, jvp

    enc = per.get_encoder("rotary", dim=16)
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(2, 6, 16, generator=g), torch.randn(2, 6, 16, generator=g)
    p, t = torch.arange(6, dtype=torch.float32) + 3.0, torch.randn(6, generator=g)

    def loss(q: Any) -> Any:
        return (enc.rotate(x, q) * w).sum()

    def tangent(q: Any, d: Any) -> Any:
        return jvp(lambda r: enc.rotate(x, r), (q,), (d,))[1]

    def jac(q: Any) -> Any:
        return jacfwd(lambda r: enc.rotate(x, r).sum(dim=(0, 2)))(q)

    for fn, args in ((grad(loss), (p,)), (tangent, (p, t)), (jac, (p,))):
        want = fn(*args)
        got = torch.compile(fn, fullgraph=True, backend="aot_eager")(*args)
        assert want.abs().max() > 0
        torch.testing.assert_close(got, want)


def test_torch_boundary_only_for_tables_of_integer_positions() -> None:
    """Tables made from integer positions (nothing to differentiate) pass the opaque op; tables
    of real-valued positions and tables a user passes are stacked instead (a boundary that is
    differentiable in every mode), so no table is left for inductor to fuse."""
    if "torch" not in SELECTED:
        pytest.skip("torch is not among the selected backends")
    import torch

    enc = per.get_encoder("rotary", dim=16)
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(6))
    angles = torch.arange(6.0)[:, None] * torch.tensor(rope.inv_freq(16))[None, :].float()
    cos, sin = torch.cos(angles), torch.sin(angles)  # a user's own half-width tables

    def count(fn: Any, *args: Any) -> tuple[int, int]:
        seen: list[Any] = []

        def backend(gm: Any, example_inputs: Any) -> Any:
            seen.extend(n.target for n in gm.graph.nodes)
            return gm

        torch._dynamo.reset()
        torch.compile(fn, fullgraph=True, backend=backend)(*args)
        ops = sum(str(t) == "peregistry.materialize.default" for t in seen)
        return ops, sum(t is torch.stack for t in seen)

    assert count(lambda v, p: enc.rotate(v, p), x, torch.arange(6)) == (2, 0)
    assert count(lambda v, p: enc.tables(p).rotate(v), x, torch.arange(6))[0] > 0
    assert count(lambda v, p: enc.rotate(v, p), x, torch.arange(6.0)) == (0, 1)
    assert count(lambda v, c, s: rope.apply_rotary(v, c, s), x, cos, sin) == (0, 1)


_EAGER_AFTER_COMPILED = r"""
import torch, peregistry as per
from torch._dynamo.utils import counters
enc = per.get_encoder("rotary", dim=16)
x = torch.randn(2, 5, 16)
f = torch.compile(lambda v: enc.rotate(v), fullgraph=True, backend="eager")
f(x)
enc.rotate(x)
f(x)
print(counters["stats"]["unique_graphs"])
"""


def test_torch_first_eager_call_after_a_compiled_one_costs_no_recompilation() -> None:
    """A model compiled before any eager peregistry call is not compiled again after the first
    eager one: nothing the eager call binds (the backend-by-type cache, torch's probes) is
    read while Dynamo traces, so no guard depends on it."""
    if "torch" not in SELECTED:
        pytest.skip("torch is not among the selected backends")
    r = subprocess.run([sys.executable, "-c", _EAGER_AFTER_COMPILED], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["1"], r.stdout


# -- the house ---------------------------------------------------------------------------------
def test_backend_adapters_hold_no_rotary_hooks() -> None:
    from peregistry.backends._base import Backend

    for name in ("apply_rotary", "materialize", "cacheable", "cache_scope", "int_bounds",
                 "reads_cheaply"):
        assert not hasattr(Backend, name), name


def test_building_blocks_are_public() -> None:
    import peregistry.plugin as plugin
    from peregistry.encoders.mrope import MRope
    from peregistry.encoders.rotary import Rotary, ScaledRotary

    assert per.RotaryEncoder is rope.RotaryEncoder is plugin.RotaryEncoder
    assert ScaledRotary is rope.ScaledRotary is plugin.ScaledRotary
    assert plugin.MultiAxisRotary is rope.MultiAxisRotary and plugin.RotaryTables is rope.RotaryTables
    assert issubclass(Rotary, rope.ScaledRotary)
    assert issubclass(MRope, rope.MultiAxisRotary) and issubclass(MRope, rope.ScaledRotary)
    for name in set(rope.__all__) - {"LAYOUTS", "Layout"}:
        assert getattr(rope, name).__doc__, name


def test_plugin_docstring_example_passes_the_suite() -> None:
    """The multi-axis family of ``peregistry.plugin``'s docstring, two hooks on
    :class:`MultiAxisRotary`, is a complete rotary encoder (numpy: the suite's laws)."""
    from peregistry.plugin import Frequencies, MultiAxisRotary
    from peregistry.testing import check_encoder

    class Axial2D(MultiAxisRotary):
        name = "axial-2d-doc-example"
        __slots__ = ()
        dim = per.Option(int, allowed="a positive multiple of 4",
                         check=lambda d: d > 0 and d % 4 == 0)
        num_axes = 2  # type: ignore[assignment]

        def _axis_frequencies(self, seq_len: int | None) -> tuple[Frequencies, ...]:
            omega = rope.inv_freq(self.dim // 2)  # type: ignore[attr-defined]
            return (Frequencies.from_omega(omega),) * 2

    report = check_encoder(Axial2D(dim=8), backends="numpy")
    assert report.ok, report


def test_torch_jit_trace_records_the_rotation() -> None:
    """Under ``torch.jit.trace`` the rotation is recorded as torch ops (the eager kernel's call
    would not be, and failed on traced sizes), so the trace replays on new values."""
    if "torch" not in SELECTED:
        pytest.skip("torch is not among the selected backends")
    import warnings

    import torch

    gen = torch.Generator().manual_seed(6)
    x, x2 = torch.randn(3, 16, generator=gen), torch.randn(3, 16, generator=gen)
    for layout in ("half", "interleaved"):
        enc = per.get_encoder("rotary", dim=16, layout=layout)
        tables = enc.tables(torch.arange(3))
        for fn in (enc.rotate, tables.rotate):
            with warnings.catch_warnings():  # (torch.jit.trace is deprecated in torch 2.13,
                warnings.simplefilter("ignore")  # and warns of Python values it records)
                traced = torch.jit.trace(fn, (x,), check_trace=False)
            assert torch.equal(traced(x2), fn(x2))


_C, _S, _X = (np.ones((3, 4)), np.zeros((3, 4)), np.ones((3, 8)))
_NONE_CALLS = {
    "rotate_half": (lambda: rope.rotate_half(None), "x"),
    "rotate_every_two": (lambda: rope.rotate_every_two(None), "x"),
    "full_width": (lambda: rope.full_width(None), "half"),
    "half_width": (lambda: rope.half_width(None), "full"),
    "rotate_half_layout": (lambda: rope.rotate_half_layout(None, _C, _S, xp=np), "x"),
    "rotate_interleaved_layout": (lambda: rope.rotate_interleaved_layout(_X, _C, None, xp=np),
                                  "sin"),
    "apply_rotation": (lambda: rope.apply_rotation(None, _C, _S), "x"),
    "apply_rotation(cos=None)": (lambda: rope.apply_rotation(_X, None, _S), "cos"),
    "apply_rotation(rotary_dim=, cdt=, xp=)": (
        lambda: rope.apply_rotation(None, _C, _S, rotary_dim=8, interleaved=False,
                                    cdt=np.float64, xp=np), "x"),
    "apply_rotary": (lambda: rope.apply_rotary(None, _C, _S), "x"),
    "apply_rotary(cos=None)": (lambda: rope.apply_rotary(_X, None, _S), "cos"),
    "RotaryTables(sin=None)": (lambda: rope.RotaryTables(_C, None), "sin"),
    "RotaryTables.rotate": (lambda: rope.RotaryTables(_C, _S).rotate(None), "x"),
    "rotate_features": (lambda: rope.rotate_features(None, _C, _S, rotary_dim=8,
                                                     interleaved=False, last=True,
                                                     cdt=np.float64, xp=np), "x"),
}


@pytest.mark.parametrize("name", list(_NONE_CALLS))
def test_rotation_functions_refuse_none_naming_the_argument(name: str) -> None:
    """Issue 42: ``None`` for an array argument of peregistry.rope's functions (docs/rotary.md)
    is a TypeError naming the function, the argument and what it must be, not a raw
    AttributeError from inside."""
    call, arg = _NONE_CALLS[name]
    owner = name.split("(")[0].split(".")[0]
    with pytest.raises(TypeError, match=rf"^{owner}: {arg} must be an array.*got None"):
        call()
