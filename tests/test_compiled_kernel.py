"""The C kernel inside ``torch.compile`` (``peregistry::rotate``, ``rope/_torch_op.py``).

Under a compiler, a contiguous CPU rotation that nothing can differentiate calls the kernel as an
opaque op: bit for bit eager. Everywhere a derivative can be asked for (autograd, ``torch.func``
transforms inside or around the compiled region, forward-mode dual tensors) and under
``torch.export``, the graph keeps the plain expression; the results are compared with eager
ones, so a wrong choice shows as a wrong value, not only as a node count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conftest import BACKENDS

import peregistry as per

pytestmark = [
    pytest.mark.skipif("torch" not in BACKENDS, reason="torch.compile (the torch env)"),
    # torch.func transforms under Dynamo load decompositions through torch.jit.script
    pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning"),
]

OP = "peregistry.rotate.default"


def _counting() -> tuple[list[int], Callable[..., Any]]:
    """A Dynamo backend that records how many ``peregistry::rotate`` nodes each graph has and
    runs the graph as traced."""
    seen: list[int] = []

    def backend(gm: Any, example_inputs: Any) -> Any:
        seen.append(sum(str(n.target) == OP for n in gm.graph.nodes))
        return gm

    return seen, backend


@pytest.mark.parametrize(("layout", "dtype", "rotary_dim"), [
    ("interleaved", "float32", 64), ("interleaved", "bfloat16", 32), ("interleaved", "float64", 64),
    ("half", "bfloat16", 64)])
def test_compiled_inference_rotates_with_the_kernel(layout: str, dtype: str,
                                                    rotary_dim: int) -> None:
    """An interleaved or bfloat16 rotation of 2**18 elements (the threshold), full or partial."""
    import torch

    from peregistry.rope._torch import COMPILED_KERNEL_ELEMENTS

    enc = per.get_encoder("rotary", dim=64, layout=layout, rotary_dim=rotary_dim)
    x = torch.randn(1, 4, 1024, 64, generator=torch.Generator().manual_seed(0)).to(
        getattr(torch, dtype))
    assert x.numel() == COMPILED_KERNEL_ELEMENTS
    seen, backend = _counting()
    torch._dynamo.reset()
    got = torch.compile(lambda v: enc.rotate(v, offset=5), backend=backend, fullgraph=True)(x)
    assert seen == [1]
    assert torch.equal(got, enc.rotate(x, offset=5))
    if dtype != "float64":  # (inductor computes float64 tables its own way: within 2 ulps,
        # tests/test_compiled_rotation.py; float32 and bfloat16 measured equal)
        torch._dynamo.reset()
        inductor = torch.compile(lambda v: enc.rotate(v, offset=5), fullgraph=True)(x)
        assert torch.equal(inductor, enc.rotate(x, offset=5))


def test_compiled_kernel_not_used_where_inductor_does_as_well_or_it_cannot_run() -> None:
    """The float32 half layout (inductor's loop is as fast), fewer elements than the threshold (the
    op's fixed cost), a transposed ``x`` (inductor's fused loop reads it in place) and float16
    (the kernel has no torch float16) keep the plain expression."""
    import torch

    half = per.get_encoder("rotary", dim=64)
    enc = per.get_encoder("rotary", dim=64, layout="interleaved")
    x = torch.randn(1, 1024, 4, 64, generator=torch.Generator().manual_seed(1))
    for e, v in ((half, x), (enc, x[:, :512]), (enc, x.transpose(1, 2)), (enc, x.half())):
        seen, backend = _counting()
        torch._dynamo.reset()
        got = torch.compile(lambda a, e=e: e.rotate(a), backend=backend, fullgraph=True)(v)
        assert seen == [0]
        assert torch.equal(got, e.rotate(v))


def test_compiled_kernel_follows_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the kernel off (``PEREGISTRY_NATIVE=0`` when the op module is loaded) the plain
    expression, with the same result."""
    import torch

    from peregistry.rope import _torch, _torch_op

    monkeypatch.setattr(_torch_op, "KERNEL_ON", False)
    monkeypatch.setattr(_torch, "COMPILED_KERNEL_ELEMENTS", 1)
    enc = per.get_encoder("rotary", dim=16, layout="interleaved")
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(2))
    seen, backend = _counting()
    torch._dynamo.reset()
    got = torch.compile(lambda a: enc.rotate(a), backend=backend, fullgraph=True)(x)
    assert seen == [0] and torch.equal(got, enc.rotate(x))
    torch._dynamo.reset()


def _derivative_cases(enc: Any, x: Any, t: Any) -> dict[str, tuple[Callable[[], Any],
                                                                    Callable[[], Any]]]:
    """name -> (compiled computation, the same eagerly): every way a derivative reaches the
    rotation inside or around a compiled region."""
    import torch
    from torch.autograd import forward_ad as fwad
    from torch.func import grad, jacfwd, jvp, vmap

    def f(v: Any) -> Any:
        return enc.rotate(v)

    w = torch.arange(x.shape[-1], dtype=x.dtype)

    def loss(v: Any) -> Any:
        return (f(v) ** 2 * w).sum()

    def dual(fn: Callable[[Any], Any]) -> Callable[[Any, Any], Any]:
        def run(v: Any, tangent: Any) -> Any:
            with fwad.dual_level():
                return fwad.unpack_dual(fn(fwad.make_dual(v, tangent))).tangent
        return run

    def backward(fn: Callable[[Any], Any]) -> Any:
        v = x.clone().requires_grad_()
        fn(v).backward()
        return v.grad

    def c(fn: Callable[..., Any]) -> Callable[..., Any]:
        return torch.compile(fn, backend="aot_eager")

    return {
        "backward": (lambda: backward(c(loss)), lambda: backward(loss)),
        "grad inside": (c(lambda: grad(loss)(x)), lambda: grad(loss)(x)),
        "jvp inside": (c(lambda: jvp(f, (x,), (t,))[1]), lambda: jvp(f, (x,), (t,))[1]),
        "jacfwd inside": (c(lambda: jacfwd(loss)(x)), lambda: jacfwd(loss)(x)),
        "vmap inside": (c(lambda: vmap(f)(x)), lambda: vmap(f)(x)),
        "jvp around": (lambda: jvp(c(f), (x,), (t,))[1], lambda: jvp(f, (x,), (t,))[1]),
        "grad around": (lambda: grad(c(loss))(x), lambda: grad(loss)(x)),
        "dual level inside": (lambda: c(dual(f))(x, t), lambda: dual(f)(x, t)),
        "dual tensor passed in": (lambda: dual(c(f))(x, t), lambda: dual(f)(x, t)),
    }


@pytest.fixture
def small_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's threshold down to one element, so that small inputs would take the op."""
    from peregistry.rope import _torch

    monkeypatch.setattr(_torch, "COMPILED_KERNEL_ELEMENTS", 1)


def test_compiled_derivatives_equal_eager(small_kernel: None) -> None:
    """The op has no derivative: wherever one is asked for, the compiled result is eager's
    (the op would give a zero or missing tangent here, silently: measured before the guard on
    the forward-mode level)."""
    import torch

    enc = per.get_encoder("rotary", dim=8, layout="interleaved")
    gen = torch.Generator().manual_seed(3)
    x, t = torch.randn(2, 5, 8, generator=gen), torch.randn(2, 5, 8, generator=gen)
    for name, (compiled, eager) in _derivative_cases(enc, x, t).items():
        torch._dynamo.reset()
        got, want = compiled(), eager()
        assert got is not None, name
        assert torch.allclose(got, want, rtol=1e-6, atol=1e-6), name


def test_compiled_under_no_grad_then_with_grad_recompiles(small_kernel: None) -> None:
    """A function compiled under ``no_grad`` (the op) and called again with a ``requires_grad``
    input is traced again (Dynamo guards grad mode and ``requires_grad``): a true gradient."""
    import torch

    enc = per.get_encoder("rotary", dim=16, layout="interleaved")
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(4))
    seen, backend = _counting()
    torch._dynamo.reset()
    f = torch.compile(lambda v: enc.rotate(v), backend=backend)
    with torch.no_grad():
        f(x)
    v = x.clone().requires_grad_()
    f(v).sum().backward()
    ref = x.clone().requires_grad_()
    enc.rotate(ref).sum().backward()
    assert seen == [1, 0]
    assert v.grad is not None and torch.equal(v.grad, ref.grad)


def test_export_keeps_the_plain_expression(small_kernel: None) -> None:
    """A saved program must load where peregistry defined no op."""
    import torch

    enc = per.get_encoder("rotary", dim=16, layout="interleaved")

    class M(torch.nn.Module):
        def forward(self, v: Any) -> Any:
            return enc.rotate(v)

    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ep = torch.export.export(M(), (x,))
    assert not any("peregistry" in str(n.target) for n in ep.graph.nodes)
    assert torch.equal(ep.module()(x), enc.rotate(x))


def test_the_op_refuses_to_run_where_a_derivative_could_be_asked_for() -> None:
    """Called directly (the rotation never does) with an input requiring a gradient or inside
    a forward-mode level, the op raises instead of dropping the derivative."""
    import torch
    from torch.autograd import forward_ad as fwad

    from peregistry.rope._torch_op import rotate

    x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(6))
    c, s = torch.ones(3, 4), torch.zeros(3, 4)
    with torch.no_grad():
        assert torch.equal(rotate(x.requires_grad_(), c, s, 8, True), x)  # (sin 0: identity)
    with pytest.raises(RuntimeError, match="no derivative"):
        rotate(x, c, s, 8, True)
    with fwad.dual_level(), pytest.raises(RuntimeError, match="no derivative"):
        rotate(fwad.make_dual(x.detach(), torch.ones_like(x)), c, s, 8, True)


def test_compiles_where_only_pt2_compliant_ops_are_allowed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The op carries ``pt2_compliant_tag`` (as ``custom_op`` ops do), so ``fullgraph=True``
    compiles with Dynamo's ``only_allow_pt2_compliant_ops`` (without the tag: an error)."""
    import torch

    monkeypatch.setattr(torch._dynamo.config, "only_allow_pt2_compliant_ops", True)
    enc = per.get_encoder("rotary", dim=64, layout="interleaved")
    x = torch.randn(1, 4, 1024, 64, generator=torch.Generator().manual_seed(7))
    seen, backend = _counting()
    torch._dynamo.reset()
    got = torch.compile(lambda v: enc.rotate(v), backend=backend, fullgraph=True)(x)
    assert seen == [1] and torch.equal(got, enc.rotate(x))
    torch._dynamo.reset()
