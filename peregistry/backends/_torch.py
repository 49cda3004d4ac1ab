"""PyTorch adapter: default dtype from ``torch.get_default_dtype()``, ``torch.compile`` as jit."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from ._base import Backend, Ctx

#: ``torch.compile`` backend used by the conformance suite's jit check. ``inductor`` generates
#: and compiles C++; ``aot_eager`` checks full-graph capture without code generation.
COMPILE_BACKEND_ENV = "PEREGISTRY_TORCH_COMPILE_BACKEND"


def _import_inductor_quietly() -> None:
    """Import inductor with its one import-time DeprecationWarning silenced: torch 2.13's
    ``torch.utils.mkldnn`` (pulled in by ``torch._inductor.compile_fx``) still decorates with
    ``torch.jit.script_method``, so the *first* inductor compile in a process fails when warnings
    are errors, whatever is being compiled. Nothing else is filtered."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.script_method` is deprecated",
                                category=DeprecationWarning)
        import torch._inductor.compile_fx  # noqa: F401


class TorchBackend(Backend):
    name = "torch"
    priority = 10
    _memos = ("_cpu_ctx",)

    def _clear_memos(self) -> None:
        """Forget the CPU's ``Ctx`` and the torch functions looked up once (:func:`bind_probe`)."""
        global _probe
        super()._clear_memos()
        _probe = None

    def owns(self, x: Any) -> bool:
        import torch

        return isinstance(x, torch.Tensor)

    def namespace(self) -> Any:
        import array_api_compat.torch as xp

        return xp

    def native(self) -> Any:
        import torch

        return torch

    def float_dtypes(self) -> Mapping[str, Any]:
        import torch

        return {
            "float16": torch.float16,
            "bfloat16": torch.bfloat16,
            "float32": torch.float32,
            "float64": torch.float64,
        }

    def is_float_dtype(self, dtype: Any) -> bool:
        import torch

        # torch dtypes are singletons: a tuple lookup, not a dict built per call
        return dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64)

    def default_float_dtype(self, device: Any = None) -> Any:
        import torch

        return torch.get_default_dtype()

    def index_dtype(self, device: Any = None) -> Any:
        return sys.modules["torch"].int64  # on every device: no info object per call

    def wide_float_dtype(self, device: Any = None) -> Any:
        torch = sys.modules["torch"]  # asked on every call: a dict read, not an import

        if device == _probe_cpu():  # (a tenth of the cost of reading device.type)
            return torch.float64
        kind = getattr(device, "type", None)  # a torch.device
        if kind == "cpu":
            return torch.float64
        if device is not None and (kind if isinstance(kind, str)
                                   else torch.device(device).type) == "mps":
            return torch.float32  # MPS has no float64
        return torch.float64

    def context(self, x: Any) -> Ctx:
        """The :class:`Ctx` of ``x``'s device; the CPU's is made once (outside a trace)."""
        device = x.device
        kept: Ctx | None = self.__dict__.get("_cpu_ctx")
        if kept is not None and device == kept.device:
            return kept
        ctx = Ctx(xp=self.namespace(), backend=self, device=device,
                  wide=self.wide_float_dtype(device), index=sys.modules["torch"].int64)
        if kept is None and device.type == "cpu" and not sys.modules["torch"].compiler.is_compiling():
            self.__dict__["_cpu_ctx"] = ctx
        return ctx

    def default_device(self) -> Any:
        import torch

        return torch.get_default_device()

    def from_numpy(self, a: Any, *, dtype: Any = None, device: Any = None) -> Any:
        import torch

        return torch.asarray(a, dtype=dtype, device=device)

    def to_numpy(self, x: Any) -> Any:
        import numpy as np
        import torch

        x = x.detach().cpu()
        if x.dtype == torch.bfloat16:
            x = x.to(torch.float32)
        return np.asarray(x.numpy())

    def from_dlpack(self, x: Any, *, device: Any = None) -> Any:
        import torch

        out = torch.utils.dlpack.from_dlpack(x)
        return out if device is None else out.to(device)

    def jit(self, fn: Callable[..., Any], *, dynamic: bool = False) -> Callable[..., Any] | None:
        import torch

        backend = os.environ.get(COMPILE_BACKEND_ENV, "inductor")
        if backend == "inductor":
            _import_inductor_quietly()
        return torch.compile(_own_code(fn), fullgraph=True, dynamic=dynamic, backend=backend)

    def mark_dynamic(self, x: Any, axis: int) -> bool:
        import torch

        torch._dynamo.mark_dynamic(x, axis)
        return True

    def jit_counted(self, fn: Callable[..., Any]) -> tuple[Callable[..., Any] | None,
                                                           Callable[[], int]]:
        # Dynamo replays Python side effects on every call, so count compiled frames instead.
        # Counting traces is Dynamo's work, the same for every backend: without a choice in the
        # environment, aot_eager (the whole graph, functionalized) spares inductor's codegen,
        # seconds per graph; :meth:`jit` (check_jit's values) keeps inductor.
        import torch
        from torch._dynamo.testing import CompileCounterWithBackend

        backend = os.environ.get(COMPILE_BACKEND_ENV, "aot_eager")
        if backend == "inductor":
            _import_inductor_quietly()
        counter = CompileCounterWithBackend(backend)
        compiled = torch.compile(_own_code(fn), fullgraph=True, dynamic=False, backend=counter)
        return compiled, lambda: int(counter.frame_count)

    def take(self, table: Any, idx: Any, *, axis: int) -> Any:
        """Advanced indexing with N-d indices: one op, where the standard's 1-D ``take`` needs a
        flatten, a ``take`` (array-api-compat's also normalizes negative indices) and a
        reshape; it matters for a decode step's gather of two table rows."""
        torch = sys.modules["torch"]  # asked on every gather: a dict read, not an import

        if idx.dtype not in (torch.int64, torch.int32):  # uint8/bool would index as a mask
            idx = idx.to(torch.int64)
        if (axis == 0 and table.ndim == 1 and idx.dtype == torch.int64
                and type(table) is torch.Tensor and type(idx) is torch.Tensor
                and torch._C._functorch.peek_interpreter_stack() is None
                and not torch.compiler.is_compiling()):
            # A 1-D lookup of plain eager tensors: a third of advanced indexing's cost (vmap
            # has no batching rule for it, and warns)
            return torch.take(table, idx)
        return table[idx] if axis == 0 else table[:, idx]

    def is_tracing(self, x: Any) -> bool:
        # Asked several times per call: torch's functions looked up once (_probes), not through
        # three module attributes each time.
        if sys.modules["torch"].compiler.is_compiling():
            return True  # (before the global is read: see _probe_cpu)
        probe = _probe or bind_probe()
        # torch.jit.trace too: values read there would be baked into the trace as constants
        if probe.jit_tracing():
            return True
        if type(x) is probe.tensor and probe.transforms() is None:
            return False  # eager, outside torch.func transforms: no wrapper (the common case)
        return is_placeholder(x)

    def grad(self, fn: Callable[[Mapping[str, Any]], Any]) -> Callable[[Mapping[str, Any]],
                                                                       dict[str, Any]] | None:
        """Reverse-mode autograd: each param is detached into a fresh leaf that requires grad,
        ``fn`` runs with grad enabled, and ``torch.autograd.grad`` returns the gradients (zeros
        for a param ``fn`` does not use)."""
        import torch

        def g(params: Mapping[str, Any]) -> dict[str, Any]:
            leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
            with torch.enable_grad():
                out = fn(leaves)
                if out.ndim != 0:
                    raise ValueError(f"grad: fn must return a scalar, got shape "
                                     f"{tuple(out.shape)}")
                grads = torch.autograd.grad(out, list(leaves.values()), allow_unused=True)
            return {k: torch.zeros_like(v) if gk is None else gk
                    for (k, v), gk in zip(leaves.items(), grads, strict=True)}

        return g


def is_wrapped(t: Any) -> bool:
    """``t`` (a plain ``torch.Tensor``) is a functionalization or functorch (vmap, grad, jvp)
    wrapper. Such wrappers only exist while a torch.func transform runs (its interpreter stack
    is not empty) or while compiling; checking the stack first keeps eager calls cheap."""
    import torch

    fc = torch._C._functorch
    if fc.peek_interpreter_stack() is None and not torch.compiler.is_compiling():
        return False
    return bool(torch._is_functional_tensor(t) or fc.is_functorch_wrapped_tensor(t))


class _Probes:
    """The torch functions :meth:`TorchBackend.is_tracing` asks on every call, looked up once,
    and the CPU device :meth:`TorchBackend.wide_float_dtype` compares with."""

    __slots__ = ("compiling", "cpu", "jit_tracing", "tensor", "transforms")

    def __init__(self) -> None:
        torch = sys.modules["torch"]
        self.cpu = torch.device("cpu")
        self.compiling = torch.compiler.is_compiling
        self.jit_tracing = torch.jit.is_tracing
        self.transforms = torch._C._functorch.peek_interpreter_stack
        self.tensor = torch.Tensor


_probe: _Probes | None = None


def _probe_cpu() -> Any:
    # Under TorchDynamo the global is not read (it would guard on it, and the first eager call,
    # which binds it, would force a recompilation).
    if sys.modules["torch"].compiler.is_compiling():
        return sys.modules["torch"].device("cpu")
    return (_probe or bind_probe()).cpu


def bind_probe() -> _Probes:
    """The :class:`_Probes`, made once by the first call outside TorchDynamo (a global written
    while it traces costs a recompile)."""
    global _probe
    if _probe is not None:
        return _probe
    probe = _Probes()
    if not probe.compiling():
        _probe = probe
    return probe


def is_placeholder(t: Any) -> bool:
    """A tensor without readable values: fake (also under functionalization), or wrapped by
    functorch's vmap/grad transforms."""
    import torch

    # An exact nn.Parameter holds real storage (a fake tensor made a Parameter stays a
    # FakeTensor), so only the wrappers of torch.func or a compile can hide behind it; asked
    # of a model's params on every call, where is_fake costs a microsecond.
    if type(t) is torch.Tensor or type(t) is torch.nn.Parameter:
        return is_wrapped(t)
    if not isinstance(t, torch.Tensor):
        return False
    from torch._subclasses.fake_tensor import is_fake

    return bool(is_fake(t))


def _own_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a code object of its own. Dynamo keeps compiled entries (and its limit of 8
    recompiles) per *code object*, and the conformance suite compiles the same check closure for
    every encoder in one process; a fresh code object gives each its own cache, so the 9th
    encoder checked is not a spurious "recompile limit exceeded" failure."""
    import types

    if not isinstance(fn, types.FunctionType):
        return fn
    new = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                             fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    new.__dict__.update(fn.__dict__)
    return new
