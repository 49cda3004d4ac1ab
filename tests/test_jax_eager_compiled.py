"""Eager JAX runs the rope engine's tables and rotation as one compiled program per shape
(peregistry/_jax_eager.py), instead of one XLA compilation per operation (issue 14, item 8: a
check_encoder of M-RoPE took 11-14 s, almost all of it compiling tiny programs). These tests
hold what that must not change: the bits of the op-by-op execution, plugins whose hook cannot be
traced, and the number of compilations it saves."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import peregistry as per
from peregistry import _jax_eager
from peregistry.rope import Frequencies, RotaryEncoder, clear_caches
from peregistry.testing._core import selected_backends

pytestmark = pytest.mark.skipif("jax" not in [b.name for b in selected_backends()],
                                reason="jax backend not selected (PEREGISTRY_BACKENDS)")

CASES = [
    ("rotary", {"dim": 32, "rotary_dim": 16, "layout": "interleaved"}),
    ("rotary", {"dim": 32, "scaling": {"type": "yarn", "factor": 4.0,
                                       "original_max_position_embeddings": 64}}),
    ("mrope", {"dim": 32, "sections": (6, 5, 5), "interleaved": True}),
]


def op_by_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """Turn the compiled paths off: every operation runs on its own, as before."""
    monkeypatch.setattr(_jax_eager, "compiled_hook", lambda *a, **k: None)
    monkeypatch.setattr(_jax_eager, "compiled_call", lambda fn, *a, **k: fn(*a, **k))


@pytest.mark.parametrize(("name", "options"), CASES)
def test_compiled_eager_calls_give_the_bits_of_op_by_op_execution(
        name: str, options: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    jnp = pytest.importorskip("jax.numpy")
    rng = np.random.default_rng(3)
    enc = per.get_encoder(name, **options)
    axes = (3,) if name == "mrope" else ()
    dtypes = [jnp.float64 if _x64() else jnp.float32, jnp.bfloat16, jnp.float16]
    calls = []
    for dt in dtypes:
        x = jnp.asarray(rng.standard_normal((2, 3, 9, 32)), dt)
        pos = jnp.asarray(rng.integers(0, 5000, size=(*axes, 2, 1, 9)))
        real = jnp.asarray(rng.uniform(0, 300, size=(*axes, 9)))
        calls += [(lambda x=x, pos=pos: enc.rotate(x, pos)),
                  (lambda x=x: enc.rotate(x, offset=2041)),
                  (lambda pos=pos: enc.cos_sin(pos)[0]), (lambda real=real: enc.cos_sin(real)[1]),
                  (lambda pos=pos, dt=dt: enc.cos_sin(pos, dtype=dt)[1])]
    new = [np.asarray(c()) for c in calls]
    clear_caches()
    fresh = per.get_encoder(name, **options)  # no tables kept from the calls above
    enc = fresh
    op_by_op(monkeypatch)
    old = [np.asarray(c()) for c in calls]
    for i, (a, b) in enumerate(zip(new, old, strict=True)):
        assert a.dtype == b.dtype and a.shape == b.shape, (i, a.dtype, b.dtype)
        assert np.array_equal(a, b), (i, float(np.max(np.abs(a.astype(np.float64)
                                                             - b.astype(np.float64)))))


def test_placement_follows_the_inputs_without_a_transfer_per_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrays of ``jnp.asarray`` are not committed to a device: the tables made for them are
    not either, so that the compiled calls see inputs of one placement and commit nothing (a
    ``device_put`` per input cost ~18 µs per call). Committed inputs give committed results
    on their device; a mix is committed first; every placement gives the same bits."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    rng = np.random.default_rng(8)
    enc = per.get_encoder("mrope", dim=32, sections=(6, 5, 5))
    x = jnp.asarray(rng.standard_normal((1, 2, 4, 32)), jnp.float32)
    pos = jnp.asarray(rng.integers(0, 3000, size=(3, 1, 1, 4)))
    assert not x.committed and not pos.committed
    calls = [lambda x, p: enc.rotate(x, p), lambda x, p: enc.rotate(x, offset=17),
             lambda x, p: enc.cos_sin(p)[0], lambda x, p: enc.tables(p).rotate(x)]
    want = [np.asarray(c(x, pos)) for c in calls]  # tables and programs exist from here on
    puts = [0]
    real_put = jax.device_put
    monkeypatch.setattr(jax, "device_put", lambda *a, **k: puts.__setitem__(0, puts[0] + 1)
                        or real_put(*a, **k))
    for c, w in zip(calls, want, strict=True):
        out = c(x, pos)
        assert not out.committed
        np.testing.assert_array_equal(np.asarray(out), w)
    assert puts[0] == 0
    device = jax.devices()[0]
    cx, cpos = real_put(x, device), real_put(pos, device)
    for xs, ps in ((cx, cpos), (cx, pos), (x, cpos)):
        for c, w in zip(calls, want, strict=True):
            out = c(xs, ps)
            np.testing.assert_array_equal(np.asarray(out), w)
            if xs.committed and ps.committed:
                assert out.committed and out.devices() == {device}


_TWO_DEVICES = """
import json, numpy as np, jax, jax.numpy as jnp
import peregistry as per
d0, d1 = jax.devices()
xn = np.random.default_rng(0).standard_normal((1, 2, 8, 32)).astype(np.float32)
want = [np.asarray(per.get_encoder("rotary", dim=32).rotate(jnp.asarray(xn), offset=5)),
        np.asarray(per.get_encoder("rotary", dim=32).rotate(jnp.asarray(xn), jnp.arange(8) + 3))]
enc = per.get_encoder("rotary", dim=32)
with jax.default_device(d1):  # tables made while another device is the default
    x1 = jnp.asarray(xn)
    on_d1 = [enc.rotate(x1, offset=5), enc.rotate(x1, jnp.arange(8) + 3)]
x0, p0 = jnp.asarray(xn), jnp.arange(8) + 3
with jax.transfer_guard_device_to_device("disallow"):  # nothing is moved between devices
    on_d0 = [enc.rotate(x0, offset=5), enc.rotate(x0, p0)]
print(json.dumps({"d1": [sorted(d.id for d in o.devices()) for o in on_d1],
                  "d0": [sorted(d.id for d in o.devices()) for o in on_d0],
                  "equal": [bool(np.array_equal(np.asarray(o), w))
                            for o, w in zip(on_d1 + on_d0, want + want)]}))
"""


def test_tables_of_uncommitted_inputs_stay_with_their_device() -> None:
    """Only an uncommitted input on the first device, with no default device set, makes its
    arrays uncommitted (they are cached as such): tables made while another device was the
    default are not served to inputs of the first one (each call would move them)."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2 "
           + os.environ.get("XLA_FLAGS", "")}
    proc = subprocess.run([sys.executable, "-c", _TWO_DEVICES], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"d1": [[1], [1]], "d0": [[0], [0]], "equal": [True] * 4}, got


OTHER_KINDS = [
    ("sinusoidal", {"dim": 24}, lambda e, p, q, k, x: e.encode(q, dtype=x)),
    ("sinusoidal", {"dim": 24, "layout": "split"}, lambda e, p, q, k, x: e.encode(q * 0.37)),
    ("alibi", {"num_heads": 6}, lambda e, p, q, k, x: e.bias(q, k, dtype=x)),
    ("t5", {"num_heads": 3}, lambda e, p, q, k, x: e.bias(q, k, params=p, dtype=x)),
    ("shaw", {"max_distance": 9, "dim": 8}, lambda e, p, q, k, x: e.embed(q, k, params=p)),
    ("transformer-xl", {"dim": 16}, lambda e, p, q, k, x: e.embed(q, k, dtype=x)),
]


@pytest.mark.parametrize(("name", "options", "call"), OTHER_KINDS)
def test_other_kinds_compiled_give_the_bits_of_op_by_op_execution(
        name: str, options: dict[str, Any], call: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    jnp = pytest.importorskip("jax.numpy")
    rng = np.random.default_rng(4)
    enc = per.get_encoder(name, **options)
    params = enc.init(jnp, seed=1) if enc.learned else None
    q = jnp.asarray(rng.integers(0, 3000, size=(2, 7)))
    k = jnp.asarray(rng.integers(0, 3000, size=(2, 11)))
    dt = jnp.float64 if _x64() else jnp.float32
    taken = []
    real = _jax_eager.compiled_hook

    def spy(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        taken.append(out is not None)
        return out

    with monkeypatch.context() as m:
        m.setattr(_jax_eager, "compiled_hook", spy)
        new = np.asarray(call(enc, params, q, k, dt))
    assert taken == [True]  # the compiled program ran
    op_by_op(monkeypatch)
    old = np.asarray(call(per.get_encoder(name, **options), params, q, k, dt))
    assert new.dtype == old.dtype and new.shape == old.shape
    assert np.array_equal(new, old), float(np.max(np.abs(new - old)))


def _x64() -> bool:
    import jax

    return bool(jax.config.jax_enable_x64)


class LoopRope(RotaryEncoder):
    """A plugin whose hook reads values on the host (Python control flow on positions) and yet
    declares that it may be compiled: it cannot be traced, and must still work eagerly on JAX,
    as it always did."""

    name = "test-loop-rope"
    __slots__ = ()
    _compile_hook_eagerly = True  # wrongly: the hook reads values
    dim = per.Option(int, 8)

    def _rotary_dim(self) -> int:
        return int(self._values["dim"])

    def _half_cos_sin(self, positions: Any, *, ctx: Any, seq_len: int | None) -> tuple[Any, Any]:
        from peregistry.rope import cos_sin

        if float(ctx.xp.max(positions)) > 1e9:  # a value read: TracerConversionError under jit
            raise ValueError("too far")
        freqs = Frequencies.from_omega(10000.0 ** (-np.arange(0, self._rotary_dim(), 2)
                                                   / self._rotary_dim()))
        return cos_sin(positions, freqs, ctx=ctx)


def test_a_hook_that_cannot_be_traced_runs_eagerly() -> None:
    jnp = pytest.importorskip("jax.numpy")
    enc = LoopRope()
    x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 5, 8)), jnp.float32)
    pos = jnp.arange(5) + 3
    want = np.asarray(per.get_encoder("rotary", dim=8).rotate(x, pos))
    np.testing.assert_allclose(np.asarray(enc.rotate(x, pos)), want, rtol=0, atol=2e-6)
    assert (LoopRope, "_half_cos_sin") in _jax_eager.untraceable  # remembered: not traced again on every call
    with pytest.raises(ValueError, match="too far"):
        enc.rotate(x, pos + 2_000_000_000)


def test_a_new_shape_compiles_a_few_programs_not_one_per_operation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A first eager M-RoPE rotation of a new shape: at most 6 XLA compilations (the table,
    the rotation and a few conversions), against about 40 op by op."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    from jax import monitoring

    count = [0]

    def listen(event: str, duration: float, **kwargs: Any) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            count[0] += 1

    monitoring.register_event_duration_secs_listener(listen)
    try:
        rng = np.random.default_rng(0)

        def first_call(seq: int) -> int:
            enc = per.get_encoder("mrope", dim=40, sections=(6, 7, 7))
            x = jnp.asarray(rng.standard_normal((1, 2, seq, 40)), jnp.float32)
            pos = jnp.asarray(rng.integers(0, 100, size=(3, 1, 1, seq)))
            count[0] = 0
            enc.rotate(x, pos).block_until_ready()
            return count[0]

        compiled = first_call(13)
        op_by_op(monkeypatch)
        separately = first_call(14)
    finally:
        monitoring.unregister_event_duration_listener(listen)
    assert compiled <= 6, compiled
    assert separately >= 3 * compiled, (compiled, separately)


class GuardedRope(LoopRope):
    """A hook that checks values only when it can (eagerly) and skips the check under a trace,
    without declaring ``_compile_hook_eagerly`` itself: the declaration it inherits does not
    cover its own hook, which must keep running eagerly, so that the check still raises."""

    name = "test-guarded-rope"
    __slots__ = ()

    def _half_cos_sin(self, positions: Any, *, ctx: Any, seq_len: int | None) -> tuple[Any, Any]:
        from peregistry.rope import cos_sin

        if not ctx.backend.is_tracing(positions) and float(ctx.xp.max(positions)) > 1e9:
            raise ValueError("too far")
        freqs = Frequencies.from_omega(10000.0 ** (-np.arange(0, 8, 2) / 8))
        return cos_sin(positions, freqs, ctx=ctx)


def test_an_override_of_the_hook_must_declare_itself() -> None:
    jnp = pytest.importorskip("jax.numpy")
    enc = GuardedRope()
    x = jnp.ones((1, 3, 8), jnp.float32)
    enc.rotate(x, jnp.arange(3))
    with pytest.raises(ValueError, match="too far"):
        enc.rotate(x, jnp.arange(3) + 2_000_000_000)
    assert (GuardedRope, "_half_cos_sin") not in _jax_eager.untraceable


def test_concrete_inputs_closed_over_by_jax_jit() -> None:
    """Positions or params closed over by ``jax.jit`` are concrete inside its trace: the eager
    programs (compiled with their own options, which may not nest) give way to the enclosing
    trace, and the jitted results equal the eager ones (it raised ValueError before)."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    rng = np.random.default_rng(3)
    rot: Any = per.get_encoder("rotary", dim=8)
    mro: Any = per.get_encoder("mrope", dim=16, sections=(2, 3, 3))
    t5: Any = per.get_encoder("t5", num_heads=2)
    sin: Any = per.get_encoder("sinusoidal", dim=8)
    pos, ids = jnp.asarray(rng.integers(0, 900, 5)), jnp.asarray(rng.integers(0, 900, (3, 5)))
    x8, x16 = jnp.asarray(rng.standard_normal((2, 5, 8))), jnp.asarray(rng.standard_normal((2, 5, 16)))
    params, q = t5.init(jnp, seed=0), jnp.arange(4)
    cases = [
        (lambda x: rot.rotate(x, pos), x8, lambda: rot.rotate(x8, pos)),
        (lambda x: mro.rotate(x, ids), x16, lambda: mro.rotate(x16, ids)),
        (lambda k: t5.bias(q, k, params=params), jnp.arange(3),
         lambda: t5.bias(q, jnp.arange(3), params=params)),
        (lambda y: sin.encode(q) + y, jnp.float32(0), lambda: sin.encode(q)),
    ]
    for fn, arg, eager in cases:
        got, want = np.asarray(jax.jit(fn)(arg)), np.asarray(eager())
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=4 * np.finfo(want.dtype).eps)
