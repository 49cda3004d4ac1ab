"""The shortcuts that cut the fixed cost of small calls (issue 17) give the same bits as the
computation they replace, on every backend (``PEREGISTRY_BACKENDS``).

* ``transformer-xl`` at integer positions computes one angle per distance and gathers; the
  same positions as floats take the direct path (one angle per pair), and ``q - k`` is exact in
  either, so the two must agree bit for bit.
* ``rotate`` remembers the rows of its last call (by offset, and by the positions array where
  the framework says when an array changes: torch's version counter, JAX's immutability): a
  positions tensor written in place, or caches cleared, must never give stale rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS

import peregistry as per


def _as_numpy(backend: Any, a: Any) -> Any:
    return backend.to_numpy(a).astype(np.float64)


@pytest.mark.parametrize("dim", [2, 6, 128])
@pytest.mark.parametrize(("q", "k"), [
    (np.arange(37), np.arange(50)),                      # a table of 86 distances, 1850 pairs
    (np.arange(64) + 1000, np.arange(64) + 990),         # shifted
    (np.random.default_rng(0).integers(0, 10, (2, 32)), np.arange(40)),  # batched, repeats
    (np.arange(0, 3200, 100), np.arange(0, 3200, 100)),  # far apart: no table (direct path)
])
def test_transformer_xl_by_distance_bit_for_bit(backend: Any, dim: int, q: Any, k: Any) -> None:
    enc: Any = per.get_encoder("transformer-xl", dim=dim)
    floats = backend.float_dtypes()
    wide = floats.get("float64", floats["float32"])
    for name in [n for n in ("float32", "bfloat16", "float16") if n in floats]:
        dt = floats[name]
        ints = enc.embed(backend.from_numpy(q), backend.from_numpy(k), dtype=dt)
        direct = enc.embed(backend.from_numpy(q, dtype=wide), backend.from_numpy(k, dtype=wide),
                           dtype=dt)
        assert ints.dtype == dt
        assert tuple(ints.shape) == (*q.shape, k.shape[-1], dim)
        np.testing.assert_array_equal(_as_numpy(backend, ints), _as_numpy(backend, direct),
                                      err_msg=f"{name}, q={q.tolist()}, k={k.tolist()}")


def test_rotate_after_positions_written_in_place() -> None:
    torch = pytest.importorskip("torch")
    if "torch" not in BACKENDS:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
    enc: Any = per.get_encoder("rotary", dim=16)
    x = torch.randn(2, 4, 1, 16)
    ids = torch.tensor([[[5]], [[9]]])
    first = enc.rotate(x, ids)
    ids.fill_(7)  # in place: same object, new values
    again = enc.rotate(x, ids)
    torch.testing.assert_close(again, enc.rotate(x, torch.full((2, 1, 1), 7)), rtol=0, atol=0)
    assert not torch.equal(first, again)
    one = torch.tensor([3])
    a = enc.rotate(x, one)
    one += 1
    torch.testing.assert_close(enc.rotate(x, one), enc.rotate(x, offset=4), rtol=0, atol=0)
    assert not torch.equal(a, enc.rotate(x, one))


def test_rotate_memo_follows_offset_dtype_and_clear(backend: Any) -> None:
    from peregistry.rope import clear_caches

    enc: Any = per.get_encoder("rotary", dim=16)
    rng = np.random.default_rng(0)
    x = backend.from_numpy(rng.standard_normal((1, 2, 3, 16)).astype(np.float32))
    ref = backend.to_numpy(enc.rotate(x, offset=4))
    for offset in (4, 5, 4):  # the memo holds one offset: each change must be seen
        got = backend.to_numpy(enc.rotate(x, offset=offset))
        want = backend.to_numpy(enc.rotate(x, backend.from_numpy(np.arange(offset, offset + 3))))
        np.testing.assert_array_equal(got, want)
    clear_caches()
    np.testing.assert_array_equal(backend.to_numpy(enc.rotate(x, offset=4)), ref)
    wide = backend.float_dtypes().get("float64")
    if wide is not None:  # another dtype at the same offset: float64 tables, not float32 rows
        x64 = backend.from_numpy(rng.standard_normal((1, 2, 3, 16)))
        out = enc.rotate(x64, offset=4)
        assert out.dtype == wide
        ref64 = enc.rotate(x64, backend.from_numpy(np.arange(4, 7)))
        np.testing.assert_array_equal(backend.to_numpy(out), backend.to_numpy(ref64))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_torch_pure_path_same_bits_on_any_thread_count(threads: int, dtype: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the C kernel, torch rotates in cache blocks on one thread and in whole-tensor
    ops on several (fewer parallel regions on a shared CPU): both are the generic rotation."""
    torch = pytest.importorskip("torch")
    if "torch" not in BACKENDS:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
    from peregistry.rope import _kernel
    from peregistry.rope._torch import BLOCK_ELEMENTS

    monkeypatch.setattr(_kernel.KERNEL, "module", None)  # the pure-torch path
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        enc: Any = per.get_encoder("rotary", dim=64)
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(2, 4, 2 * BLOCK_ELEMENTS // (4 * 64), 64, generator=gen)
        x = x.to(getattr(torch, dtype))
        pos = torch.randint(0, 5000, (x.shape[-2],), generator=gen)
        fast = enc.rotate(x, pos)
        generic = enc._rotate(x, pos, offset=0, params=None, seq_len=None, native=False)
    finally:
        torch.set_num_threads(before)
    assert fast.dtype == x.dtype
    assert torch.equal(fast, generic)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("shape", [(), (1,), (5,), (2, 1, 3)])
def test_cos_sin_from_the_position_table_bit_for_bit(backend: Any, layout: str,
                                                     shape: tuple[int, ...]) -> None:
    """Eager ``cos_sin`` at integer positions reads rows of the position table (float32 and
    float64 outputs); they equal the computation ``cos_sin`` does at real-valued positions (the
    same values, which the table never serves)."""
    enc: Any = per.get_encoder("rotary", dim=16, rotary_dim=12, layout=layout)
    ids = np.random.default_rng(1).integers(0, 3000, size=shape)
    for name, dt in backend.float_dtypes().items():
        cos, sin = enc.cos_sin(backend.from_numpy(ids), dtype=dt)
        fc, fs = enc.cos_sin(backend.from_numpy(ids, dtype=backend.wide_float_dtype()), dtype=dt)
        assert cos.dtype == dt and tuple(cos.shape) == (*shape, 12), name
        np.testing.assert_array_equal(_as_numpy(backend, cos), _as_numpy(backend, fc), name)
        np.testing.assert_array_equal(_as_numpy(backend, sin), _as_numpy(backend, fs), name)


def test_t5_bucket_table_made_in_inference_mode_is_not_kept() -> None:
    """t5 keeps its bucket-index array per device in eager mode; one made under
    torch.inference_mode() is not kept, so that a later training call can save its index for
    backward (autograd refuses inference tensors)."""
    torch = pytest.importorskip("torch")
    if "torch" not in BACKENDS:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
    enc: Any = per.get_encoder("t5", num_heads=2)
    params = enc.init(torch, dtype=torch.float32)
    pos = torch.arange(6)
    with torch.inference_mode():
        frozen = enc.bias(pos, pos, params=params)
    table = params["table"].detach().requires_grad_(True)
    out = enc.bias(pos, pos, params={"table": table})
    out.sum().backward()
    assert table.grad is not None and torch.equal(out.detach(), frozen)
    again = enc.bias(pos, pos, params={"table": table})  # served by the kept array
    assert torch.equal(again, out)


def test_rotate_repeated_call_memo_sees_every_change(backend: Any) -> None:
    """A call like the last one but for x's values reuses its validation and tables; any other
    difference (x's dtype or shape, the offset, the positions object, seq_len, the class of x)
    goes the full way, with its own result and its own errors."""
    enc: Any = per.get_encoder("rotary", dim=16)
    rng = np.random.default_rng(0)

    def arr(shape: tuple[int, ...], dtype: str = "float32") -> Any:
        return backend.from_numpy(rng.standard_normal(shape).astype(np.float32),
                                  dtype=backend.float_dtypes()[dtype])

    def ref(x: Any, pos: Any) -> Any:
        return backend.to_numpy(enc._rotate(x, pos, offset=0, params=None, seq_len=None,
                                            native=False))

    x1, x2 = arr((1, 2, 3, 16)), arr((1, 2, 3, 16))
    for off in (4, 4, 5, 5, 4):
        for x in (x1, x2):
            want = ref(x, backend.from_numpy(np.arange(off, off + 3)))
            np.testing.assert_array_equal(backend.to_numpy(enc.rotate(x, offset=off)), want)
    ids = backend.from_numpy(np.array([7, 1, 30]))
    for x in (x1, x2, x1):
        np.testing.assert_array_equal(backend.to_numpy(enc.rotate(x, ids)), ref(x, ids))
    other = backend.from_numpy(np.array([7, 1, 31]))  # another object: its own rows
    np.testing.assert_array_equal(backend.to_numpy(enc.rotate(x1, other)), ref(x1, other))
    x3 = arr((1, 2, 5, 16))  # another shape: positions of 3 do not broadcast over 5
    with pytest.raises(ValueError, match="broadcast"):
        enc.rotate(x3, other)
    with pytest.raises(ValueError, match="only used with positions=None"):
        enc.rotate(x1, other, offset=2)
    with pytest.raises(ValueError, match=r"x.shape\[-1\] should be dim=16"):
        enc.rotate(arr((1, 2, 3, 8)), offset=4)
    if "float64" in backend.float_dtypes():
        x64 = arr((1, 2, 3, 16), "float64")
        out = enc.rotate(x64, other)
        assert out.dtype == x64.dtype
        np.testing.assert_array_equal(backend.to_numpy(out), ref(x64, other))


@pytest.mark.parametrize("features", ["first", "last"])
def test_a_remembered_call_rotates_the_same_features(backend: Any, features: str) -> None:
    """The repeated-call shortcut must apply the encoder's whole rotation: with
    rotary_features="last" (DeepSeek-V4), the last rotary_dim features turn and the first pass
    through, on the first call and on the remembered ones."""
    enc: Any = per.get_encoder("rotary", dim=16, rotary_dim=8, rotary_features=features,
                               direction="negative")
    rng = np.random.default_rng(1)
    x = backend.from_numpy(rng.standard_normal((2, 5, 16)).astype(np.float32))
    pos = backend.from_numpy(np.arange(5) + 3)
    outs = [backend.to_numpy(enc.rotate(x, pos)) for _ in range(3)]
    outs += [backend.to_numpy(enc.rotate(x, offset=3)) for _ in range(3)]
    for out in outs[1:]:
        np.testing.assert_array_equal(out, outs[0])
    kept = slice(0, 8) if features == "last" else slice(8, 16)
    np.testing.assert_array_equal(outs[0][..., kept], backend.to_numpy(x)[..., kept])
    assert np.abs(outs[0] - backend.to_numpy(x)).max() > 0.1


@pytest.mark.parametrize("name", ["rotary", "mrope"])
def test_k_after_q_with_fewer_heads_reuses_the_tables(backend: Any, name: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """k after q at the same positions (grouped-query attention: fewer heads) skips the
    validation and lookup as a repeated call does, with a fresh encoder's bits; where the
    tables would not broadcast into the new x, the call is validated and fails as always."""
    opts: dict[str, Any] = {"dim": 16} if name == "rotary" else {"dim": 16, "sections": (2, 3, 3)}
    enc: Any = per.get_encoder(name, **opts)
    rng = np.random.default_rng(2)
    q = backend.from_numpy(rng.standard_normal((2, 4, 5, 16)).astype(np.float32))
    k = backend.from_numpy(rng.standard_normal((2, 2, 5, 16)).astype(np.float32))
    ids = rng.integers(0, 900, (2, 1, 5))
    pos = backend.from_numpy(ids if name == "rotary" else np.stack([ids, ids + 1, ids + 2]))
    enc.rotate(q, pos)
    validated: list[Any] = []
    real = type(enc)._rotate_call
    monkeypatch.setattr(type(enc), "_rotate_call",
                        lambda self, *a: (self is enc and validated.append(a)) or real(self, *a))
    got = enc.rotate(k, pos)
    # served by the remembered call of q where positions carry a values token (torch's
    # version counter, JAX's immutability); NumPy arrays may be written unseen: validated
    remembers = backend.name in ("torch", "jax")
    assert len(validated) == (0 if remembers else 1)
    want = per.get_encoder(name, **opts).rotate(k, pos)
    np.testing.assert_array_equal(backend.to_numpy(got), backend.to_numpy(want))
    wide_pos = backend.from_numpy(rng.integers(0, 900, (2, 4, 5)) if name == "rotary"
                                  else rng.integers(0, 900, (3, 2, 4, 5)))
    enc.rotate(q, wide_pos)  # tables (2, 4, 5, half): no broadcast into k's (2, 2, 5)
    with pytest.raises(ValueError, match="do not broadcast"):
        enc.rotate(k, wide_pos)
    assert len(validated) == (2 if remembers else 3)
