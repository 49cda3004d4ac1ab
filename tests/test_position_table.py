"""The eager table of positions of rotary encoders, kept in the one store of tables
(peregistry/rope/_tables.py): decoding at increasing offsets (and explicit integer position ids)
reads rows of one table instead of recomputing trigonometry, with results equal to a fresh
computation, on every selected backend."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import peregistry as per
from peregistry.rope import RotaryEncoder


@pytest.fixture(autouse=True)
def _no_shared_tables() -> Any:
    """Position tables are shared by equal encoders of the process: start each test without."""
    from peregistry.rope._tables import STORE

    STORE.clear()
    yield
    STORE.clear()


def kept_tables(enc: Any) -> list[Any]:
    """The tables of positions of ``enc`` (and every equal encoder) in the store."""
    from peregistry.rope._tables import STORE

    return [v for k, (v, _) in list(STORE._entries.items())
            if k[0] == "rotary positions" and k[1] is type(enc) and k[2] == enc._key]


def _x(backend: Any, shape: tuple[int, ...], seed: int = 0) -> Any:
    return backend.from_numpy(np.random.default_rng(seed).standard_normal(shape),
                              dtype=backend.float_dtypes()["float32"])


def _fresh(enc: Any, x: Any, positions: np.ndarray, backend: Any) -> Any:
    """Rotation with the tables computed from scratch: real-valued positions never use the
    position table (only integer ones index it)."""
    pos = backend.from_numpy(positions.astype(np.float64),
                             dtype=backend.float_dtypes()["float32"])
    return enc.rotate(x, pos)


@pytest.mark.parametrize("opts", [
    {"dim": 16},
    {"dim": 16, "layout": "interleaved", "rotary_dim": 8},
    {"dim": 16, "scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}},
])
def test_decode_offsets_equal_fresh_tables(backend: Any, opts: dict[str, Any]) -> None:
    enc = per.get_encoder("rotary", **opts)
    x = _x(backend, (2, 3, 1, 16))
    for offset in (0, 5, 1023, 1024, 3000, 70000):  # crossing growth points of the table
        got = backend.to_numpy(enc.rotate(x, offset=offset))
        want = backend.to_numpy(_fresh(enc, x, np.array([offset]), backend))
        np.testing.assert_array_equal(got, want)
    assert kept_tables(enc), "the position table was not used"


def test_explicit_integer_positions_gather_rows(backend: Any) -> None:
    enc = per.get_encoder("rotary", dim=16)
    x = _x(backend, (2, 3, 5, 16))
    ids = np.array([[[0, 7, 4095, 4096, 9000]], [[3, 2, 1, 0, 5]]])  # (2, 1, 5), per batch
    got = backend.to_numpy(enc.rotate(x, backend.from_numpy(ids)))
    np.testing.assert_array_equal(got, backend.to_numpy(_fresh(enc, x, ids, backend)))
    assert kept_tables(enc)


def test_negative_and_huge_positions_are_computed(backend: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of the table's range (negative, or past its byte budget): computed, same values."""
    monkeypatch.setattr(RotaryEncoder, "_POSITION_TABLE_BYTES", 2 * 2048 * 8 * 4)
    enc = per.get_encoder("rotary", dim=16)
    x = _x(backend, (1, 2, 3, 16))
    ids = np.array([-5, 10, 3000])  # 3000 needs 4096 rows: over the budget of 2048
    got = backend.to_numpy(enc.rotate(x, backend.from_numpy(ids)))
    np.testing.assert_array_equal(got, backend.to_numpy(_fresh(enc, x, ids, backend)))
    got = backend.to_numpy(enc.rotate(x, offset=5000))
    np.testing.assert_array_equal(got, backend.to_numpy(
        _fresh(enc, x, np.arange(5000, 5003), backend)))
    assert not kept_tables(enc)
    enc.rotate(x, offset=7)
    assert kept_tables(enc)  # in range again: the table is used


def test_sequence_length_dependent_scaling_has_no_position_table(backend: Any) -> None:
    enc = per.get_encoder("rotary", dim=16, scaling={
        "type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64})
    x = _x(backend, (1, 2, 1, 16))
    a = backend.to_numpy(enc.rotate(x, offset=10))
    b = backend.to_numpy(enc.rotate(x, offset=200))  # past 64: NTK-scaled frequencies
    assert not kept_tables(enc)
    np.testing.assert_array_equal(b, backend.to_numpy(_fresh(enc, x, np.array([200]), backend)))
    assert not np.array_equal(a, b)


def test_mrope_text_decoding_uses_rows_of_its_table(backend: Any) -> None:
    enc = per.get_encoder("mrope", dim=16, sections=(2, 3, 3))
    x = _x(backend, (2, 3, 1, 16))
    for offset in (0, 17, 2049):
        got = backend.to_numpy(enc.rotate(x, offset=offset))
        pos = np.full((3, 1), offset, dtype=np.float64)
        want = backend.to_numpy(enc.rotate(x, backend.from_numpy(
            pos, dtype=backend.float_dtypes()["float32"])))
        np.testing.assert_array_equal(got, want)
    assert kept_tables(enc)


def test_subclass_with_its_own_default_positions_does_not_use_it(backend: Any) -> None:
    """A plugin whose positions=None means something else than offset + arange(seq) keeps
    computing them: the table is only used where its rows are known to be the positions."""

    class Doubled(type(per.get_encoder("rotary", dim=8))):  # type: ignore[misc]
        name = "doubled-test"
        __slots__ = ()

        def _default_positions(self, seq: int, offset: Any, *, ctx: Any) -> Any:
            return 2 * super()._default_positions(seq, offset, ctx=ctx)

    enc = Doubled(dim=8)
    x = _x(backend, (1, 1, 2, 8))
    got = backend.to_numpy(enc.rotate(x, offset=3))
    np.testing.assert_array_equal(got, backend.to_numpy(
        _fresh(enc, x, np.array([6, 8]), backend)))
    assert not kept_tables(enc)


def test_subclass_declaring_rows_but_shifting_positions_is_not_gathered(backend: Any) -> None:
    """The gather indexes the table by raw position ids, so it is only for classes whose table
    rows are ``arange(n)`` itself: a subclass with its own default positions that declares
    (wrongly) that they are one position per token computes explicit ids."""

    class Doubled(type(per.get_encoder("rotary", dim=8))):  # type: ignore[misc]
        name = "doubled-declared-test"
        __slots__ = ()
        _offset_rows_are_positions = False  # not declared by this class: inherited flags don't count

        def _default_positions(self, seq: int, offset: Any, *, ctx: Any) -> Any:
            return 2 * super()._default_positions(seq, offset, ctx=ctx)

    class Declared(Doubled):
        name = "doubled-declared-test-2"
        __slots__ = ()
        _offset_rows_are_positions = True  # wrong on purpose: ids must still not be gathered

    enc = Declared(dim=8)
    x = _x(backend, (1, 1, 3, 8))
    ids = np.array([1, 2, 3])
    got = backend.to_numpy(enc.rotate(x, backend.from_numpy(ids)))
    np.testing.assert_array_equal(got, backend.to_numpy(_fresh(enc, x, ids, backend)))


def test_tables_made_inside_a_trace_are_not_cached(backend: Any) -> None:
    """JAX stages even operations on concrete arrays inside ``jax.jit``: a table made there is a
    tracer and must not be kept for later eager calls (nor may positions be read there)."""
    if backend.name != "jax":
        pytest.skip("JAX-specific: staging of concrete operations inside jax.jit")
    import jax
    import jax.numpy as jnp

    enc = per.get_encoder("rotary", dim=16)
    x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 5, 16)), dtype=jnp.float32)
    ids = jnp.arange(5)
    want = np.asarray(enc.rotate(x, ids.astype(jnp.float32)))
    tol = {"rtol": 0, "atol": 8 * float(np.finfo(np.float32).eps)}  # XLA's fused trigonometry
    np.testing.assert_allclose(np.asarray(jax.jit(lambda s: enc.rotate(x, offset=0) * s)(1.0)),
                               want, **tol)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda p: enc.rotate(x, p))(ids)), want, **tol)
    np.testing.assert_allclose(np.asarray(jax.vmap(lambda p: enc.rotate(x[0], p))(ids[None])),
                               want[:1], **tol)
    assert not kept_tables(enc)
    np.testing.assert_array_equal(np.asarray(enc.rotate(x, offset=0)), want)  # eager still fine


def _count_tables(enc: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The shapes of the positions whose tables ``enc`` computes from now on (integer ids
    served by rows compute none; ``_fresh``'s real positions are not counted)."""
    computed: list[tuple[int, ...]] = []
    table = type(enc)._table

    def counted(self: Any, pos: Any, **kw: Any) -> Any:
        if self is enc and backend_is_integral(pos):
            computed.append(tuple(pos.shape))
        return table(self, pos, **kw)

    monkeypatch.setattr(type(enc), "_table", counted)
    return computed


def backend_is_integral(pos: Any) -> bool:
    return "int" in str(pos.dtype)


_SPLIT = (0,) * 4 + (1,) * 6 + (2,) * 6  # HunYuan-VL XD-RoPE: 2·sections[k] features per axis


@pytest.mark.parametrize("opts", [
    {"sections": (2, 3, 3)},
    {"sections": (3, 3, 2), "interleaved": True},
    {"sections": (2, 3, 3), "pair_axes": (1, 2, 1, 2, 1, 2, 0, 0)},
    {"sections": (2, 3, 3), "feature_axes": _SPLIT},
    {"sections": (2, 3, 3), "feature_axes": _SPLIT, "layout": "interleaved"},
    {"sections": (2, 3, 3), "scaling": {"type": "yarn", "factor": 4.0,
                                        "original_max_position_embeddings": 64}},
])
def test_mrope_image_token_reads_each_column_from_its_axis_row(
        backend: Any, opts: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """One image token (axes at different positions) while decoding: each column of its
    tables is that column of the text table's row at its axis's position, the bits of
    computing it."""
    enc = per.get_encoder("mrope", dim=16, **opts)
    x = _x(backend, (2, 3, 1, 16))
    enc.rotate(x, offset=9000)  # the table of text positions, grown to cover every id below
    computed = _count_tables(enc, monkeypatch)
    for ids in ([[4096]], [[4102]], [[4097]]), ([[7]], [[3]], [[5]]), ([[0]], [[9000]], [[2]]):
        pos = np.array(ids)
        got = backend.to_numpy(enc.rotate(x, backend.from_numpy(pos)))
        np.testing.assert_array_equal(got, backend.to_numpy(_fresh(enc, x, pos, backend)))
    # (eager JAX computes: one program costs less than its slices)
    assert computed == [] if backend.name != "jax" else len(computed) == 3, computed


def test_subclass_with_its_own_tables_computes_image_tokens(backend: Any) -> None:
    """A subclass whose tables are not M-RoPE's column by column (here: the axes swapped)
    computes an image token's tables: columns are read from rows only where the class says
    which axis each follows."""

    class Swapped(type(per.get_encoder("mrope", dim=16, sections=(2, 3, 3)))):  # type: ignore[misc]
        name = "swapped-test"
        __slots__ = ()

        def _half_cos_sin(self, positions: Any, *, ctx: Any, seq_len: Any) -> Any:
            return super()._half_cos_sin(ctx.xp.flip(positions, axis=0), ctx=ctx,
                                         seq_len=seq_len)

    enc = Swapped(dim=16, sections=(2, 3, 3))
    x = _x(backend, (1, 2, 1, 16))
    pos = np.array([[[9]], [[4]], [[700]]])
    got = backend.to_numpy(enc.rotate(x, backend.from_numpy(pos)))
    np.testing.assert_array_equal(got, backend.to_numpy(_fresh(enc, x, pos, backend)))
    plain = per.get_encoder("mrope", dim=16, sections=(2, 3, 3))
    want = backend.to_numpy(plain.rotate(x, backend.from_numpy(pos[::-1].copy())))
    np.testing.assert_array_equal(got, want)
    assert not kept_tables(enc), "a table was made for a token that computes its own"


def test_subclass_with_its_own_pair_axes_reads_columns_of_those_axes(backend: Any) -> None:
    """A subclass that gives each pair another axis (``_pair_frequencies``, a documented hook):
    an image token's columns follow the axes it gives, as computing them does."""

    class Reassigned(type(per.get_encoder("mrope", dim=16, sections=(2, 3, 3)))):  # type: ignore[misc]
        name = "reassigned-test"
        __slots__ = ()

        def _pair_frequencies(self, seq_len: Any) -> Any:
            freqs, axes = super()._pair_frequencies(seq_len)
            return freqs, tuple({1: 2, 2: 1}.get(a, a) for a in axes)

    enc = Reassigned(dim=16, sections=(2, 3, 3))
    x = _x(backend, (1, 2, 1, 16))
    enc.rotate(x, offset=600)  # a table of text positions to read from
    for ids in ([[[7]], [[3]], [[500]]], [[[0]], [[511]], [[2]]]):
        pos = np.array(ids)
        got = backend.to_numpy(enc.rotate(x, backend.from_numpy(pos)))
        np.testing.assert_array_equal(got, backend.to_numpy(_fresh(enc, x, pos, backend)))
        plain = per.get_encoder("mrope", dim=16, sections=(2, 3, 3))
        swapped = backend.to_numpy(plain.rotate(x, backend.from_numpy(pos[[0, 2, 1]])))
        np.testing.assert_array_equal(got, swapped)


def test_float32_spelled_two_ways_keeps_one_table(backend: Any) -> None:
    """``cos_sin(dtype="float32")`` (the backend's float32) and ``rotate`` of float32 ``x`` (the
    array's dtype object) ask for the same table: one entry, not two equal ones."""
    enc = per.get_encoder("rotary", dim=16)
    ids = backend.from_numpy(np.array([[3, 70]]))
    enc.cos_sin(ids, dtype="float32")
    enc.rotate(_x(backend, (1, 2, 2, 16)), ids)
    assert len(kept_tables(enc)) == 1


# -- issue 42, item 7: no reader ever sees more bytes kept than the budget -------------------------
def test_a_reader_never_sees_the_budget_exceeded() -> None:
    """A table the store lets go of starts a reader thread (its ``__del__``), which reads
    ``table_cache_bytes()`` while the writer is inside ``put``: before, ``put`` added the new
    table's bytes first and evicted after, without the reader taking the lock, so the reader saw
    ``(1200, 1000)``."""
    import threading

    from peregistry import rope
    from peregistry.rope._tables import STORE

    seen: list[tuple[int, int]] = []
    readers: list[threading.Thread] = []

    class Table:
        def __del__(self) -> None:
            reader = threading.Thread(target=lambda: seen.append(rope.table_cache_bytes()))
            readers.append(reader)
            reader.start()
            reader.join(timeout=2)  # (a writer holding the lock: the reader waits for it)

    budget = rope.table_cache_bytes()[1]
    rope.set_table_cache_bytes(1000)
    try:
        for i in range(3):
            STORE.put(("test item 7", i), Table(), 300)
        STORE.put(("test item 7", "big"), Table(), 600)  # evicts two of the three
        STORE.put(("test item 7", "big"), Table(), 600)  # replaces itself
        rope.set_table_cache_bytes(500)  # evicts the rest
    finally:
        rope.set_table_cache_bytes(budget)
    for reader in readers:
        reader.join()
    assert len(seen) == 5  # every table let go of
    assert all(kept <= most for kept, most in seen), seen


def test_readers_hammering_while_writers_put() -> None:
    """Threads putting tables while another reads ``table_cache_bytes()`` in a loop, the
    interpreter switching threads as often as it can: every read is within the budget."""
    import sys
    import threading

    from peregistry import rope
    from peregistry.rope._tables import STORE

    budget = rope.table_cache_bytes()[1]
    interval = sys.getswitchinterval()
    rope.set_table_cache_bytes(10_000)
    stop = threading.Event()
    over: list[tuple[int, int]] = []

    def read() -> None:
        while not stop.is_set():
            kept, most = rope.table_cache_bytes()
            if kept > most:
                over.append((kept, most))

    def write(w: int) -> None:
        for i in range(3000):
            STORE.put(("test item 7 hammer", w, i % 40), object(), 1000 + 37 * (i % 7))

    sys.setswitchinterval(1e-6)
    try:
        reader = threading.Thread(target=read)
        reader.start()
        writers = [threading.Thread(target=write, args=(w,)) for w in range(2)]
        for t in writers:
            t.start()
        for t in writers:
            t.join()
        stop.set()
        reader.join()
    finally:
        sys.setswitchinterval(interval)
        rope.set_table_cache_bytes(budget)
    assert not over, f"{len(over)} reads above the budget, e.g. {over[0]}"
