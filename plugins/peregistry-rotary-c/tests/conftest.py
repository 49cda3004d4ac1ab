"""Shared helpers: the reference rotation, bit comparisons, and the kernel under test."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from peregistry_rotary_c import CRotationKernel, kernel_status

LAYOUTS = ("half", "interleaved")


@pytest.fixture(scope="session")
def kernel() -> CRotationKernel:
    """The kernel, built and on (these tests are of the kernel, not of its absence)."""
    status = kernel_status()
    if status != "active":
        pytest.fail(f"the extension is {status}: build it (pip install -e plugins/peregistry-rotary-c)")
    return CRotationKernel()


def generic(x: Any, cos: Any, sin: Any, layout: str) -> Any:
    """The reference: peregistry's generic rotation computing in the tables' dtype, as the core
    calls it for a kernel's arguments."""
    from array_api_compat import array_namespace
    from peregistry.rope import apply_rotation

    return apply_rotation(x, cos, sin, rotary_dim=x.shape[-1], interleaved=layout == "interleaved",
                          cdt=cos.dtype, xp=array_namespace(x))


def as_numpy_bits(a: Any) -> np.ndarray[Any, Any]:
    """The values of a NumPy array or a torch tensor as a NumPy array (bfloat16 as its bits)."""
    if isinstance(a, np.ndarray):
        return a
    import torch

    t = a.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
        return np.asarray(t.numpy()).view(np.uint16)
    return np.asarray(t.numpy())


def _bits(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize])


def assert_same_bits(got: Any, want: Any, *, bf16: bool = False) -> None:
    """Equal shape, dtype and bits; NaN anywhere the reference has NaN (its sign and payload
    are not part of the contract: the generic interleaved form writes ``a + (-t)``)."""
    assert type(got) is type(want), (type(got), type(want))
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape,
                                                                 want.dtype)
    g, w = as_numpy_bits(got), as_numpy_bits(want)
    if g.dtype == np.uint16:  # bfloat16 bits
        gnan = (g & 0x7FFF) > 0x7F80
        wnan = (w & 0x7FFF) > 0x7F80
    else:
        gnan, wnan = np.isnan(g), np.isnan(w)
    np.testing.assert_array_equal(gnan, wnan)
    np.testing.assert_array_equal(_bits(np.ascontiguousarray(g))[~gnan],
                                  _bits(np.ascontiguousarray(w))[~wnan])


def rotate_at_once(kernel: CRotationKernel, jobs: list[tuple[Any, Any, Any, str, Any]]) -> None:
    """Each ``(x, cos, sin, layout, want)`` rotated five times by a thread of its own, all
    started together; every answer must be ``want``'s bits."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(jobs))

    def run(k: int) -> None:
        x, c, s, layout, want = jobs[k]
        barrier.wait()
        try:
            for _ in range(5):
                assert_same_bits(kernel.rotate(x, c, s, layout=layout), want)
        except BaseException as e:  # reported in the test's thread
            errors.append(e)

    ts = [threading.Thread(target=run, args=(k,)) for k in range(len(jobs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


@pytest.fixture
def threads_seen(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The thread count the extension is given at each call (a spy around its ``rotate``)."""
    from peregistry_rotary_c import kernel as kmod

    real: Any = kmod.load()
    assert real is not None
    seen: list[int] = []

    class Spy:
        @staticmethod
        def rotate(*args: Any) -> int:
            seen.append(args[12])
            return int(real.rotate(*args))

    monkeypatch.setattr(kmod.STATE, "module", Spy)
    return seen
