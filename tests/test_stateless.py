"""Regression tests of issue 29, items 1-4: a result depends only on the values of the arguments at
call time. Each failed on the code before the fix, whose hidden memos were keyed by object identity
and torch's ``_version`` counter.

* item 1, **stale results**: positions written in place by ways the version counter does not count
  (the NumPy buffer a tensor shares, ``Tensor.numpy()``, a DLPack view, ``.data``, the untyped
  storage, a gloo ``broadcast``) must give the rotation of their new values, in ``rotate``,
  ``cos_sin``, a one-token decode, ``mrope`` and ``xpos``;
* item 2, **gradients lost**: real positions that require grad get their gradient after a call
  under ``no_grad`` on the same tensor, and through two backward passes (gradient accumulation);
* item 3, **memory outside the budget**: what stays allocated after NumPy calls (``tracemalloc``)
  is within ``set_table_cache_bytes``, nothing with a budget of 0, nothing after
  ``clear_caches()``;
* item 4, **threads on first use**: NumPy calls racing a thread that imports torch (and one that
  imports JAX) in a fresh process neither raise nor give wrong values.

Expected values never come from kept state: the same call on a fresh array of the new values
(after ``clear_caches()``, bit for bit) and RoPE's formula in float64 (pairs ``(i, i + d/2)``, or
``(2i, 2i+1)`` for xPos, rotated by ``p·θ^(-2i/d)``).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _ranks import last_json, run_ranks

import peregistry as per
from peregistry.rope import clear_caches, set_table_cache_bytes
from peregistry.testing._core import selected_backends

SELECTED = [b.name for b in selected_backends()]


def needs(name: str) -> Any:
    """Skip unless backend ``name`` is selected (PEREGISTRY_BACKENDS) and importable."""
    if name not in SELECTED:
        pytest.skip(f"backend {name} not selected by PEREGISTRY_BACKENDS")
    return pytest.importorskip(name, reason=f"{name} is not installed")


# -- RoPE's formula in float64, independent of the package ----------------------------------------


def omega(d: int, theta: float = 10000.0) -> np.ndarray:
    """``θ^(-2i/d)``, ``i = 0 .. d/2 - 1``."""
    return theta ** (-2.0 * np.arange(d // 2) / d)


def rope(x: np.ndarray, angles: np.ndarray, *, interleaved: bool = False,
         scale: np.ndarray | None = None) -> np.ndarray:
    """Pair ``i`` of ``x`` (``(i, i + d/2)``, or ``(2i, 2i+1)`` if ``interleaved``) rotated by
    ``angles[..., i]`` (which broadcast against ``x.shape[:-1] + (d/2,)``) and multiplied by
    ``scale[..., i]`` if given, in float64."""
    x = np.asarray(x, dtype=np.float64)
    h = x.shape[-1] // 2
    a, b = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., :h], x[..., h:])
    c, s = np.cos(angles), np.sin(angles)
    if scale is not None:
        c, s = c * scale, s * scale
    ra, rb = a * c - b * s, a * s + b * c
    out = np.empty(np.broadcast_shapes(x.shape, (*ra.shape[:-1], 2 * h)))
    if interleaved:
        out[..., 0::2], out[..., 1::2] = ra, rb
    else:
        out[..., :h], out[..., h:] = ra, rb
    return out


def rotary_formula(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """``rotary`` (dim ``x.shape[-1]``, θ = 10000, layout half) at positions ``pos``."""
    return rope(x, np.asarray(pos, dtype=np.float64)[..., None] * omega(x.shape[-1]))


#: M-RoPE's sections here, and the axis of each of its 8 pairs (Qwen2-VL's contiguous bands).
MROPE_SECTIONS = (2, 3, 3)
MROPE_AXES = (0, 0, 1, 1, 1, 2, 2, 2)


def mrope_formula(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """``mrope`` (dim 16, sections (2, 3, 3)) at positions ``pos`` ``(3, seq)``: pair ``i``
    turns by ``pos[a(i)]·θ^(-2i/d)``."""
    pos = np.asarray(pos, dtype=np.float64)
    w = omega(x.shape[-1])
    return rope(x, np.stack([pos[a] * w[i] for i, a in enumerate(MROPE_AXES)], axis=-1))


def xpos_formula(x: np.ndarray, pos: np.ndarray, *, role: str) -> np.ndarray:
    """``xpos`` (θ = 10000, interleaved pairs, B = 512, γ = 0.4, origin 0): RoPE times
    ``ζ_i^(±p/B)``, ``ζ_i = (2i/d + γ)/(1 + γ)``, ``+`` for queries and ``-`` for keys."""
    d = x.shape[-1]
    p = np.asarray(pos, dtype=np.float64)[..., None]
    zeta = (2.0 * np.arange(d // 2) / d + 0.4) / 1.4
    sign = 1.0 if role == "query" else -1.0
    return rope(x, p * omega(d), interleaved=True, scale=zeta ** (sign * p / 512.0))


def tolerance(dtype: Any) -> float:
    """Absolute tolerance against the float64 formula for inputs of magnitude ~3 at positions
    below ~200: a few ulps of the result's dtype."""
    return 1e-12 if "float64" in str(dtype) else 2e-6


# -- item 1: writes the version counter does not count ----------------------------------------------
#
# Each writes ``new`` (a NumPy array of the positions' shape) into the tensor ``p`` made by
# ``torch.from_numpy(buf)`` in place, as user code does, without bumping ``p._version``.


def _write_buffer(p: Any, buf: np.ndarray, new: np.ndarray) -> None:
    buf[...] = new  # the NumPy array the tensor was made from


def _write_tensor_numpy(p: Any, buf: np.ndarray, new: np.ndarray) -> None:
    p.numpy()[...] = new


def _write_dlpack(p: Any, buf: np.ndarray, new: np.ndarray) -> None:
    view = np.from_dlpack(p)
    if not view.flags.writeable:
        pytest.skip("this NumPy's DLPack views are read-only")
    view[...] = new


def _write_data(p: Any, buf: np.ndarray, new: np.ndarray) -> None:
    import torch

    p.data[...] = torch.from_numpy(new)


def _write_storage(p: Any, buf: np.ndarray, new: np.ndarray) -> None:
    import torch

    p.untyped_storage().copy_(torch.from_numpy(np.ascontiguousarray(new)).untyped_storage())


WRITES: dict[str, Callable[[Any, np.ndarray, np.ndarray], None]] = {
    "numpy-buffer": _write_buffer,
    "tensor.numpy": _write_tensor_numpy,
    "dlpack": _write_dlpack,
    "tensor.data": _write_data,
    "untyped_storage": _write_storage,
}


def _written(old: np.ndarray, new: np.ndarray, write: str) -> tuple[Any, Any, Any]:
    """``(p, first, second)``: ``p`` made from a copy of ``old``, then ``first(fn)`` calls ``fn(p)``
    at the old values, ``second(fn)`` writes ``new`` into ``p`` by ``write`` and calls ``fn(p)``
    (the same object) again."""
    torch = needs("torch")
    buf = old.copy()
    p = torch.from_numpy(buf)

    def second(fn: Callable[[Any], Any]) -> Any:
        WRITES[write](p, buf, new)
        assert p.tolist() == new.tolist()  # the write reached the tensor
        return fn(p)

    return p, (lambda fn: fn(p)), second


STALE = "differs from the same call on a new tensor of the new positions"


def _fresh(fn: Callable[[Any], Any], values: np.ndarray) -> Any:
    """``fn`` on a new tensor of ``values``, with nothing kept from earlier calls."""
    import torch

    clear_caches()
    return fn(torch.tensor(values.tolist(), dtype=torch.int64))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("write", list(WRITES))
def test_rotate_sees_positions_written_in_place(write: str, dtype: str) -> None:
    """``enc.rotate(x, p)`` after ``p`` was written in place rotates at the new positions (was:
    the rotation at the old ones, served by the call memo that trusted ``p._version``)."""
    torch = needs("torch")
    enc = per.get_encoder("rotary", dim=8)
    x = torch.randn(1, 4, 8, dtype=getattr(torch, dtype), generator=torch.Generator().manual_seed(0))
    old, new = np.arange(4), np.arange(100, 104)
    _, first, second = _written(old, new, write)
    before = first(lambda p: enc.rotate(x, p))
    after = second(lambda p: enc.rotate(x, p))
    assert not torch.equal(before, after), STALE
    assert torch.equal(after, _fresh(lambda p: enc.rotate(x, p), new)), STALE
    np.testing.assert_allclose(after.double().numpy(), rotary_formula(x.double().numpy(), new),
                               rtol=0, atol=tolerance(dtype))


@pytest.mark.parametrize("write", list(WRITES))
def test_cos_sin_sees_positions_written_in_place(write: str) -> None:
    """``enc.cos_sin(p)`` after ``p`` was written in place gives the tables of the new positions
    (was: the rows the last lookup kept for the same tensor)."""
    torch = needs("torch")
    enc = per.get_encoder("rotary", dim=8)
    old, new = np.arange(4), np.arange(100, 104)
    _, first, second = _written(old, new, write)
    first(lambda p: enc.cos_sin(p, dtype=torch.float64))
    cos, sin = second(lambda p: enc.cos_sin(p, dtype=torch.float64))
    fresh = _fresh(lambda p: enc.cos_sin(p, dtype=torch.float64), new)
    assert torch.equal(cos, fresh[0]) and torch.equal(sin, fresh[1]), STALE
    angles = new[:, None] * omega(8)
    np.testing.assert_allclose(cos.numpy(), np.cos(np.concatenate([angles, angles], -1)),
                               rtol=0, atol=1e-12)
    np.testing.assert_allclose(sin.numpy(), np.sin(np.concatenate([angles, angles], -1)),
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("write", list(WRITES))
def test_mrope_rotate_sees_positions_written_in_place(write: str) -> None:
    """``mrope`` with positions ``(3, seq)`` written in place rotates at the new positions."""
    torch = needs("torch")
    enc = per.get_encoder("mrope", dim=16, sections=MROPE_SECTIONS)
    x = torch.randn(2, 5, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    old = np.arange(15).reshape(3, 5)
    new = np.stack([np.arange(40, 45), np.arange(70, 75) // 2, np.arange(90, 95) % 3])
    _, first, second = _written(old, new, write)
    first(lambda p: enc.rotate(x, p))
    after = second(lambda p: enc.rotate(x, p))
    assert torch.equal(after, _fresh(lambda p: enc.rotate(x, p), new)), STALE
    np.testing.assert_allclose(after.numpy(), mrope_formula(x.numpy(), new), rtol=0, atol=1e-12)


@pytest.mark.parametrize("role", ["query", "key"])
@pytest.mark.parametrize("write", list(WRITES))
def test_xpos_rotate_sees_positions_written_in_place(write: str, role: str) -> None:
    """``xpos`` (queries, and keys through their own encoder) with positions written in place
    rotates and scales at the new positions."""
    torch = needs("torch")
    enc = per.get_encoder("xpos", dim=8)
    x = torch.randn(1, 4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    old, new = np.arange(4), np.arange(100, 104)
    _, first, second = _written(old, new, write)
    first(lambda p: enc.rotate(x, p, role=role))
    after = second(lambda p: enc.rotate(x, p, role=role))
    assert torch.equal(after, _fresh(lambda p: enc.rotate(x, p, role=role), new)), STALE
    np.testing.assert_allclose(after.numpy(), xpos_formula(x.numpy(), new, role=role), rtol=0,
                               atol=1e-12)


def _fill_data(p: Any, step: int) -> None:
    p.data.fill_(step)


def _fill_numpy(p: Any, step: int) -> None:
    p.numpy()[...] = step


@pytest.mark.parametrize("fill", [_fill_data, _fill_numpy], ids=["data.fill_", "numpy-view"])
@pytest.mark.parametrize(("name", "shape"), [("rotary", (1,)), ("rotary", (1, 1)), ("mrope", (3, 1))],
                         ids=["rotary-(1,)", "rotary-(1,1)", "mrope-(3,1)"])
def test_one_token_decode_sees_positions_written_in_place(name: str, shape: tuple[int, ...],
                                                          fill: Callable[[Any, int], None]) -> None:
    """A decode loop that writes the step into one positions tensor in place (a static buffer, as
    CUDA-graph decoders keep) rotates each token at its step (was: the previous step's row)."""
    torch = needs("torch")
    if name == "rotary":
        enc, dim = per.get_encoder("rotary", dim=8), 8
    else:
        enc, dim = per.get_encoder("mrope", dim=16, sections=MROPE_SECTIONS), 16
    x = torch.randn(1, 2, 1, dim, generator=torch.Generator().manual_seed(3))
    p = torch.zeros(shape, dtype=torch.int64)
    steps = range(1, 8)
    got = []
    for step in steps:
        fill(p, step)
        got.append(enc.rotate(x, p))
    clear_caches()
    wrong = [step for step, out in zip(steps, got, strict=True)
             if not torch.equal(out, enc.rotate(x, torch.full(shape, step, dtype=torch.int64)))]
    assert not wrong, f"steps {wrong} were rotated at another position"
    for step, out in zip(steps, got, strict=True):
        positions = np.full(shape, step)
        want = (rotary_formula(x.double().numpy(), positions) if name == "rotary"
                else mrope_formula(x.double().numpy(), positions))
        np.testing.assert_allclose(out.double().numpy(), want, rtol=0, atol=tolerance("float32"))


WORKER = Path(__file__).with_name("_torch_stale_worker.py")


def test_positions_received_by_gloo_broadcast_are_rotated_at_their_new_values() -> None:
    """A tensor-parallel decode loop on two gloo ranks (tests/_torch_stale_worker.py): rank 0
    broadcasts new positions each step into rank 1's positions tensor, the same object every
    step, which rank 1 rotates. Every step must be the rotation of the positions received (was:
    the previous step's, the collective's write leaving ``_version`` alone)."""
    needs("torch")
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("torch.distributed with gloo is not available")
    result = last_json(run_ranks(WORKER, 2)[1])
    assert result["wrong"] == [], result


# -- item 2: gradients with respect to real positions ---------------------------------------------


def _torch_formula(x: Any, p: Any) -> Any:
    """RoPE (θ = 10000, layout half) of float64 ``x`` at real ``p`` in torch operations, for
    the gradient autograd derives from the formula itself."""
    import torch

    d = x.shape[-1]
    ang = p[..., None] * torch.from_numpy(omega(d))
    a, b = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()], dim=-1)


#: ``name -> (options, shape of x, real positions)`` of the encoders whose gradients are checked:
#: plain RoPE (also against autograd of :func:`_torch_formula`), M-RoPE and xPos.
GRAD_CASES = {
    "rotary": ({"dim": 8}, (1, 4, 8), lambda torch: torch.arange(4.0, dtype=torch.float64)),
    "mrope": ({"dim": 16, "sections": MROPE_SECTIONS}, (1, 4, 16),
              lambda torch: torch.arange(12.0, dtype=torch.float64).reshape(3, 4) / 3),
    "xpos": ({"dim": 8}, (1, 4, 8), lambda torch: torch.arange(4.0, dtype=torch.float64) + 0.5),
}


def _grad_case(name: str, seed: int, *, x_grad: bool) -> tuple[Any, Any, Any, Any]:
    """``(encoder, x, weight, positions)``: float64, the positions a leaf requiring grad."""
    torch = needs("torch")
    options, shape, positions = GRAD_CASES[name]
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, dtype=torch.float64, generator=gen).requires_grad_(x_grad)
    weight = torch.randn(shape, dtype=torch.float64, generator=gen)
    return (per.get_encoder(name, **options), x, weight,
            positions(torch).requires_grad_())


def _check_grads(name: str, x: Any, p: Any, weight: Any, *, passes: int) -> None:
    """``p.grad`` (and ``x.grad`` if ``x`` requires grad) after ``passes`` backward passes of
    ``sum(weight · rotate(x, p))`` equal ``passes`` times those of one call on fresh leaves of
    the same values on a fresh encoder, bit for bit; for ``rotary``, also within float64 rounding
    of the gradients of :func:`_torch_formula`."""
    import torch

    assert p.grad is not None, "no gradient reached the positions"
    clear_caches()
    options = GRAD_CASES[name][0]
    fp = p.detach().clone().requires_grad_()
    fx = x.detach().clone().requires_grad_(x.requires_grad)
    (per.get_encoder(name, **options).rotate(fx, fp) * weight).sum().backward()
    assert torch.equal(p.grad, passes * fp.grad), "the positions' gradient differs from a fresh call's"
    if x.requires_grad:
        assert torch.equal(x.grad, passes * fx.grad), "x's gradient differs from a fresh call's"
    if name == "rotary":
        rp = p.detach().clone().requires_grad_()
        rx = x.detach().clone().requires_grad_(x.requires_grad)
        (_torch_formula(rx, rp) * weight).sum().backward()
        torch.testing.assert_close(p.grad, passes * rp.grad, rtol=0, atol=1e-12)
        if x.requires_grad:
            torch.testing.assert_close(x.grad, passes * rx.grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("x_grad", [False, True], ids=["x-constant", "x-requires-grad"])
@pytest.mark.parametrize("name", list(GRAD_CASES))
def test_rotate_after_a_no_grad_call_keeps_the_graph_to_the_positions(name: str,
                                                                      x_grad: bool) -> None:
    """A call under ``torch.no_grad()`` (an evaluation step) and then one with grad on the same
    positions tensor: the output has a ``grad_fn`` and the gradient with respect to the positions
    (and ``x``) is that of a fresh call (was: the no-grad tables served again, no graph to the
    positions)."""
    torch = needs("torch")
    enc, x, weight, p = _grad_case(name, 4, x_grad=x_grad)
    with torch.no_grad():
        enc.rotate(x, p)
    out = enc.rotate(x, p)
    assert out.grad_fn is not None, "no graph"
    (out * weight).sum().backward()
    _check_grads(name, x, p, weight, passes=1)


@pytest.mark.parametrize("x_grad", [False, True], ids=["x-constant", "x-requires-grad"])
@pytest.mark.parametrize("name", list(GRAD_CASES))
def test_rotate_accumulates_gradients_over_two_backward_passes(name: str, x_grad: bool) -> None:
    """Gradient accumulation: two forward and backward passes on the same ``x`` and positions
    before an optimizer step neither raise ("Trying to backward through the graph a second time",
    the second call reusing the first one's tables and their freed graph) nor lose a pass: the
    gradients are twice a fresh call's."""
    enc, x, weight, p = _grad_case(name, 5, x_grad=x_grad)
    for _ in range(2):
        (enc.rotate(x, p) * weight).sum().backward()
    _check_grads(name, x, p, weight, passes=2)


# -- item 3: what stays allocated after NumPy calls ---------------------------------------------------

MIB = 1 << 20
#: What may stay allocated beyond the budget (small constants, interpreter caches).
SLACK = 1 * MIB


def _default_budget() -> int:
    """The budget a process starts with: ``PEREGISTRY_TABLE_CACHE_BYTES``, else 256 MiB
    (peregistry/rope/_tables.py)."""
    return int(os.environ.get("PEREGISTRY_TABLE_CACHE_BYTES", "").strip() or 256 * MIB)


@pytest.fixture
def tables_budget() -> Iterator[Callable[[int], None]]:
    """Nothing kept before the test; the default budget restored and everything dropped after.
    The tests measure what NumPy calls keep: they run where NumPy is the backend under test."""
    needs("numpy")
    clear_caches()
    gc.collect()
    yield set_table_cache_bytes
    set_table_cache_bytes(_default_budget())
    clear_caches()


def retained(work: Callable[[], None], *, then: Callable[[], None] | None = None) -> int:
    """Bytes that ``work()`` (and ``then()``) allocated and that are still allocated once they
    returned and the garbage collector ran: what the package kept. NumPy's arrays are traced."""
    gc.collect()
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        work()
        if then is not None:
            then()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        if started:
            tracemalloc.stop()


def _warm_up(build: Callable[[], Any], calls: Callable[[Any], None]) -> None:
    """``calls`` on a throwaway encoder, then everything dropped: imports and first-use work are
    done before measuring."""
    calls(build())
    clear_caches()
    gc.collect()


DYNAMIC = {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4096}


def _rotary_tables_work(enc: Any) -> None:
    """Calls that keep position tables: a prefill of 8192 tokens, decode steps by offset and by
    position ids, and the same prefill repeated."""
    x = np.ones((1, 8192, 64), dtype=np.float32)
    one = np.ones((1, 1, 64), dtype=np.float32)
    for _ in range(2):
        enc.rotate(x)
    for step in range(8):
        enc.rotate(one, offset=8192 + step)
        enc.rotate(one, np.array([100 + step]))


def _offset_tables_work(enc: Any) -> None:
    """Three prefills of 8192 tokens with positions=None at new offsets (dynamic scaling: the
    tables depend on the length), and a few decode steps by int offset."""
    x = np.ones((1, 8192, 64), dtype=np.float32)
    one = np.ones((1, 1, 64), dtype=np.float32)
    for prefill in range(3):
        enc.rotate(x, offset=prefill * 8192)
    for step in range(4):
        enc.rotate(one, offset=3 * 8192 + step)


ROTARY_SCENARIOS = {
    # ten encoders (distinct theta) each with its own position table of 8192 rows (2 MiB)
    "position-tables": (lambda i: per.get_encoder("rotary", dim=64, theta=10000.0 + i),
                        _rotary_tables_work, 10),
    # ten encoders with dynamic scaling, three prefills each (6 MiB of offset tables each)
    "dynamic-prefills": (lambda i: per.get_encoder("rotary", dim=64, theta=10000.0 + i,
                                                   scaling=DYNAMIC), _offset_tables_work, 10),
}


def _long_prefills(enc: Any) -> None:
    """Three prefills of 70,000 tokens (dynamic scaling beyond its 4096), as issue 29 measured."""
    x = np.ones((1, 70_000, 64), dtype=np.float32)
    for prefill in range(3):
        enc.rotate(x, offset=prefill)


def _rotary_case(scenario: str) -> tuple[list[Any], Callable[[Any], None]]:
    """``(encoders, work)`` of a scenario, warmed up (on another encoder) and built before
    measuring."""
    if scenario == "dynamic-70k":
        build, work, count = (lambda i: per.get_encoder("rotary", dim=64, theta=500.0 + i,
                                                        scaling=DYNAMIC)), _long_prefills, 1
    else:
        build, work, count = ROTARY_SCENARIOS[scenario]
    _warm_up(lambda: build(99), work)
    return [build(i) for i in range(count)], work


RotaryScenario = pytest.mark.parametrize("scenario", [*ROTARY_SCENARIOS, "dynamic-70k"])


@RotaryScenario
@pytest.mark.parametrize("budget", [4 * MIB, 0], ids=["4MiB", "0"])
def test_rotary_encoders_keep_no_more_than_the_budget(
        tables_budget: Callable[[int], None], scenario: str, budget: int) -> None:
    """Encoders kept alive, their outputs dropped: what stays allocated is within the budget set
    by ``set_table_cache_bytes`` (0: nothing). Was: position tables evicted from the shared cache
    still held by each encoder's memo of its last rows, and each encoder's offset tables (16
    entries, no byte bound, kept with a budget of 0): 20 MiB and more under 4 MiB."""
    tables_budget(budget)
    encoders, work = _rotary_case(scenario)

    def calls() -> None:
        for enc in encoders:
            work(enc)

    kept = retained(calls)
    assert kept <= budget + SLACK, (f"{kept / MIB:.1f} MiB kept with a budget of "
                                    f"{budget / MIB:.0f} MiB")


@RotaryScenario
def test_clear_caches_frees_every_rotary_table(tables_budget: Callable[[int], None],
                                               scenario: str) -> None:
    """Under the default budget, ``clear_caches()`` after the calls frees every table (was:
    nothing held outside the shared cache)."""
    encoders, work = _rotary_case(scenario)

    def calls() -> None:
        for enc in encoders:
            work(enc)

    kept = retained(calls, then=clear_caches)
    assert kept <= SLACK, f"{kept / MIB:.1f} MiB kept after clear_caches()"


#: Each relative encoder: ``(build i-th variant, params?)``.
RELATIVE = {
    "t5": (lambda i: per.get_encoder("t5", num_heads=4 + i), True),
    "alibi": (lambda i: per.get_encoder("alibi", num_heads=4 + i), False),
    "shaw": (lambda i: per.get_encoder("shaw", dim=16, max_distance=100 + i), True),
    "transformer-xl": (lambda i: per.get_encoder("transformer-xl", dim=16 + 2 * i), False),
}
#: How many distinct encoders of a kind the relative tests keep alive.
RELATIVE_ENCODERS = 24


def _relative_work(enc: Any, params: Any) -> None:
    """Many calls with varying positions: short query/key pairs of 15 different distance patterns,
    longer ones of growing length, and a decoder's steps (one query against its keys), in
    float32 and float64."""

    def call(q: np.ndarray, k: np.ndarray, dtype: Any) -> None:
        if enc.kind == "bias":
            enc.bias(q, k, params=params, dtype=dtype)
        else:
            enc.embed(q, k, params=params, dtype=dtype)

    for dtype in (np.float32, np.float64):
        for i in range(15):
            call(np.arange(64), np.arange(64) * (i + 1), dtype)
        for n in (128, 256, 512):
            call(np.arange(n - 8, n), np.arange(n), dtype)
        for step in (8, 47):
            call(np.array([step]), np.arange(step + 1), dtype)


def _relative_case(name: str) -> list[tuple[Any, Any]]:
    build, learned = RELATIVE[name]

    def with_params(enc: Any) -> tuple[Any, Any]:
        return enc, (enc.init(np, dtype=np.float32) if learned else None)

    _warm_up(lambda: with_params(build(99)), lambda pair: _relative_work(*pair))
    return [with_params(build(i)) for i in range(RELATIVE_ENCODERS)]


@pytest.mark.parametrize("budget", [1 * MIB, 0], ids=["1MiB", "0"])
@pytest.mark.parametrize("name", ["t5", "alibi", "shaw"])
def test_relative_encoders_keep_no_more_than_the_budget(
        tables_budget: Callable[[int], None], name: str, budget: int) -> None:
    """Relative encoders kept alive after many calls with varying positions: what stays
    allocated is within the budget (0: nothing). Was: kept pairs (16 arrays per encoder) and each
    encoder's decode-step vectors, per dtype, outside any budget."""
    tables_budget(budget)
    encoders = _relative_case(name)

    def calls() -> None:
        for enc, params in encoders:
            _relative_work(enc, params)

    kept = retained(calls)
    assert kept <= budget + SLACK, (f"{kept / MIB:.1f} MiB kept by {len(encoders)} {name} "
                                    f"encoders with a budget of {budget / MIB:.0f} MiB")


@pytest.mark.parametrize("name", list(RELATIVE))
def test_clear_caches_frees_what_relative_encoders_kept(tables_budget: Callable[[int], None],
                                                        name: str) -> None:
    """Under the default budget, ``clear_caches()`` after many calls frees everything the relative
    encoders kept (was: kept pairs and decode-step vectors outlived it)."""
    encoders = _relative_case(name)

    def calls() -> None:
        for enc, params in encoders:
            _relative_work(enc, params)

    kept = retained(calls, then=clear_caches)
    assert kept <= SLACK, f"{kept / MIB:.1f} MiB kept by {name} encoders after clear_caches()"


# -- item 4: first use under threads, frameworks imported concurrently ----------------------------

#: In a fresh process: 16 threads released together by an Event. Thread 14 imports torch and
#: rotates a tensor, thread 15 imports JAX (if installed) and rotates an array; the others make
#: their first NumPy calls (rotary, sinusoidal, t5, alibi). Then, in the main thread, each result
#: is compared with the same call made again (bit for bit) and the rotations with RoPE's formula.
#: Prints one JSON line: the errors and the wrong results.
_FIRST_USE_UNDER_THREADS = """
import importlib.util, json, threading
import numpy as np
import peregistry as per

HAS_JAX = importlib.util.find_spec("jax") is not None
X = np.linspace(-1, 1, 16).reshape(2, 8)

def formula(x, pos):
    w = 10000.0 ** (-2.0 * np.arange(4) / 8)
    ang = np.asarray(pos, dtype=np.float64)[:, None] * w
    a, b = x[..., :4], x[..., 4:]
    return np.concatenate([a * np.cos(ang) - b * np.sin(ang), a * np.sin(ang) + b * np.cos(ang)], -1)

def numpy_call(i):
    kind = i % 4
    if kind == 0:
        return per.get_encoder("rotary", dim=8).rotate(X, np.arange(2) + i)
    if kind == 1:
        return per.get_encoder("sinusoidal", dim=8).encode(np.arange(5) + i)
    if kind == 2:
        enc = per.get_encoder("t5", num_heads=2)
        return enc.bias(np.arange(4), np.arange(4) + i, params=enc.init(np, dtype=np.float32))
    return per.get_encoder("alibi", num_heads=2).bias(np.arange(4), np.arange(4) + i)

def torch_call(i):
    import torch
    out = per.get_encoder("rotary", dim=8).rotate(torch.from_numpy(X), torch.arange(2) + i)
    return out.numpy()

def jax_call(i):
    import jax.numpy as jnp
    out = per.get_encoder("rotary", dim=8).rotate(jnp.asarray(X, dtype=jnp.float32),
                                                  jnp.arange(2) + i)
    return np.asarray(out)

CALLS = {14: torch_call, 15: jax_call if HAS_JAX else numpy_call}
go = threading.Event()
results, errors = {}, []

def work(i):
    try:
        go.wait()
        results[i] = CALLS.get(i, numpy_call)(i)
    except BaseException as exc:
        errors.append(f"thread {i}: {type(exc).__name__}: {exc}")

threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
for t in threads:
    t.start()
go.set()
for t in threads:
    t.join()
wrong = []
for i, got in sorted(results.items()):
    again = CALLS.get(i, numpy_call)(i)
    if got.dtype != again.dtype or got.tobytes() != again.tobytes():
        wrong.append(f"thread {i}: differs from the same call made again")
    call = CALLS.get(i, numpy_call)
    rotary = call is not numpy_call or i % 4 == 0  # (thread 15 is NumPy's without JAX)
    tol = 1e-6 if got.dtype == np.float32 else 1e-12
    if rotary and not np.allclose(got, formula(X, np.arange(2) + i), rtol=0, atol=tol):
        wrong.append(f"thread {i}: not RoPE's formula")
print(json.dumps({"errors": errors, "wrong": wrong, "done": len(results)}))
"""


def test_numpy_first_use_while_threads_import_torch_and_jax() -> None:
    """Up to three fresh processes (the race showed in most), stopping at the first that fails: no
    thread raises (was: ``AttributeError: partially initialized module 'torch' has no attribute
    'compiler'`` from the lazy stand-ins of peregistry/_lazy.py, which asked ``torch.compiler``
    of a module another thread was still importing; once past that, building an encoder called
    into the half-imported torch and could hang), no process hangs, and every result is right."""
    needs("torch")
    for run in range(3):
        try:
            proc = subprocess.run([sys.executable, "-c", _FIRST_USE_UNDER_THREADS],
                                  capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"run {run}: the process hung (no answer in {exc.timeout} s)")
        assert proc.returncode == 0, proc.stderr[-4000:]
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert not result["errors"] and not result["wrong"] and result["done"] == 16, (
            f"run {run}: {result}")


# -- what validation remembers of dtypes ---------------------------------------------------------


@pytest.mark.parametrize("jax_first", [True, False])
def test_what_a_dtype_is_does_not_depend_on_which_framework_asked_first(
        jax_first: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """JAX and NumPy share the bfloat16 dtype object but not its meaning: JAX's positions of
    that dtype are real floating, NumPy's are no dtype of NumPy's namespace and are refused,
    whichever framework's call came first (was: the first answer served both)."""
    jnp = needs("jax").numpy
    from peregistry.kinds import base

    monkeypatch.setattr(base, "_DTYPE_KINDS", {})
    enc = per.get_encoder("rotary", dim=8)
    x = np.ones((1, 2, 8), dtype=np.float32)
    pos = np.arange(2).astype(jnp.bfloat16)  # (ml_dtypes' bfloat16: JAX's own)

    def jax_call() -> None:
        out = enc.rotate(jnp.asarray(x), jnp.asarray(pos))
        assert out.dtype == jnp.float32

    def numpy_call() -> None:
        with pytest.raises(TypeError, match="positions"):
            enc.rotate(x, pos)

    for call in (jax_call, numpy_call) if jax_first else (numpy_call, jax_call):
        call()
