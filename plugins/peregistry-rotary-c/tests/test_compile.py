"""The kernel under ``torch.compile``: the opaque ``peregistry_rotary_c::rotate`` op where it
pays and nothing can be differentiated, else None (the plain expression is traced). Every result
is compared with eager's, so a wrong choice shows as a wrong value, not only as a node count."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from peregistry_rotary_c import CRotationKernel
from peregistry_rotary_c import kernel as kmod

torch: Any = pytest.importorskip("torch")

from peregistry_rotary_c import _torch  # noqa: E402  (imports torch)

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")

OP = "peregistry_rotary_c.rotate.default"
K = CRotationKernel()


def rot(x: Any, cos: Any, sin: Any, layout: str) -> Any:
    """What the core does: the kernel's answer, else the plain expression."""
    out = K.rotate(x, cos, sin, layout=layout)
    return _torch.rotate_functional(x, cos, sin, layout == "interleaved") if out is None else out


def counting() -> tuple[list[int], Callable[..., Any]]:
    """A Dynamo backend that records how many op nodes each graph has and runs it as traced."""
    seen: list[int] = []

    def backend(gm: Any, example_inputs: Any) -> Any:
        seen.append(sum(str(n.target) == OP for n in gm.graph.nodes))
        return gm

    return seen, backend


def tables(n: int, half: int, dtype: Any = None) -> tuple[Any, Any]:
    ang = torch.arange(n, dtype=torch.float64)[:, None] * 0.01 * torch.arange(1, half + 1)
    return ang.cos().to(dtype or torch.float32), ang.sin().to(dtype or torch.float32)


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize(("layout", "dtype"), [("interleaved", "float32"), ("interleaved", "bfloat16"),
                                               ("interleaved", "float64"), ("half", "bfloat16")])
def test_compiled_inference_takes_the_op(kernel: CRotationKernel, layout: str, dtype: str) -> None:
    """2^18 elements (the threshold), fullgraph: one op, eager's bits."""
    x = torch.randn(1, 4, 1024, 64, generator=torch.Generator().manual_seed(0)).to(getattr(torch, dtype))
    assert x.numel() == _torch.COMPILED_KERNEL_ELEMENTS
    cos, sin = tables(1024, 32, torch.float64 if dtype == "float64" else None)
    seen, backend = counting()
    got = torch.compile(lambda v: rot(v, cos, sin, layout), backend=backend, fullgraph=True)(x)
    assert seen == [1]
    assert torch.equal(got, rot(x, cos, sin, layout))


def test_inductor_and_dynamic_shapes_give_eager_bits(kernel: CRotationKernel) -> None:
    """Inductor compiles the graph around the op; with dynamic shapes, one graph serves both
    sizes."""
    inductor = torch._dynamo.lookup_backend("inductor")
    seen: list[int] = []

    def backend(gm: Any, example_inputs: Any) -> Any:
        seen.append(sum(str(n.target) == OP for n in gm.graph.nodes))
        return inductor(gm, example_inputs)

    cos, sin = tables(2048, 32)
    f = torch.compile(lambda v, c, s: rot(v, c, s, "interleaved"), backend=backend, fullgraph=True,
                      dynamic=True)
    for n in (1024, 2048):
        x = torch.randn(1, 4, n, 64, generator=torch.Generator().manual_seed(n))
        assert torch.equal(f(x, cos[:n], sin[:n]), rot(x, cos[:n], sin[:n], "interleaved"))
    assert seen == [1]


def test_op_not_used_where_inductor_does_as_well_or_it_cannot_run(kernel: CRotationKernel) -> None:
    """float32 half layout (inductor's loop is as fast), fewer elements than the threshold, a
    transposed x (fuses into inductor's loop) and float16 (not the kernel's): no op."""
    x = torch.randn(1, 1024, 4, 64, generator=torch.Generator().manual_seed(1))
    cos, sin = tables(1024, 32)
    for layout, v in (("half", x.transpose(1, 2).contiguous()), ("interleaved", x[:, :512].transpose(1, 2)),
                      ("interleaved", x.transpose(1, 2)), ("interleaved", x.transpose(1, 2).half())):
        c, s = cos[: v.shape[-2]], sin[: v.shape[-2]]
        seen, backend = counting()
        torch._dynamo.reset()
        got = torch.compile(lambda a, c=c, s=s, layout=layout: rot(a, c, s, layout), backend=backend,
                            fullgraph=True)(v)
        assert seen == [0], (layout, v.shape, v.dtype)
        assert torch.equal(got, rot(v, c, s, layout))


def test_switched_off_kernel_traces_the_plain_expression(kernel: CRotationKernel,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kmod.STATE, "module", None)
    monkeypatch.setattr(_torch, "COMPILED_KERNEL_ELEMENTS", 1)
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(2))
    cos, sin = tables(5, 8)
    seen, backend = counting()
    got = torch.compile(lambda a: rot(a, cos, sin, "interleaved"), backend=backend, fullgraph=True)(x)
    assert seen == [0] and torch.equal(got, _torch.rotate_functional(x, cos, sin, True))


@pytest.fixture
def small_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The threshold down to one element, so that small inputs would take the op."""
    monkeypatch.setattr(_torch, "COMPILED_KERNEL_ELEMENTS", 1)


def _derivative_cases(x: Any, t: Any, cos: Any, sin: Any) -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """name -> (compiled computation, the same eagerly): every way a derivative reaches the
    rotation inside or around a compiled region."""
    from torch.autograd import forward_ad as fwad
    from torch.func import grad, jacfwd, jvp, vmap

    def f(v: Any) -> Any:
        return rot(v, cos, sin, "interleaved")

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
        compiled: Callable[..., Any] = torch.compile(fn, backend="aot_eager")
        return compiled

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


def test_compiled_derivatives_equal_eager(kernel: CRotationKernel, small_kernel: None) -> None:
    """The op has no derivative: wherever one is asked for, the compiled result is eager's."""
    gen = torch.Generator().manual_seed(3)
    x, t = torch.randn(2, 5, 8, generator=gen), torch.randn(2, 5, 8, generator=gen)
    cos, sin = tables(5, 4)
    for name, (compiled, eager) in _derivative_cases(x, t, cos, sin).items():
        torch._dynamo.reset()
        got, want = compiled(), eager()
        assert got is not None, name
        assert torch.allclose(got, want, rtol=1e-6, atol=1e-6), name


def test_compiled_under_no_grad_then_with_grad_recompiles(kernel: CRotationKernel, small_kernel: None) -> None:
    """Compiled under no_grad (the op), called again with a requires_grad input: traced again
    (Dynamo guards grad mode and requires_grad), with a true gradient."""
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(4))
    cos, sin = tables(3, 8)
    seen, backend = counting()
    f = torch.compile(lambda v: rot(v, cos, sin, "interleaved"), backend=backend)
    with torch.no_grad():
        f(x)
    v = x.clone().requires_grad_()
    f(v).sum().backward()
    ref = x.clone().requires_grad_()
    _torch.rotate_functional(ref, cos, sin, True).sum().backward()
    assert seen == [1, 0]
    assert v.grad is not None and torch.equal(v.grad, ref.grad)


def test_export_keeps_the_plain_expression(kernel: CRotationKernel, small_kernel: None) -> None:
    """A saved program must load where this package is not installed."""
    cos, sin = tables(5, 8)

    class M(torch.nn.Module):  # type: ignore[misc]
        def forward(self, v: Any) -> Any:
            return rot(v, cos, sin, "interleaved")

    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ep = torch.export.export(M(), (x,))
    assert not any("peregistry" in str(n.target) for n in ep.graph.nodes)
    assert torch.equal(ep.module()(x), rot(x, cos, sin, "interleaved"))


def test_the_op_refuses_to_run_where_a_derivative_could_be_asked_for(kernel: CRotationKernel) -> None:
    from torch.autograd import forward_ad as fwad

    from peregistry_rotary_c._torch_op import rotate

    x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(6))
    c, s = torch.ones(3, 4), torch.zeros(3, 4)
    with torch.no_grad():
        assert torch.equal(rotate(x.requires_grad_(), c, s, True), x)  # (sin 0: identity)
    with pytest.raises(RuntimeError, match="no derivative"):
        rotate(x, c, s, True)
    with fwad.dual_level(), pytest.raises(RuntimeError, match="no derivative"):
        rotate(fwad.make_dual(x.detach(), torch.ones_like(x)), c, s, True)
    # where the kernel declines at run time (a transposed x), the plain expression: same bits
    xt = torch.randn(3, 2, 8).transpose(0, 1)
    assert torch.equal(rotate(xt, c, s, False), _torch.rotate_functional(xt, c, s, False))


def test_compiles_where_only_pt2_compliant_ops_are_allowed(kernel: CRotationKernel,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch._dynamo.config, "only_allow_pt2_compliant_ops", True)
    x = torch.randn(1, 4, 1024, 64, generator=torch.Generator().manual_seed(7))
    cos, sin = tables(1024, 32)
    seen, backend = counting()
    got = torch.compile(lambda v: rot(v, cos, sin, "interleaved"), backend=backend, fullgraph=True)(x)
    assert seen == [1] and torch.equal(got, rot(x, cos, sin, "interleaved"))


_COMPILED_FIRST = r"""
import torch, peregistry as per
enc = per.get_encoder("rotary", dim=128, layout="interleaved")
f = torch.compile(lambda v: enc.rotate(v), fullgraph=True, backend="aot_eager")
x = torch.randn(1, 8, 512, 128, generator=torch.Generator().manual_seed(0))
y = f(x)  # before any eager torch rotation: the kernel's torch path imported eagerly by then
assert torch.equal(y, enc.rotate(x))
print("ok")
"""


def test_a_model_compiled_before_any_eager_call() -> None:
    """The kernel's torch path is imported when the core asks the kernel's status (an encoder
    is made), not first while Dynamo traces: that import fills a dict Dynamo guards ("Guard
    failed on the same frame it was created")."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", _COMPILED_FIRST], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
