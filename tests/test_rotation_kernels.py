"""Rotation kernels as plugins (hook ``peregistry_rotation_kernels``): the core tries them before
its own paths, lists them with their status, and :func:`check_rotation_kernel` passes a correct
kernel and fails wrong ones with a message that says what broke."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import peregistry as per
from peregistry.rope import apply_rotation
from peregistry.testing import check_rotation_kernel
from peregistry.testing._core import selected_backends

BACKENDS = [b.name for b in selected_backends()]


def _xp(x: Any) -> Any:
    """The namespace of ``x`` by its module (array-api-compat's lookup is an ``lru_cache``,
    which torch.compile warns about)."""
    import array_api_compat

    root = type(x).__module__.split(".")[0]
    if root in ("numpy", "torch"):
        return getattr(array_api_compat, root)
    if root in ("jax", "jaxlib"):
        import jax.numpy as jnp

        return jnp
    import array_api_strict

    return array_api_strict


class Generic:
    """A correct stand-in: the generic rotation itself, counting its answers."""

    name = "stand-in"
    priority = 1000  # before any installed kernel (the C accelerator, where installed)

    def __init__(self) -> None:
        self.calls = 0

    def rotate(self, x: Any, cos: Any, sin: Any, *, layout: str) -> Any:
        self.calls += 1
        return apply_rotation(x, cos, sin, layout=layout, xp=_xp(x))  # type: ignore[arg-type]


class Plugin:
    def __init__(self, *kernels: Any) -> None:
        self.kernels = list(kernels)

    @per.hookimpl
    def peregistry_rotation_kernels(self) -> list[Any]:
        return self.kernels


@pytest.fixture
def register() -> Iterator[Any]:
    names: list[str] = []

    def add(*kernels: Any, name: str = "kernels-under-test") -> str:
        names.append(per.register(Plugin(*kernels), name=name))
        return names[-1]

    yield add
    for n in names:
        per.unregister(n)


def test_a_correct_kernel_passes() -> None:
    report = check_rotation_kernel(Generic())
    assert report.ok, str(report)
    assert {r.backend for r in report.rows} == set(BACKENDS)
    answered = [r for r in report.rows if r.check == "answered"]
    assert all(not r.message.startswith("0 of") for r in answered), answered


class Wrong(Generic):
    name = "wrong-direction"

    def rotate(self, x: Any, cos: Any, sin: Any, *, layout: str) -> Any:
        return apply_rotation(x, cos, -sin, layout=layout, xp=_xp(x))  # type: ignore[arg-type]


class Writes(Generic):
    name = "writes-input"

    def rotate(self, x: Any, cos: Any, sin: Any, *, layout: str) -> Any:
        out = apply_rotation(x, cos, sin, layout=layout, xp=_xp(x))  # type: ignore[arg-type]
        if type(x).__module__ == "numpy" and x.flags.writeable and x.size:
            x.reshape(-1)[0] += 1  # (only where it can: NumPy)
        return out


class ReturnsX(Generic):
    name = "returns-x"

    def rotate(self, x: Any, cos: Any, sin: Any, *, layout: str) -> Any:
        return x


class LosesGradient(Generic):
    name = "loses-gradient"

    def rotate(self, x: Any, cos: Any, sin: Any, *, layout: str) -> Any:
        if hasattr(x, "detach"):
            x, cos, sin = x.detach(), cos.detach(), sin.detach()
        return apply_rotation(x, cos, sin, layout=layout, xp=_xp(x))  # type: ignore[arg-type]


@pytest.mark.parametrize(("kernel", "says"), [
    (Wrong(), "differ from the generic rotation"),
    (ReturnsX(), "returned x itself"),
])
def test_a_wrong_kernel_fails_saying_what_broke(kernel: Any, says: str) -> None:
    report = check_rotation_kernel(kernel)
    assert not report.ok
    assert any(says in r.message for r in report.failures), report


@pytest.mark.skipif("numpy" not in BACKENDS, reason="NumPy arrays are the ones a kernel can write")
def test_a_kernel_writing_its_input_fails() -> None:
    report = check_rotation_kernel(Writes(), backends="numpy")
    assert any("wrote into its input x" in r.message for r in report.failures), report


@pytest.mark.skipif("torch" not in BACKENDS, reason="derivatives are checked on torch")
def test_a_kernel_losing_a_derivative_fails() -> None:
    report = check_rotation_kernel(LosesGradient(), backends="torch")
    failed = {r.check for r in report.failures}
    assert "check_kernel_derivatives" in failed, report


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_core_uses_an_installed_kernel(register: Any, backend: str) -> None:
    from peregistry.registry import default_registry

    b = default_registry.backend(backend)
    enc = per.get_encoder("rotary", dim=16, rotary_dim=12)
    x = b.from_numpy(np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32))
    want = b.to_numpy(enc.rotate(x))
    kernel = Generic()
    register(kernel)
    got = enc.rotate(x)
    assert kernel.calls == 1
    np.testing.assert_array_equal(b.to_numpy(got), want)  # partial rotary: pass-through kept
    q, _k = enc.tables(b.from_numpy(np.arange(5))).rotate_all(x, x)
    assert kernel.calls == 3
    np.testing.assert_array_equal(b.to_numpy(q), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tables_choose_their_rotation_when_made(register: Any, backend: str) -> None:
    """``RotaryTables`` ask the dispatch once, when made (``rotate_all`` then enters none):
    torch's tables made while no kernel is active keep torch's own rotation, other namespaces'
    ask the kernels on each call; the next tables use a kernel registered meanwhile. The bits
    are the same either way."""
    from peregistry.registry import default_registry
    from peregistry.rope import _kernels

    b = default_registry.backend(backend)
    enc = per.get_encoder("rotary", dim=16)
    x = b.from_numpy(np.random.default_rng(2).standard_normal((2, 5, 16)).astype(np.float32))
    pos = b.from_numpy(np.arange(5))
    made_before = enc.tables(pos)
    installed = bool(_kernels.active())  # (the C accelerator, where installed)
    want = b.to_numpy(made_before.rotate(x))
    kernel = Generic()
    register(kernel)
    np.testing.assert_array_equal(b.to_numpy(made_before.rotate_all(x)[0]), want)
    assert kernel.calls == (0 if backend == "torch" and not installed else 1)
    calls = kernel.calls
    np.testing.assert_array_equal(b.to_numpy(enc.tables(pos).rotate_all(x)[0]), want)
    assert kernel.calls == calls + 1


def test_a_declining_kernel_leaves_the_core_path(register: Any) -> None:
    class Declines(Generic):
        name = "declines"

        def rotate(self, x: Any, cos: Any, sin: Any, *, layout: str) -> Any:
            self.calls += 1
            return None

    enc = per.get_encoder("rotary", dim=8)
    x = np.random.default_rng(1).standard_normal((3, 8))
    want = enc.rotate(x)
    kernel = Declines()
    register(kernel)
    np.testing.assert_array_equal(enc.rotate(x), want)
    assert kernel.calls == 1


def test_unregistering_stops_using_a_kernel() -> None:
    kernel = Generic()
    name = per.register(Plugin(kernel), name="unregistered-soon")
    enc = per.get_encoder("rotary", dim=8)
    try:
        enc.rotate(np.ones((2, 8)))
    finally:
        per.unregister(name)
    enc.rotate(np.ones((2, 8)))
    assert kernel.calls == 1


def test_kernels_lists_each_with_its_status(register: Any) -> None:
    class Off(Generic):
        name = "switched-off"
        priority = 5000

        def status(self) -> str:
            return "off (MY_SWITCH=0)"

    class Broken(Generic):
        name = "broken-status"

        def status(self) -> str:
            raise RuntimeError("cannot tell")

    register(Generic(), Off(), Broken())
    rows = {k.name: k for k in per.rope.kernels()}
    assert rows["stand-in"].active and rows["stand-in"].plugin.name == "kernels-under-test"
    assert rows["switched-off"].status == "off (MY_SWITCH=0)" and not rows["switched-off"].active
    assert rows["broken-status"].status == "error" and "cannot tell" in str(rows["broken-status"].error)
    names = [k.name for k in per.rope.kernels()]
    assert names.index("switched-off") < names.index("stand-in")  # higher priority first
    # only the active one is tried
    enc = per.get_encoder("rotary", dim=8)
    enc.rotate(np.ones((2, 8)))


def test_two_kernels_of_one_name_conflict_and_neither_is_used(register: Any) -> None:
    a, b = Generic(), Generic()
    register(a, name="first")
    register(b, name="second")
    rows = [k for k in per.rope.kernels() if k.name == "stand-in"]
    assert [r.status for r in rows] == ["conflict", "conflict"]
    assert "first" in str(rows[0].error) and "second" in str(rows[0].error)
    per.get_encoder("rotary", dim=8).rotate(np.ones((2, 8)))
    assert a.calls == b.calls == 0


def test_a_hook_returning_a_class_is_a_plugin_error(register: Any) -> None:
    register(Generic, name="gives-a-class")
    info = {p.name: p for p in per.registry.default_registry.plugins()}["gives-a-class"]
    assert info.status == "error" and "return an instance" in str(info.error)


def test_list_kernels_on_the_command_line(register: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from peregistry.cli import main

    register(Generic())
    assert main(["list", "--kernels"]) == 0
    out = capsys.readouterr().out
    assert "stand-in" in out and "kernels-under-test (in-process)" in out and "active" in out
    assert main(["list", "--kernels", "--format", "json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["stand-in"]["active"] is True and rows["stand-in"]["plugin"]["name"] == "kernels-under-test"


class ZeroSign(Generic):
    name = "wrong-zero-sign"

    def rotate(self, x: Any, cos: Any, sin: Any, *, layout: str) -> Any:
        out = apply_rotation(x, cos, sin, layout=layout, xp=_xp(x))  # type: ignore[arg-type]
        xp = _xp(x)
        return xp.where(out == 0, -out, out)  # the value, with a zero's sign flipped


def test_a_kernel_flipping_a_zeros_sign_fails() -> None:
    report = check_rotation_kernel(ZeroSign(), backends=BACKENDS[0])
    assert any("differ from the generic rotation" in r.message for r in report.failures), \
        str(report)


@pytest.mark.skipif("torch" not in BACKENDS, reason="make_fx is torch's")
def test_a_kernel_computing_outside_torchs_dispatcher_fails() -> None:
    """A kernel answering plain CPU tensors through NumPy is invisible to make_fx (its answer is
    frozen into the recorded graph): the check runs the graph on new values."""
    import torch

    class ThroughNumpy(Generic):
        name = "through-numpy"

        def rotate(self, x: Any, cos: Any, sin: Any, *, layout: str) -> Any:
            if type(x) is not torch.Tensor or x.requires_grad or torch.compiler.is_compiling():
                return None
            try:
                a, c, s = x.numpy(), cos.numpy(), sin.numpy()
            except (RuntimeError, TypeError):
                return None
            return torch.from_numpy(apply_rotation(a, c, s, layout=layout))  # type: ignore[arg-type]

    report = check_rotation_kernel(ThroughNumpy(), backends="torch")
    assert any("make_fx" in r.message for r in report.failures), str(report)


def test_a_kernel_with_a_tolerance_is_used_only_when_allowed(
        register: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    class Close(Generic):
        name = "within-two-ulps"
        ulps = 2

    register(Close())
    row = next(k for k in per.rope.kernels() if k.name == "within-two-ulps")
    assert not row.active and "PEREGISTRY_KERNEL_ULPS=2" in row.status
    monkeypatch.setenv("PEREGISTRY_KERNEL_ULPS", "2")
    per.rope.clear_caches()
    assert next(k for k in per.rope.kernels() if k.name == "within-two-ulps").active
    monkeypatch.setenv("PEREGISTRY_KERNEL_ULPS", "two")
    with pytest.raises(ValueError, match="PEREGISTRY_KERNEL_ULPS='two'"):
        per.rope.kernels()


def test_a_list_read_across_a_reset_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin registered while the active kernels are read: the list read is not kept."""
    from peregistry.registry import default_registry
    from peregistry.rope import _kernels

    real = default_registry.rotation_kernels

    def racing() -> Any:
        rows = real()
        _kernels.reset()  # what register()/unregister() in another thread does
        return rows

    _kernels.reset()
    monkeypatch.setattr(default_registry, "rotation_kernels", racing)
    _kernels.active()
    assert _kernels.ACTIVE is None
