"""A ``rotate`` call whose arguments match a validated call's signature (the class, dtype, shape
and device of ``x`` and of the positions, or an int offset) skips the validation, which reads
none of the positions' values, and looks its tables up for the new values (issue 17: layer 0's
``q`` meets a new position ids tensor at every decoding step). On every selected backend: the
bits of a fresh encoder, every value-dependent check still made, any other call validated in
full, and a subclass that validates values itself sees every call.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS

import peregistry as per
from peregistry.encoders.rotary import Rotary
from peregistry.rope import Frequencies, MultiAxisRotary, cos_sin, inv_freq

OPTIONS: dict[str, dict[str, Any]] = {"rotary": {"dim": 16},
                                      "mrope": {"dim": 16, "sections": (2, 3, 3)}}


def _ids(name: str, values: Any) -> Any:
    values = np.asarray(values)
    return values if name == "rotary" else np.stack([values, values + 1, values + 2])


def _spy(enc: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The calls of ``enc._rotate_call`` (full validation) from now on."""
    seen: list[Any] = []
    real = type(enc)._rotate_call
    monkeypatch.setattr(type(enc), "_rotate_call",
                        lambda self, *a: (self is enc and seen.append(a)) or real(self, *a))
    return seen


@pytest.mark.parametrize("name", ["rotary", "mrope"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 1, 3)], ids=["decode", "batch"])
def test_new_positions_of_a_kept_signature_are_not_validated_again(
        backend: Any, name: str, shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    enc: Any = per.get_encoder(name, **OPTIONS[name])
    rng = np.random.default_rng(0)
    x = backend.from_numpy(rng.standard_normal((shape[0], 4, shape[2], 16)).astype(np.float32))
    enc.rotate(x, backend.from_numpy(_ids(name, rng.integers(0, 900, shape))))
    seen = _spy(enc, monkeypatch)
    for step in range(4):  # a new positions array every call, as a decoding loop makes them
        ids = _ids(name, rng.integers(0, 3000, shape))
        got = enc.rotate(x, backend.from_numpy(ids))
        want = per.get_encoder(name, **OPTIONS[name]).rotate(x, backend.from_numpy(ids))
        np.testing.assert_array_equal(backend.to_numpy(got), backend.to_numpy(want),
                                      err_msg=f"step {step}")
    assert seen == []


def test_numpy_positions_written_in_place_give_new_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """NumPy arrays carry no version: the signature is reused, the rows never are."""
    enc: Any = per.get_encoder("rotary", dim=16)
    x = np.random.default_rng(1).standard_normal((1, 4, 1, 16)).astype(np.float32)
    ids = np.array([[[5]]])
    first = enc.rotate(x, ids)
    seen = _spy(enc, monkeypatch)
    ids[...] = 700
    want = per.get_encoder("rotary", dim=16).rotate(x, np.full((1, 1, 1), 700))
    np.testing.assert_array_equal(enc.rotate(x, ids), want)
    assert not np.array_equal(enc.rotate(x, ids), first) and seen == []


def test_the_offset_range_is_still_checked(backend: Any) -> None:
    """The one value validation depends on: an int offset's range."""
    enc: Any = per.get_encoder("rotary", dim=8)
    x = backend.from_numpy(np.ones((1, 2, 3, 8), np.float32))
    enc.rotate(x, offset=5)
    enc.rotate(x, offset=6)
    with pytest.raises(ValueError, match=r"offset=9223372036854775806 .* would wrap"):
        enc.rotate(x, offset=2**63 - 2)
    with pytest.raises(ValueError, match=r"offset=-9223372036854775809"):
        enc.rotate(x, offset=-(2**63) - 1)


def test_any_other_signature_is_validated_in_full(backend: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    enc: Any = per.get_encoder("rotary", dim=8)
    x = backend.from_numpy(np.ones((1, 2, 3, 8), np.float32))
    enc.rotate(x, backend.from_numpy(np.arange(3)))
    seen = _spy(enc, monkeypatch)
    fresh = per.get_encoder("rotary", dim=8)
    for ids in (np.arange(3, dtype=np.int32), np.arange(3).reshape(1, 3), np.arange(3.0)):
        got = enc.rotate(x, backend.from_numpy(ids))
        np.testing.assert_array_equal(backend.to_numpy(got),
                                      backend.to_numpy(fresh.rotate(x, backend.from_numpy(ids))))
    with pytest.raises(TypeError, match="positions must have"):
        enc.rotate(x, backend.from_numpy(np.array([True, False, True])))
    with pytest.raises(TypeError, match="no learned parameters"):
        enc.rotate(x, backend.from_numpy(np.arange(3)), params={})
    with pytest.raises(ValueError, match="only used with positions=None"):
        enc.rotate(x, backend.from_numpy(np.arange(3)), offset=1)
    # int32 is its own signature, unless the backend holds int64 as int32 (JAX without x64)
    same = (backend.from_numpy(np.arange(3)).dtype
            == backend.from_numpy(np.arange(3, dtype=np.int32)).dtype)
    assert len(seen) == (5 if same else 6)


class BoundedRotary(Rotary):
    """A plugin that validates the positions' values: every call must reach it."""

    name = "test-bounded-rotary"

    def _positions(self, positions: Any, ctx: Any, what: str = "positions") -> Any:
        positions = super()._positions(positions, ctx, what)
        if int(ctx.xp.max(positions)) >= 100:
            raise ValueError(f"{self.name}: positions must be < 100")
        return positions


def test_a_subclass_validating_values_sees_every_call(backend: Any) -> None:
    enc = BoundedRotary(dim=8)
    x = backend.from_numpy(np.ones((1, 2, 3, 8), np.float32))
    for _ in range(2):
        enc.rotate(x, backend.from_numpy(np.arange(3)))
    with pytest.raises(ValueError, match="must be < 100"):
        enc.rotate(x, backend.from_numpy(np.arange(3) + 98))


@pytest.mark.parametrize("value", [-3, 2**22, 40])
def test_a_decode_position_beyond_the_table_falls_back(backend: Any, value: int) -> None:
    """The one-row read serves positions inside the position table; a negative position or
    one beyond the table's budget is computed, with a fresh encoder's bits."""
    enc: Any = per.get_encoder("rotary", dim=16)
    x = backend.from_numpy(np.random.default_rng(2).standard_normal((1, 4, 1, 16))
                           .astype(np.float32))
    for v in (5, 6, value, 7):
        ids = backend.from_numpy(np.full((1, 1, 1), v))
        want = per.get_encoder("rotary", dim=16).rotate(x, ids)
        np.testing.assert_array_equal(backend.to_numpy(enc.rotate(x, ids)),
                                      backend.to_numpy(want), err_msg=f"position {v}")


def test_clear_caches_ends_the_signatures(backend: Any,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    enc: Any = per.get_encoder("rotary", dim=8)
    x = backend.from_numpy(np.ones((1, 2, 3, 8), np.float32))
    enc.rotate(x, backend.from_numpy(np.arange(3)))
    seen = _spy(enc, monkeypatch)
    enc.rotate(x, backend.from_numpy(np.arange(3) + 1))
    per.rope.clear_caches()
    enc.rotate(x, backend.from_numpy(np.arange(3) + 2))
    assert len(seen) == 1


def test_decoding_in_inference_mode_keeps_nothing_training_cannot_use() -> None:
    torch = pytest.importorskip("torch")
    if "torch" not in BACKENDS:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
    enc: Any = per.get_encoder("rotary", dim=16)
    x = torch.randn(1, 4, 1, 16)
    with torch.inference_mode():
        for p in range(3):
            enc.rotate(x, torch.tensor([[[p]]]))
    xg = x.clone().requires_grad_(True)
    for p in (2, 3):  # the rows of position 2 were read last in inference mode
        out = enc.rotate(xg, torch.tensor([[[p]]]))
        out.sum().backward()
        assert xg.grad is not None
        want = per.get_encoder("rotary", dim=16).rotate(x, torch.tensor([[[p]]]))
        torch.testing.assert_close(out.detach(), want, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["mrope", "axial", "interleaved"])
def test_one_token_of_multi_axis_ids_reads_the_position_table(backend: Any, name: str) -> None:
    """One token's multi-axis ids: with every axis at p (text, while decoding) the tables are
    row p of the position table; with axes that differ (an image token) each pair's entry of
    the row of its axis's position. Both with the bits of computing them: the token rotated
    alone equals it rotated in a batch of two, whose tables are computed."""
    opts = {"mrope": OPTIONS["mrope"], "axial": {"dim": 16, "sections": (4, 4, 0)},
            "interleaved": {"dim": 16, "sections": (3, 3, 2), "interleaved": True}}[name]
    enc: Any = per.get_encoder("mrope", **opts)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 4, 1, 16)).astype(np.float32)
    other = rng.standard_normal((1, 4, 1, 16)).astype(np.float32)
    enc.rotate(backend.from_numpy(x), offset=1000)  # the position table exists
    for axes in ([7, 7, 7], [8, 3, 5], [9, 9, 9], [10, 10, 10], [11, 2, 2], [0, 1500, 4],
                 [12, 12, 12]):
        ids = np.array(axes).reshape(3, 1, 1)
        got = enc.rotate(backend.from_numpy(x), backend.from_numpy(ids))
        read = enc._table_cache.last_rows
        # (not on eager JAX, where computing one position's row costs less than slicing it)
        rows = len(set(axes)) == 1 and backend.name != "jax"
        assert (read is not None and read[0] == axes[0]) == rows, axes
        pair = np.concatenate([ids, np.full((3, 1, 1), 77)], axis=-1)
        both = per.get_encoder("mrope", **opts).rotate(
            backend.from_numpy(np.concatenate([x, other], axis=2)), backend.from_numpy(pair))
        np.testing.assert_array_equal(backend.to_numpy(got), backend.to_numpy(both)[..., :1, :],
                                      err_msg=str(axes))


def test_image_tokens_met_again_reuse_their_entries(
        backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An image token's entries of the position table are kept per position tuple, at most
    ``ENTRIES_KEPT`` (then dropped together), and stay right when the table grows: every
    token, met once or again, has the bits of a fresh computation. ``_column_axes`` depends on
    the options only and is asked once per encoder. ``clear_caches()`` ends them (their key
    holds the shared cache's generation): with the tables turned off, tokens are computed."""
    from peregistry.rope import _rows

    monkeypatch.setattr(_rows, "ENTRIES_KEPT", 3)
    enc: Any = per.get_encoder("mrope", **OPTIONS["mrope"])
    asked: list[Any] = []
    real = type(enc)._column_axes
    monkeypatch.setattr(type(enc), "_column_axes", lambda self: asked.append(self) or real(self))
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 4, 1, 16)).astype(np.float32)
    other = rng.standard_normal((1, 4, 1, 16)).astype(np.float32)
    enc.rotate(backend.from_numpy(x), offset=10)  # the position table exists
    tokens = [[8, 3, 5], [9, 2, 1], [8, 3, 5], [4, 6, 0], [7, 7, 1], [8, 3, 5], [3000, 5, 9],
              [9, 2, 1]]
    for axes in tokens:
        ids = np.array(axes).reshape(3, 1, 1)
        got = enc.rotate(backend.from_numpy(x), backend.from_numpy(ids))
        assert len(enc._table_cache.entries) <= 3
        pair = np.concatenate([ids, np.full((3, 1, 1), 77)], axis=-1)
        both = per.get_encoder("mrope", **OPTIONS["mrope"]).rotate(
            backend.from_numpy(np.concatenate([x, other], axis=2)), backend.from_numpy(pair))
        np.testing.assert_array_equal(backend.to_numpy(got), backend.to_numpy(both)[..., :1, :],
                                      err_msg=str(axes))
    if backend.name != "jax":  # (eager JAX computes one token: rows_pay_off)
        assert [a for a in asked if a is enc] == [enc]
        kept = dict(enc._table_cache.entries)
        assert kept  # and met again, a token reads the very index kept for it
        enc.rotate(backend.from_numpy(x), backend.from_numpy(np.array(tokens[-1]).reshape(3, 1, 1)))
        assert dict(enc._table_cache.entries) == kept
        assert all(enc._table_cache.entries[k] is v for k, v in kept.items())
        budget = per.rope.table_cache_bytes()[1]
        per.rope.set_table_cache_bytes(0)  # tables off: nothing kept is read
        try:
            enc._table_cache.entries.clear()
            again = enc.rotate(backend.from_numpy(x), backend.from_numpy(np.array(
                tokens[0]).reshape(3, 1, 1)))
            assert not enc._table_cache.entries
        finally:
            per.rope.set_table_cache_bytes(budget)
        first = per.get_encoder("mrope", **OPTIONS["mrope"]).rotate(
            backend.from_numpy(x), backend.from_numpy(np.array(tokens[0]).reshape(3, 1, 1)))
        np.testing.assert_array_equal(backend.to_numpy(again), backend.to_numpy(first))
        enc.rotate(backend.from_numpy(x), offset=10)
        enc.rotate(backend.from_numpy(x), backend.from_numpy(np.array(tokens[0]).reshape(3, 1, 1)))
        generation = per.rope._table_cache.SHARED.generation
        per.rope.clear_caches()
        assert per.rope._table_cache.SHARED.generation != generation
        enc.rotate(backend.from_numpy(x), offset=10)
        kept = dict(enc._table_cache.entries)
        enc.rotate(backend.from_numpy(x), backend.from_numpy(np.array(tokens[0]).reshape(3, 1, 1)))
        assert len(enc._table_cache.entries) == len(kept) + 1  # a new entry: the old not read


def test_image_token_entries_are_kept_per_dtype(backend: Any) -> None:
    """One token rotated in float32, then float64: each has the bits of a fresh encoder's."""
    dtypes = [np.float32] + ([np.float64] if backend.name != "jax" or _jax_x64() else [])
    enc: Any = per.get_encoder("mrope", **OPTIONS["mrope"])
    ids = np.array([40, 3, 9]).reshape(3, 1, 1)
    for _ in range(2):
        for dt in dtypes:
            x = np.random.default_rng(4).standard_normal((1, 4, 1, 16)).astype(dt)
            got = enc.rotate(backend.from_numpy(x), backend.from_numpy(ids))
            fresh = per.get_encoder("mrope", **OPTIONS["mrope"]).rotate(
                backend.from_numpy(x), backend.from_numpy(ids))
            np.testing.assert_array_equal(backend.to_numpy(got), backend.to_numpy(fresh))


def _jax_x64() -> bool:
    import jax

    return bool(jax.config.jax_enable_x64)


def test_image_token_entries_made_in_inference_mode_serve_training() -> None:
    torch = pytest.importorskip("torch")
    if "torch" not in BACKENDS:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
    enc: Any = per.get_encoder("mrope", **OPTIONS["mrope"])
    ids = torch.tensor([40, 3, 9]).reshape(3, 1, 1)
    x = torch.randn(1, 4, 1, 16)
    with torch.inference_mode():
        first = enc.rotate(x, ids)
    assert enc._table_cache.entries
    assert not any(t.is_inference() for v in enc._table_cache.entries.values() for t in v)
    xg = x.clone().requires_grad_(True)
    out = enc.rotate(xg, ids.clone())
    out.sum().backward()
    assert xg.grad is not None
    torch.testing.assert_close(out.detach(), first.clone(), rtol=0, atol=0)


def test_image_token_entries_are_kept_per_device() -> None:
    """array-api-strict has several devices whose arrays may not be combined: an image token's
    entries kept for one device are not used on another, and each device's result has the
    bits of a fresh computation."""
    if "array_api_strict" not in BACKENDS:
        pytest.skip("array_api_strict not selected by PEREGISTRY_BACKENDS")
    xp = pytest.importorskip("array_api_strict")
    devices = [xp.Device(name) for name in ("CPU_DEVICE", "device1", "device2")]
    enc: Any = per.get_encoder("mrope", **OPTIONS["mrope"])
    x = np.random.default_rng(2).standard_normal((1, 4, 1, 16)).astype(np.float32)
    ids = np.array([40, 3, 9]).reshape(3, 1, 1)
    for device in devices + devices:
        xd, pd = xp.asarray(x, device=device), xp.asarray(ids, device=device)
        enc.rotate(xd, offset=1)  # the position table of that device exists
        got = enc.rotate(xd, pd)
        assert got.device == device
        fresh = per.get_encoder("mrope", **OPTIONS["mrope"]).rotate(
            xp.asarray(np.concatenate([x, x], axis=2), device=device),
            xp.asarray(np.concatenate([ids, ids + 1], axis=-1), device=device))
        cpu = devices[0]
        np.testing.assert_array_equal(np.asarray(xp.asarray(got, device=cpu, copy=True)),
                                      np.asarray(xp.asarray(fresh, device=cpu,
                                                            copy=True))[..., :1, :])
    assert len(enc._table_cache.entries) == len(devices)


def test_multi_axis_tables_keep_the_pair_axis_contiguous() -> None:
    """The tables M-RoPE computes are (..., pairs) in order, the layout torch's C kernel takes
    (a pair-major layout made every M-RoPE rotation take the slower out= operations)."""
    torch = pytest.importorskip("torch")
    if "torch" not in BACKENDS:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
    enc: Any = per.get_encoder("mrope", **OPTIONS["mrope"])
    tables = enc.tables(torch.randint(0, 900, (3, 2, 7)))
    assert tables.cos.is_contiguous() and tables.sin.is_contiguous()
    enc.rotate(torch.randn(1, 4, 1, 16), offset=5)
    rows = enc._table_cache.last_rows[5]
    assert rows[0].stride()[-1] == 1 and rows[1].stride()[-1] == 1


def test_one_encoder_serving_two_frameworks_at_one_offset() -> None:
    """The remembered rows are per framework: the same offset asked by NumPy and then by
    array-api-strict (whose dtypes warn when compared with NumPy's) gives each its own rows."""
    xps = pytest.importorskip("array_api_strict")
    enc: Any = per.get_encoder("rotary", dim=8)
    x = np.random.default_rng(4).standard_normal((1, 2, 3, 8))
    for _ in range(2):
        a = enc.rotate(x.astype(np.float32), offset=5)
        b = enc.rotate(xps.asarray(x), offset=5)  # float64: another dtype, another framework
        c = enc.rotate(x.astype(np.float32), offset=6)
        d = enc.rotate(xps.asarray(x.astype(np.float32)), offset=6)
    assert isinstance(a, np.ndarray) and isinstance(c, np.ndarray)
    assert b.dtype == xps.float64 and d.dtype == xps.float32
    np.testing.assert_array_equal(np.asarray(d), c)
    fresh = per.get_encoder("rotary", dim=8)
    np.testing.assert_array_equal(np.asarray(b), np.asarray(fresh.rotate(xps.asarray(x), offset=5)))


@pytest.mark.parametrize("name", ["rotary", "mrope"])
def test_python_sequences_after_a_kept_signature(backend: Any, name: str) -> None:
    """Lists, tuples and ints are made arrays (and validated) on every call, whatever was
    remembered before (they have no dtype to compare with a kept signature)."""
    enc: Any = per.get_encoder(name, **OPTIONS[name])
    x = backend.from_numpy(np.ones((1, 2, 3, 16), np.float32))
    enc.rotate(x, offset=4)
    enc.rotate(x, backend.from_numpy(_ids(name, np.arange(3))))
    fresh: Any = per.get_encoder(name, **OPTIONS[name])
    seqs: list[Any] = ([[0, 1, 2], (0, 1, 2), 2] if name == "rotary"
                       else [_ids(name, np.arange(3)).tolist(), [[1], [2], [3]]])
    for seq in seqs:
        np.testing.assert_array_equal(backend.to_numpy(enc.rotate(x, seq)),
                                      backend.to_numpy(fresh.rotate(x, seq)), err_msg=str(seq))
    with pytest.raises(TypeError, match="positions must"):
        enc.rotate(x, [0.5, "a", 2] if name == "rotary" else [["a"]] * 3)


def test_compiled_calls_after_eager_ones_compile_once() -> None:
    """The memories are read only after the tracing test: a function compiled once is not
    compiled again because eager calls changed what the encoder remembers (Dynamo would guard
    on it)."""
    torch = pytest.importorskip("torch")
    if "torch" not in BACKENDS:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
    from torch._dynamo.testing import CompileCounter

    enc: Any = per.get_encoder("rotary", dim=16)
    q = torch.randn(1, 4, 1, 16)
    counter = CompileCounter()
    f = torch.compile(lambda x, pos: enc.rotate(x, pos), backend=counter, fullgraph=True)
    for step in range(6):
        enc.rotate(q, torch.tensor([[[step]]]))
        enc.rotate(q, offset=step)
        got = f(q, torch.tensor([[[step]]]))
        torch.testing.assert_close(got, enc.rotate(q, torch.tensor([[[step]]])), rtol=0,
                                   atol=0)
    assert counter.frame_count == 1


def test_jax_x64_switched_on_after_tables_were_made() -> None:
    """Tables made with JAX's x64 flag off (float32 angles, reduced) are not served once it is
    on: the result is that of a process that started with it (a fresh process each)."""
    pytest.importorskip("jax")
    if "jax" not in BACKENDS:
        pytest.skip("jax not selected by PEREGISTRY_BACKENDS")
    code = (
        "import sys, json, numpy as np, jax\n"
        "if sys.argv[1] == 'start': jax.config.update('jax_enable_x64', True)\n"
        "import jax.numpy as jnp, peregistry as per\n"
        "q = jnp.asarray(np.random.default_rng(0).standard_normal((1, 2, 3, 16)), jnp.float32)\n"
        "enc = per.get_encoder('rotary', dim=16)\n"
        "ids = jnp.asarray([[[900, 901, 902]]])\n"
        "if sys.argv[1] == 'switch':\n"
        "    enc.rotate(q, offset=900); enc.rotate(q, ids)\n"
        "    jax.config.update('jax_enable_x64', True)\n"
        "outs = [enc.rotate(q, offset=900), enc.rotate(q, ids)]\n"
        "print(json.dumps([np.asarray(o).tobytes().hex() for o in outs]))\n")
    got = []
    for mode in ("start", "switch"):
        out = subprocess.run([sys.executable, "-c", code, mode], capture_output=True,
                             text=True, check=False, timeout=600)
        assert out.returncode == 0, out.stderr
        got.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert got[0] == got[1]


class SumOfAxes(MultiAxisRotary):
    """A plugin whose every pair turns with the sum of two axes' positions (its own hook): an
    image token's tables are not entries of single-axis rows, and must be computed."""

    name = "test-sum-of-axes"
    dim = per.Option(int, 16, allowed="a positive multiple of 4",
                     check=lambda d: d > 0 and d % 4 == 0)
    num_axes = 2

    def _axis_frequencies(self, seq_len: int | None) -> tuple[Frequencies, ...]:
        half = Frequencies.from_omega(inv_freq(self._values["dim"] // 2))
        return (half, half)

    def _half_cos_sin(self, positions: Any, *, ctx: Any, seq_len: int | None) -> Any:
        freqs = Frequencies.from_omega(inv_freq(self._values["dim"]))
        return cos_sin(positions[0, ...] + positions[1, ...], freqs, ctx=ctx)


def test_a_plugin_mixing_axes_has_its_image_tokens_computed(backend: Any) -> None:
    enc = SumOfAxes()
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 4, 1, 16)).astype(np.float32)
    other = rng.standard_normal((1, 4, 1, 16)).astype(np.float32)
    enc.rotate(backend.from_numpy(x), offset=100)  # the position table exists
    for axes in ([3, 9], [4, 4], [5, 11]):
        ids = np.array(axes).reshape(2, 1, 1)
        got = enc.rotate(backend.from_numpy(x), backend.from_numpy(ids))
        pair = np.concatenate([ids, np.full((2, 1, 1), 40)], axis=-1)
        both = SumOfAxes().rotate(backend.from_numpy(np.concatenate([x, other], axis=2)),
                                  backend.from_numpy(pair))
        np.testing.assert_array_equal(backend.to_numpy(got), backend.to_numpy(both)[..., :1, :],
                                      err_msg=str(axes))
