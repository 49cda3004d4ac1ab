"""``sinusoidal`` at integer positions and ``transformer-xl`` at integer distances read rows of a
table kept across eager calls (peregistry/encoders/_row_tables.py, issue 17: the cost of small
calls), with the bits of computing them: checked against the computation itself (the tables
turned off), on every selected backend, through growth, negative distances, batches, every
output dtype, and the cases the tables must not serve."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS

import peregistry as per
from peregistry.encoders import _row_tables
from peregistry.rope import clear_caches
from peregistry.rope._table_cache import SHARED


def _gathers(backend: Any) -> None:
    """Skip on JAX, which computes instead of gathering rows (one compiled program; no table
    is kept there: test_what_the_tables_do_not_serve), so both sides would be computed."""
    if backend.name == "jax":
        pytest.skip("JAX computes rows (one compiled program): no table to compare")


def _row_tables_kept() -> list[Any]:
    return [k for k in list(SHARED._entries) if k[0][0] == "rows"]


def _computed(monkeypatch: pytest.MonkeyPatch, fn: Any) -> np.ndarray[Any, Any]:
    """``fn()`` with no table kept (every row computed)."""
    clear_caches()
    with monkeypatch.context() as m:
        m.setattr(_row_tables, "ROW_TABLE_BYTES", 0)
        assert not _row_tables_kept()
        return fn()  # type: ignore[no-any-return]


def _dtypes(backend: Any) -> list[str | None]:
    """The output dtypes of the backend (float64 on JAX only with x64)."""
    out: list[str | None] = [None, "float32"]
    if backend.name != "jax" or _x64():
        out.append("float64")
    if backend.name != "array_api_strict":  # (which has no 16-bit floats)
        out.append("float16")
    if backend.name in ("torch", "jax"):
        out.append("bfloat16")
    return out


@pytest.mark.parametrize("layout", ["interleaved", "split"])
def test_sinusoidal_rows_have_the_bits_of_computing(backend: Any, layout: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _gathers(backend)
    clear_caches()
    enc: Any = per.get_encoder("sinusoidal", dim=24, layout=layout)
    rng = np.random.default_rng(4)
    sets = [np.arange(8), rng.integers(0, 1000, size=(2, 3, 5)), np.array([3000, 1, 2047]),
            np.arange(8).astype(np.int32), np.array([0])]
    calls = [(lambda pos=pos, dtype=dtype: backend.to_numpy(
        enc.encode(backend.from_numpy(pos), dtype=dtype))) for dtype in _dtypes(backend)
        for pos in sets]
    wants = [_computed(monkeypatch, run) for run in calls]
    clear_caches()  # one table per dtype from here on, grown as the positions need
    for i, (run, want) in enumerate(zip(calls, wants, strict=True)):
        got = run()
        assert _row_tables_kept()
        assert got.dtype == want.dtype and got.shape == (*want.shape[:-1], 24)
        np.testing.assert_array_equal(got, want, err_msg=str(i))


def test_transformer_xl_rows_have_the_bits_of_computing(backend: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _gathers(backend)
    clear_caches()
    enc: Any = per.get_encoder("transformer-xl", dim=16)
    rng = np.random.default_rng(5)
    pairs = [(np.arange(8), None), (np.arange(5) + 100, np.arange(7)),
             (rng.integers(0, 3000, size=(2, 4)), rng.integers(0, 3000, size=(2, 6))),
             (np.array([0, 1]), np.array([2500, 1, 0])),
             (np.arange(3).astype(np.int32), np.arange(4).astype(np.int32))]
    def call(q: Any, k: Any, dtype: Any) -> Any:
        qa = backend.from_numpy(q)
        ka = qa if k is None else backend.from_numpy(k)  # q is k: self-attention
        return backend.to_numpy(enc.embed(qa, ka, dtype=dtype))

    calls = [(lambda q=q, k=k, dtype=dtype: call(q, k, dtype)) for dtype in _dtypes(backend)
             for q, k in pairs]
    wants = [_computed(monkeypatch, run) for run in calls]
    clear_caches()  # one table per dtype from here on, grown as the distances need
    for i, (run, want) in enumerate(zip(calls, wants, strict=True)):
        got = run()
        assert _row_tables_kept()
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want, err_msg=str(i))


def test_what_the_tables_do_not_serve(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative positions, positions far out (the table would be too large: nothing that size
    is made), real positions: computed; clear_caches drops the tables."""
    clear_caches()
    enc: Any = per.get_encoder("sinusoidal", dim=16)
    for pos in (np.array([-3, 4]), np.array([2**22, 5]), np.array([0.5, 2.0])):
        def run(pos: Any = pos) -> Any:
            return backend.to_numpy(enc.encode(backend.from_numpy(pos)))
        np.testing.assert_array_equal(run(), _computed(monkeypatch, run))
        assert not _row_tables_kept()
        assert SHARED.nbytes <= _row_tables.ROW_TABLE_BYTES
    enc.encode(backend.from_numpy(np.arange(4)))
    assert bool(_row_tables_kept()) == (backend.name != "jax")
    clear_caches()
    assert not _row_tables_kept()
    budget = SHARED.budget
    per.rope.set_table_cache_bytes(0)  # tables off: computed, nothing built per call
    try:
        built: list[Any] = []
        real = type(enc)._computed
        monkeypatch.setattr(type(enc), "_computed",
                            lambda self, p, ctx: built.append(p.shape) or real(self, p, ctx=ctx))
        enc.encode(backend.from_numpy(np.arange(4)))
        assert not _row_tables_kept()
        if backend.name != "jax":  # (where the hook runs compiled, traced once per shape)
            assert built == [(4,)]
    finally:
        per.rope.set_table_cache_bytes(budget)


def test_rows_made_in_inference_mode_serve_training() -> None:
    """A table first needed inside torch.inference_mode is made outside it (an inference
    tensor could not be used by later calls with autograd on)."""
    torch = pytest.importorskip("torch")
    if "torch" not in BACKENDS:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
    clear_caches()
    enc: Any = per.get_encoder("transformer-xl", dim=16)
    q = torch.arange(6)
    with torch.inference_mode():
        first = enc.embed(q, q)
    (key,) = _row_tables_kept()
    assert not SHARED.get(key)[0].is_inference()
    again = enc.embed(q, q)
    assert not again.is_inference()
    torch.testing.assert_close(again, first.clone(), rtol=0, atol=0)


def _x64() -> bool:
    try:
        import jax
    except ImportError:
        return False
    return bool(jax.config.jax_enable_x64)


def test_rows_are_served_from_the_kept_table(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a table reaches the positions, calls compute nothing: no row of the table, no
    angle; a position beyond it grows the table once."""
    _gathers(backend)
    clear_caches()
    sin_: Any = per.get_encoder("sinusoidal", dim=8)
    txl: Any = per.get_encoder("transformer-xl", dim=8)
    computed: list[Any] = []
    real_s, real_t = type(sin_)._computed, type(txl)._sin_cos
    monkeypatch.setattr(type(sin_), "_computed",
                        lambda self, p, ctx: computed.append(p.shape) or real_s(self, p, ctx=ctx))
    monkeypatch.setattr(type(txl), "_sin_cos",
                        lambda self, r, ctx: computed.append(r.shape) or real_t(self, r, ctx=ctx))
    a = backend.from_numpy
    sin_.encode(a(np.arange(5)))
    txl.embed(a(np.arange(5)), a(np.arange(7)))
    assert computed == [(1024,), (1024, 1)]  # the two tables, nothing per call
    for i in range(3):
        sin_.encode(a(np.arange(5) + 100 * i))
        txl.embed(a(np.arange(3) * i), a(np.arange(9)))
    assert len(computed) == 2
    sin_.encode(a(np.array([1500])))  # beyond 1024 positions: grown once, to 2048
    txl.embed(a(np.array([700])), a(np.array([-700, -690])))  # distance 1400: 4096 rows
    sin_.encode(a(np.array([2000])))
    assert computed[2:] == [(2048,), (4096, 1)]


def _step_tables() -> list[Any]:
    return [k for k in list(SHARED._entries) if k[0][0] == "step rows"]


def test_decode_steps_copy_slices_of_one_table(backend: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """transformer-xl's decode steps (one query against consecutive keys) slice one table of
    rows by distance, made once: what they return is their own (writing into it changes no
    later call); with no table (tables off, too large) they compute the same bits."""
    if backend.name not in ("numpy", "torch"):
        pytest.skip(f"positions are not read on {backend.name}: nothing kept")
    clear_caches()
    enc: Any = per.get_encoder("transformer-xl", dim=8)
    computed: list[Any] = []
    real = type(enc)._sin_cos
    monkeypatch.setattr(type(enc), "_sin_cos",
                        lambda self, r, ctx: computed.append(r.shape) or real(self, r, ctx=ctx))
    a = backend.from_numpy
    steps = [(np.array([t]), np.arange(t + 1)) for t in (0, 5, 6, 40)]
    steps += [(np.array([4096]), np.arange(3)), (np.array([0]), np.arange(4094, 4097))]  # edges
    wants = [_computed(monkeypatch, lambda q=q, k=k: backend.to_numpy(enc.embed(a(q), a(k))))
             for q, k in steps]
    computed.clear()
    clear_caches()
    for (q, k), want in zip(steps, wants, strict=True):
        out = enc.embed(a(q), a(k))
        np.testing.assert_array_equal(backend.to_numpy(out), want)
        out[...] = 7.0  # the caller's own array
        np.testing.assert_array_equal(backend.to_numpy(enc.embed(a(q), a(k))), want)
    # 1024 distances each way, grown once to STEP_REACH by the steps at the edges
    assert computed == [(2049, 1), (2 * _row_tables.STEP_REACH + 1, 1)]
    assert len(_step_tables()) == 1
    clear_caches()
    budget = SHARED.budget
    per.rope.set_table_cache_bytes(0)
    try:
        np.testing.assert_array_equal(backend.to_numpy(enc.embed(a(steps[1][0]), a(steps[1][1]))),
                                      wants[1])
        assert not _step_tables()
    finally:
        per.rope.set_table_cache_bytes(budget)
    monkeypatch.setattr(_row_tables, "ROW_TABLE_BYTES", 2049 * 8 * 8 - 1)  # one byte short
    np.testing.assert_array_equal(backend.to_numpy(enc.embed(a(steps[2][0]), a(steps[2][1]))),
                                  wants[2])
    assert not _step_tables()


def test_a_zero_dimensional_position_gets_an_array_of_its_own() -> None:
    """torch indexes a table with a 0-d tensor as with an int (a view of the table): such
    positions are computed, and writing into the result changes nothing kept."""
    torch = pytest.importorskip("torch")
    if "torch" not in BACKENDS:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
    clear_caches()
    enc: Any = per.get_encoder("sinusoidal", dim=8)
    want = enc.encode(torch.tensor([3, 4]), dtype=torch.float64)
    out = enc.encode(torch.tensor(3), dtype=torch.float64)
    out.fill_(7.0)
    torch.testing.assert_close(enc.encode(torch.tensor([3, 4]), dtype=torch.float64), want,
                               rtol=0, atol=0)


def test_torch_jit_trace_reads_no_values() -> None:
    """Under ``torch.jit.trace`` values are not read (they would be baked into the trace as
    constants, and a table with them): the traced function serves other positions."""
    torch = pytest.importorskip("torch")
    if "torch" not in BACKENDS:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
    clear_caches()
    sin_: Any = per.get_encoder("sinusoidal", dim=8)
    txl: Any = per.get_encoder("transformer-xl", dim=8)

    def both(p: Any) -> Any:
        return sin_.encode(p).sum() + txl.embed(p, p).sum()

    with warnings.catch_warnings():  # (deprecated in favour of torch.compile / export, which
        warnings.simplefilter("ignore", DeprecationWarning)  # models exported for ONNX use)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # (shapes read: fixed here)
        traced = torch.jit.trace(both, (torch.arange(8),), check_trace=False)
    for p in (torch.arange(8), torch.arange(8) + 2990, torch.arange(8) * 300):
        torch.testing.assert_close(traced(p), both(p), rtol=0, atol=0)


def test_a_subclass_with_its_own_frequencies_gets_them_from_the_table(
        backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from peregistry.encoders.relative import TransformerXL
    from peregistry.encoders.sinusoidal import sinusoidal_frequencies

    class SlowXL(TransformerXL):
        name = "test-slow-xl"
        __slots__ = ()

        @property
        def frequencies(self) -> Any:
            return sinusoidal_frequencies(int(self._values["dim"]), 500.0)

    clear_caches()
    enc = SlowXL(dim=8)
    q = backend.from_numpy(np.arange(6))

    def run() -> Any:
        return backend.to_numpy(enc.embed(q, q))

    got = run()
    np.testing.assert_array_equal(got, _computed(monkeypatch, run))
    assert not np.array_equal(got, backend.to_numpy(per.get_encoder("transformer-xl", dim=8)
                                                    .embed(q, q)))
