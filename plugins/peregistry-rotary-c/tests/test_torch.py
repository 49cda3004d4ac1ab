"""The kernel on CPU torch tensors, eager: bit for bit the generic rotation (and torch's own
expression), and declined wherever a derivative may be asked for or a tensor has no memory of
its own, so that a function that falls back to the plain expression keeps every gradient."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from peregistry_rotary_c import CRotationKernel

from conftest import LAYOUTS, assert_same_bits, generic, rotate_at_once

torch: Any = pytest.importorskip("torch")

from peregistry_rotary_c import _torch  # noqa: E402  (imports torch)


def tables(shape: tuple[int, ...], dtype: Any = None, seed: int = 0) -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(seed)
    ang = torch.rand(shape, generator=g, dtype=torch.float64) * 8 - 4
    dtype = dtype or torch.float32
    return ang.cos().to(dtype), ang.sin().to(dtype)


def randn(*shape: int, dtype: Any = None, seed: int = 1) -> Any:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype or torch.float32)


def check(k: CRotationKernel, x: Any, cos: Any, sin: Any, layout: str, *, answers: bool | None = True) -> Any:
    got = k.rotate(x, cos, sin, layout=layout)
    if answers is False:
        assert got is None
    if answers:
        assert got is not None, "declined"
    if got is not None:
        assert_same_bits(got, generic(x, cos, sin, layout))
        assert_same_bits(got, _torch.rotate_functional(x, cos, sin, layout == "interleaved"))
    return got


def rotate_or_fall_back(k: CRotationKernel, x: Any, cos: Any, sin: Any, layout: str = "half") -> Any:
    """What the core does: the kernel's answer, else the plain (differentiable) expression."""
    out = k.rotate(x, cos, sin, layout=layout)
    return _torch.rotate_functional(x, cos, sin, layout == "interleaved") if out is None else out


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("xdt", "wdt"), [("float32", "float32"), ("float64", "float64"),
                                          ("bfloat16", "float32"), ("bfloat16", "float64"),
                                          ("float32", "float64"), ("float64", "float32")])
@pytest.mark.parametrize(("xshape", "tshape"), [
    ((1, 8, 64, 128), (64, 64)), ((2, 3, 17, 64), (2, 1, 17, 32)), ((1, 32, 1, 128), (1, 64)),
    ((5, 2), (5, 1)), ((2, 1, 3, 4, 10), (3, 1, 5)),
])
def test_eager_kernel_is_the_generic_rotation(kernel: CRotationKernel, layout: str, xdt: str, wdt: str,
                                              xshape: tuple[int, ...], tshape: tuple[int, ...]) -> None:
    x = randn(*xshape, dtype=getattr(torch, xdt))
    cos, sin = tables(tshape, getattr(torch, wdt))
    got = check(kernel, x, cos, sin, layout)
    assert got.is_contiguous() and got.device == x.device


def test_prefill_on_threads(kernel: CRotationKernel) -> None:
    """Large enough for the pool, on 1 and 2 torch threads."""
    x = randn(1, 8, 1024, 128)
    cos, sin = tables((1024, 64))
    old = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            for layout in LAYOUTS:
                check(kernel, x, cos, sin, layout)
                check(kernel, x.bfloat16(), cos, sin, layout)
    finally:
        torch.set_num_threads(old)


def test_the_extension_is_given_torch_threads(kernel: CRotationKernel, threads_seen: list[int]) -> None:
    seen = threads_seen
    x = randn(1, 8, 512, 64)
    cos, sin = tables((512, 32))
    old = torch.get_num_threads()
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            kernel.rotate(x, cos, sin, layout="half")
        kernel.rotate(x[:, :1, :4], cos[:4], sin[:4], layout="half")  # small: one
    finally:
        torch.set_num_threads(old)
    assert seen == [1, 2, 3, 1]


def test_strided_tensors_are_rotated_or_declined(kernel: CRotationKernel) -> None:
    base = randn(2, 16, 4, 96)
    cos, sin = tables((16, 32))
    heads_first = base.transpose(1, 2)
    for x in (heads_first[..., :64], heads_first[..., 32:], heads_first[:, ::2, :, :64],
              heads_first[:1, :1, :, :64].expand(3, 5, 16, 64), heads_first[..., :64].flip(0)):
        for layout in LAYOUTS:
            check(kernel, x, cos, sin, layout)
    # rows that are not contiguous: declined
    check(kernel, base[0, :, 0, ::2][:, :32], cos[:, :16], sin[:, :16], "half", answers=False)
    check(kernel, base[0, :, 0, :64].t().contiguous().t(), cos, sin, "half", answers=False)
    wide = tables((16, 80))[0]
    check(kernel, base[0, :, 0, :64], wide[:, :32], wide[:, 40:72], "interleaved")  # strided tables
    # an unaligned tensor (from a byte buffer at offset 1): declined or right, never a crash
    raw = torch.zeros(16 * 64 * 4 + 1, dtype=torch.uint8)
    unaligned = raw[1:].view(torch.float32).reshape(16, 64) if raw[1:].data_ptr() % 4 == 0 else None
    if unaligned is not None:
        check(kernel, unaligned, cos, sin, "half", answers=None)


def test_declined_tensors(kernel: CRotationKernel) -> None:
    x = randn(2, 4, 8, 16)
    cos, sin = tables((8, 8))
    cases = [
        (x.half(), cos, sin),
        (x, cos.half(), sin.half()),
        (x, cos.bfloat16(), sin.bfloat16()),
        (x, cos, sin.double()),
        (x._neg_view(), cos, sin),
        (x.to("meta"), cos.to("meta"), sin.to("meta")),
        (torch.nn.Parameter(x, requires_grad=False), cos, sin),
        (x, cos[None, None, None], sin[None, None, None]),
        (x[:0], cos, sin),
        (x.to(torch.complex64), cos, sin),
        (x.numpy(), cos, sin),
    ]
    for args in cases:
        assert kernel.rotate(*args, layout="half") is None


def test_special_values_and_bfloat16_nan(kernel: CRotationKernel) -> None:
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-45, -2e-39,
                             3e38, -1.0, 1e-310], dtype=torch.float64)
    g = torch.Generator().manual_seed(3)
    for dt in (torch.float32, torch.float64, torch.bfloat16):
        x = specials[torch.randint(0, 10, (3, 7, 16), generator=g)].to(dt)
        cos = specials[torch.randint(0, 10, (7, 8), generator=g)].float()
        sin = specials[torch.randint(0, 10, (7, 8), generator=g)].float()
        for layout in LAYOUTS:
            check(kernel, x, cos, sin, layout)
    xb = randn(2, 4, 64, 64).bfloat16()
    xb[0, 0, 0, 0], xb[0, 0, 1, 3] = float("nan"), -float("nan")
    cos, sin = tables((64, 32))
    got = kernel.rotate(xb, cos, sin, layout="half")
    assert got is not None and torch.isnan(got).any()
    # NaN written as torch's own float32 -> bfloat16 copy writes it: equal bits with NaN too
    assert torch.equal(got.view(torch.int16), _torch.rotate_functional(xb, cos, sin, False).view(torch.int16))


def test_read_only_inputs_are_never_written(kernel: CRotationKernel) -> None:
    x = randn(1, 8, 512, 64)
    cos, sin = tables((512, 32))
    copies = [t.clone() for t in (x, cos, sin)]
    for layout in LAYOUTS:
        out = check(kernel, x, cos, sin, layout)
        assert out.data_ptr() != x.data_ptr()
    for t, c in zip((x, cos, sin), copies, strict=True):
        assert torch.equal(t, c)


def test_threads_at_once(kernel: CRotationKernel) -> None:
    jobs = []
    for k in range(8):
        x = randn(1, 4, 300 + 50 * k, 128, seed=k, dtype=torch.bfloat16 if k % 3 == 0 else None)
        c, s = tables((300 + 50 * k, 64), seed=k)
        jobs.append((x, c, s, LAYOUTS[k % 2], generic(x, c, s, LAYOUTS[k % 2])))
    rotate_at_once(kernel, jobs)


# -- derivatives: declined, and the fallback keeps them ----------------------------------------------
def test_autograd_is_declined_and_gradients_are_intact(kernel: CRotationKernel) -> None:
    x = randn(2, 4, 32)
    cos, sin = tables((4, 16))
    w = torch.arange(32.0)
    for needs in ("x", "cos", "sin"):
        args = {"x": x.clone(), "cos": cos.clone(), "sin": sin.clone()}
        args[needs].requires_grad_()
        assert kernel.rotate(args["x"], args["cos"], args["sin"], layout="interleaved") is None
        (rotate_or_fall_back(kernel, args["x"], args["cos"], args["sin"], "interleaved") * w).sum().backward()
        ref = {k: v.detach().clone().requires_grad_(k == needs) for k, v in args.items()}
        (_torch.rotate_functional(ref["x"], ref["cos"], ref["sin"], True) * w).sum().backward()
        assert torch.equal(args[needs].grad, ref[needs].grad)
    with torch.no_grad():  # no gradient can be asked for: the kernel answers
        v = x.clone().requires_grad_()
        out = kernel.rotate(v, cos, sin, layout="half")
        assert out is not None and not out.requires_grad
        assert_same_bits(out, generic(x, cos, sin, "half"))
    with torch.inference_mode():
        assert kernel.rotate(x, cos, sin, layout="half") is not None


def test_forward_mode_ad_is_declined_and_the_tangent_kept(kernel: CRotationKernel) -> None:
    import torch.autograd.forward_ad as fwad

    x, t = randn(2, 8, 16, seed=1), randn(2, 8, 16, seed=2)
    cos, sin = tables((8, 8))
    with fwad.dual_level():
        dual = fwad.make_dual(x, t)
        assert kernel.rotate(dual, cos, sin, layout="half") is None
        assert kernel.rotate(x, cos, sin, layout="half") is None  # (any open level: declined)
        tangent = fwad.unpack_dual(rotate_or_fall_back(kernel, dual, cos, sin)).tangent
    assert tangent is not None
    assert torch.equal(tangent, _torch.rotate_functional(t, cos, sin, False))


def _func_cases(k: CRotationKernel, x: Any, t: Any, cos: Any, sin: Any) -> dict[str, tuple[Callable[[], Any], Any]]:
    from torch.func import functionalize, grad, jacrev, jvp, vjp, vmap

    def f(v: Any) -> Any:
        return rotate_or_fall_back(k, v, cos, sin, "interleaved")

    def plain(v: Any) -> Any:
        return _torch.rotate_functional(v, cos, sin, True)

    w = torch.arange(x.shape[-1], dtype=x.dtype)

    def mutating(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def g(v: Any) -> Any:
            v = v * 1
            v.add_(1)  # functionalization: the wrapper's values are newer than its storage
            return fn(v)
        return g

    return {
        "grad": (lambda: grad(lambda v: (f(v) ** 2 * w).sum())(x), grad(lambda v: (plain(v) ** 2 * w).sum())(x)),
        "jvp": (lambda: jvp(f, (x,), (t,))[1], jvp(plain, (x,), (t,))[1]),
        "vjp": (lambda: vjp(f, x)[1](t)[0], vjp(plain, x)[1](t)[0]),
        "jacrev": (lambda: jacrev(lambda v: (f(v) * w).sum())(x), jacrev(lambda v: (plain(v) * w).sum())(x)),
        "vmap": (lambda: vmap(f)(x), vmap(plain)(x)),
        "functionalize": (lambda: functionalize(mutating(f))(x), mutating(plain)(x)),
    }


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_torch_func_transforms_are_declined_and_exact(kernel: CRotationKernel) -> None:
    x, t = randn(3, 5, 8, seed=3), randn(3, 5, 8, seed=4)
    cos, sin = tables((5, 4))
    for name, (run, want) in _func_cases(kernel, x, t, cos, sin).items():
        got = run()
        assert torch.equal(got, want), name


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated:DeprecationWarning")
def test_fake_tensors_and_jit_trace_never_reach_the_kernel(kernel: CRotationKernel) -> None:
    """A FakeTensor's memory is not its own, and under torch.jit.trace the call would not be
    recorded: declined (and the extension would raise, not crash, if they got through)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = randn(2, 4, 8, 64)
    c, s = tables((8, 32))
    with FakeTensorMode() as m:
        assert kernel.rotate(m.from_tensor(x), m.from_tensor(c), m.from_tensor(s), layout="half") is None
    answers: list[Any] = []

    def traced(v: Any) -> Any:
        answers.append(kernel.rotate(v, c, s, layout="half"))
        return v * 2

    torch.jit.trace(traced, (x,), check_trace=False)
    assert answers == [None]


def test_private_torch_names_still_exist() -> None:
    """The two private names the torch path reads (see peregistry_rotary_c._torch): a torch
    that drops one fails here, loudly (the code then falls back: the public unpack_dual, and
    no compiled op)."""
    import torch.autograd.forward_ad as fwad

    assert isinstance(fwad._current_level, int)
    assert callable(torch._C._functorch.get_dynamic_layer_stack_depth)
    assert _torch._functorch_depth is torch._C._functorch.get_dynamic_layer_stack_depth


def test_dual_level_fallback_without_the_private_level(monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch without ``forward_ad._current_level``: each tensor is asked publicly."""
    import types

    import torch.autograd.forward_ad as fwad

    monkeypatch.setattr(_torch, "_fwad", types.SimpleNamespace(unpack_dual=fwad.unpack_dual))
    x = randn(2, 8, 16)
    cos, sin = tables((8, 8))
    assert not _torch._dual_level_open(x, cos, sin)
    with fwad.dual_level():
        dual = fwad.make_dual(x, x)
        assert _torch._dual_level_open(dual, cos, sin)
        assert _torch._dual_level_open(x, dual[..., :8], sin)
        assert not _torch._dual_level_open(x, cos, sin)


def test_numpy_and_torch_answers_agree(kernel: CRotationKernel) -> None:
    x = randn(2, 3, 17, 64)
    cos, sin = tables((17, 32))
    for layout in LAYOUTS:
        a = kernel.rotate(x, cos, sin, layout=layout)
        b = kernel.rotate(x.numpy(), cos.numpy(), sin.numpy(), layout=layout)
        assert a is not None and b is not None
        np.testing.assert_array_equal(a.numpy(), b)


def test_dispatch_modes_see_torchs_ops(kernel: CRotationKernel) -> None:
    """Under make_fx (a dispatch mode) the kernel declines: a recorded graph computes new
    inputs' rotations, not the traced one's answer."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    assert _get_current_dispatch_mode() is None and not torch._C._is_torch_function_mode_enabled()
    x1, x2 = randn(2, 8, 64, seed=1), randn(2, 8, 64, seed=2)
    c, s = tables((8, 32), seed=3)

    def f(x: Any) -> Any:
        out = kernel.rotate(x, c, s, layout="half")
        return generic(x, c, s, "half") if out is None else out

    graph = make_fx(f)(x1)
    assert_same_bits(graph(x2), generic(x2, c, s, "half"))
