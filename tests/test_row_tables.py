"""``sinusoidal`` at integer positions and ``transformer-xl`` at integer distances read rows of a
table kept across eager calls (peregistry/encoders/_row_tables.py, issue 17: the cost of small
calls), with the bits of computing them: checked against the computation itself (the tables
turned off), on every selected backend, through growth, negative distances, batches, every
output dtype, and the cases the tables must not serve."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS

import peregistry as per
from peregistry.encoders import _row_tables
from peregistry.rope import clear_caches
from peregistry.rope._table_cache import SHARED


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
        assert bool(_row_tables_kept()) == (backend.name != "jax")  # (JAX: one program)
        assert got.dtype == want.dtype and got.shape == (*want.shape[:-1], 24)
        np.testing.assert_array_equal(got, want, err_msg=str(i))


def test_transformer_xl_rows_have_the_bits_of_computing(backend: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
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
        assert bool(_row_tables_kept()) == (backend.name != "jax")  # (JAX: one program)
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
