"""Compiled rotations against eager ones (issue 35): under ``jax.jit`` and ``torch.compile``
with inductor, the generic rotation (the pair-axis form) may have its products and sums
contracted into fused multiply-adds, which can move the last bit; the contract is at most one
ulp of the rotated pair's length per element (``|Δ| <= ulp(|(a, b)|)``: one rounding of the
terms, not of a result that cancels), for both layouts, partial rotary on the first or last
features, and M-RoPE. The jax env runs it at XLA's default optimization level in its x64 pass
(at -O0 nothing is contracted and the outputs are equal)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS

import peregistry as per

CASES = [
    ("rotary", {"dim": 64}),
    ("rotary", {"dim": 64, "layout": "interleaved"}),
    ("rotary", {"dim": 64, "rotary_dim": 32}),
    ("rotary", {"dim": 64, "rotary_dim": 32, "rotary_features": "last", "layout": "interleaved"}),
    ("mrope", {"dim": 64, "sections": (8, 12, 12)}),
]


def _ulps(got: Any, want: Any, x: Any, *, interleaved: bool, dtype: Any = np.float32) -> float:
    """The largest ``|got - want|`` in units of the last place of the pair's length
    ``|(a, b)|`` (in ``dtype``): a fused multiply-add rounds ``a·c - b·s`` once instead of
    twice, an error of the terms' size, which can be many ulps of a result that cancels."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    if interleaved:
        norm = np.repeat(np.hypot(x[..., 0::2], x[..., 1::2]), 2, axis=-1)
    else:
        h = x.shape[-1] // 2
        norm = np.concatenate([np.hypot(x[..., :h], x[..., h:])] * 2, axis=-1)
    return float(np.max(np.abs(got - want) / np.spacing(norm.astype(dtype))))


def _rotated(a: Any, options: dict[str, Any]) -> Any:
    r = options["rotary_dim"]
    return a[..., -r:] if options.get("rotary_features") == "last" else a[..., :r]


def _passed(a: Any, options: dict[str, Any]) -> Any:
    r = options["rotary_dim"]
    return a[..., :-r] if options.get("rotary_features") == "last" else a[..., r:]


def _inputs(name: str) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 300, 64)).astype(np.float32)
    pos = np.arange(300) + 1000
    if name == "mrope":  # (3, seq): text then an image-like block of positions
        pos = np.stack([pos, pos + rng.integers(0, 40, 300), pos + rng.integers(0, 40, 300)])
    return x, pos


@pytest.mark.skipif("jax" not in BACKENDS, reason="jax.jit (the jax env)")
@pytest.mark.parametrize(("name", "options"), CASES)
def test_jax_jit_within_one_ulp_of_eager(name: str, options: dict[str, Any]) -> None:
    import jax
    import jax.numpy as jnp

    enc: Any = per.get_encoder(name, **options)
    x, pos = (jnp.asarray(a) for a in _inputs(name))
    positions = pos[:, None, None, :] if name == "mrope" else pos
    eager = enc.rotate(x, positions)
    jitted = jax.jit(lambda v, p: enc.rotate(v, p))(x, positions)
    _check(np.asarray(jitted), np.asarray(eager), np.asarray(x), options)


def _check(compiled: Any, eager: Any, x: Any, options: dict[str, Any]) -> None:
    """Within one ulp of the pair's length where features rotate; ``x`` exactly elsewhere."""
    full = options.get("rotary_dim") is None
    xs, cs, es = (a if full else _rotated(a, options) for a in (x, compiled, eager))
    assert _ulps(cs, es, xs, interleaved=options.get("layout") == "interleaved") <= 1.0
    if not full:  # the features that pass through are x's, compiled or not
        np.testing.assert_array_equal(_passed(compiled, options), _passed(x, options))


@pytest.mark.skipif("torch" not in BACKENDS, reason="torch.compile (the torch env)")
@pytest.mark.parametrize(("name", "options"), CASES)
def test_torch_inductor_within_one_ulp_of_eager(name: str, options: dict[str, Any]) -> None:
    """Eager torch is the C kernel (equal to the generic rotation bit for bit,
    tests/test_native_kernel.py); under compile torch takes its own functional rotation, which
    inductor compiles (measured equal to eager; one ulp is the promise)."""
    import torch

    enc: Any = per.get_encoder(name, **options)
    x, pos = (torch.from_numpy(a) for a in _inputs(name))
    positions = pos[:, None, None, :] if name == "mrope" else pos
    eager = enc.rotate(x, positions)
    torch._dynamo.reset()
    compiled = torch.compile(lambda v, p: enc.rotate(v, p), backend="inductor", fullgraph=True,
                             dynamic=False)(x, positions)
    _check(compiled.numpy(), eager.numpy(), x.numpy(), options)


@pytest.mark.skipif("torch" not in BACKENDS, reason="torch.compile (the torch env)")
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_torch_inductor_float64_within_two_ulps_of_eager(layout: str) -> None:
    """float64 under inductor: the tables' cos and sin are inductor's own float64 functions,
    which differ from ATen's (eager) by an ulp in some entries; with the rotation's rounding that
    is at most two ulps of the pair's length (measured: 2.0 on a few elements in 10**4)."""
    import torch

    enc: Any = per.get_encoder("rotary", dim=64, layout=layout)
    x = torch.from_numpy(_inputs("rotary")[0].astype(np.float64))
    eager = enc.rotate(x)
    torch._dynamo.reset()
    compiled = torch.compile(lambda v: enc.rotate(v), backend="inductor", fullgraph=True,
                             dynamic=False)(x)
    assert _ulps(compiled.numpy(), eager.numpy(), x.numpy(), interleaved=layout == "interleaved",
                 dtype=np.float64) <= 2.0


@pytest.mark.skipif("torch" not in BACKENDS, reason="torch.compile (the torch env)")
def test_torch_compile_dynamic_shapes_of_the_bound_method() -> None:
    """Issue 42, item 1: ``torch.compile(enc.rotate, dynamic=True, fullgraph=True)`` (how
    serving engines compile) traces the backend lookup: no sort by attributes Dynamo made
    symbolic. What compiles for one sequence length serves another, with the eager values."""
    import torch
    from torch._dynamo.testing import CompileCounterWithBackend

    enc: Any = per.get_encoder("rotary", dim=8)
    torch._dynamo.reset()
    for call in (enc.rotate, lambda v: enc.rotate(v, torch.arange(v.shape[-2]))):
        counter = CompileCounterWithBackend("aot_eager")
        fn = torch.compile(call, dynamic=True, fullgraph=True, backend=counter)
        frames = []
        for seq in (5, 7):
            x = torch.from_numpy(np.random.default_rng(seq).standard_normal((2, seq, 8)))
            torch._dynamo.mark_dynamic(x, 1)
            eps = torch.finfo(x.dtype).eps
            torch.testing.assert_close(fn(x), enc.rotate(x), rtol=0, atol=8 * eps)
            frames.append(counter.frame_count)
        assert frames[0] > 0 and frames[1] == frames[0]  # nothing compiled again for seq=7
