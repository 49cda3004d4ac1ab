"""The relative encoders (``t5``, ``alibi``, ``shaw``, ``transformer-xl``) and ``sinusoidal`` called
as models call them, checked bit for bit against computations independent of the package's paths,
on every selected backend (``PEREGISTRY_BACKENDS``).

The references: T5's buckets computed on the host one distance at a time
(:func:`peregistry.encoders.relative.t5_bucket`) and gathered from the table, ALiBi's
``-|k - q|`` times the paper's slopes in the compute dtype, Shaw's table at the clipped
distances, and for the sinusoids (Transformer-XL, sinusoidal) the same positions as real
numbers, which take the direct path (one angle per element) where integers may take another
(Transformer-XL: one angle per distance, gathered). Checked through few and many pairs, sliding
windows, clipping, decode steps, batched and narrow integer positions whose differences
overflow their dtype, every output dtype, repeated calls and the errors of bad ones;
on torch also: results never aliasing anything kept, tables made in inference mode then
trained, ``torch.jit.trace`` and tensor subclasses, ``torch.func`` transforms, plain,
``Parameter`` and subclass tables, gradients, and subclasses with their own lookup index or
frequencies. Nothing these encoders compute is kept in the store of tables beyond its budget.
"""

from __future__ import annotations

import warnings
from functools import cache
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS

import peregistry as per
from peregistry.encoders.relative import T5Bias, TransformerXL, alibi_slopes, t5_bucket
from peregistry.encoders.sinusoidal import sinusoidal_frequencies
from peregistry.rope import clear_caches, set_table_cache_bytes, table_cache_bytes
from peregistry.rope._tables import STORE

#: (name, options, learned?) of each built-in pair encoder.
SPECS = [
    ("t5", {"num_heads": 3}, True),
    ("t5", {"num_heads": 2, "bidirectional": False, "num_buckets": 8, "max_distance": 6}, True),
    ("alibi", {"num_heads": 5, "max_bias": 7.0}, False),  # (slopes not powers of two)
    ("shaw", {"max_distance": 3, "dim": 4}, True),
    ("transformer-xl", {"dim": 8}, False),
]
IDS = ["t5", "t5-causal", "alibi", "shaw", "transformer-xl"]

#: (q, k) positions (k None: k is q): a window and the same window slid, a decode step,
#: negative and far positions, scattered positions, int32, q != k, distances at and past the
#: clipping distances, one query with keys out of order, batched positions whose leading axes
#: broadcast, distances float32 rounds, and many pairs (T5's per-distance bias, Transformer-XL's
#: one angle per distance).
POSITIONS = [
    (np.arange(8), None),
    (np.arange(8) + 100, None),
    (np.array([9]), np.arange(10)),
    (np.array([-4, 0, 3]), np.array([-9, 2, 5, 40])),
    (np.arange(40) * 7, None),
    (np.array([0, 5, 6, 31, 32]), np.array([1, 2, 60])),
    (np.arange(6, dtype=np.int32), np.arange(9, dtype=np.int32) - 2),
    (np.arange(8), np.arange(8) + 3),
    (np.array([0]), np.array([-6, -4, -3, 3, 4, 6])),
    (np.array([0]), np.array([-512])),
    (np.array([511]), np.array([0, 1023])),
    (np.array([4096]), np.arange(3)),
    (np.array([0]), np.arange(4095, 4097)),
    (np.array([7]), np.array([0, 2, 1, 3])),
    (np.arange(8).reshape(2, 4), None),
    (np.arange(6).reshape(2, 1, 3), np.arange(12).reshape(3, 4)),
    (np.array([0, 2**24 + 1, 2**25 + 3]), None),
    (np.arange(40), np.arange(50) + 3),
]


def _np(backend: Any, a: Any) -> Any:
    return np.asarray(backend.to_numpy(a))


def _torch() -> Any:
    torch = pytest.importorskip("torch")
    if "torch" not in BACKENDS:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
    return torch


def _method(enc: Any) -> Any:
    return enc.embed if enc.kind == "relative-embedding" else enc.bias


def _call(enc: Any, backend: Any, params: Any, q: Any, k: Any, dtype: Any = None) -> Any:
    qa = backend.from_numpy(q)
    ka = qa if k is None else backend.from_numpy(k)
    return _method(enc)(qa, ka, params=params, dtype=dtype)


def _buckets(d: Any, options: Any) -> Any:
    """T5's bucket of each ``k - q`` in ``d``, one distinct distance at a time on the host."""
    values, inverse = np.unique(d, return_inverse=True)
    b = [t5_bucket(int(v), bidirectional=options["bidirectional"],
                   num_buckets=options["num_buckets"], max_distance=options["max_distance"])
         for v in values]
    return np.asarray(b, dtype=np.int64)[inverse].reshape(d.shape)


def host(enc: Any, backend: Any, table: Any, q: Any, k: Any, out: Any) -> Any:
    """``enc``'s result at ``q``, ``k`` (k None: q) as a NumPy array of dtype ``out``,
    computed without the package's paths (transformer-xl: at real positions)."""
    k = q if k is None else k
    d = k.astype(np.int64)[..., None, :] - q.astype(np.int64)[..., :, None]  # (*batch, Q, K)
    o = enc.options
    if enc.name == "t5":
        return np.moveaxis(table[_buckets(d, o)], -1, -3).astype(out)
    if enc.name == "alibi":
        cdt = out if np.dtype(out).itemsize >= 4 else np.float32
        slopes = np.asarray(alibi_slopes(o["num_heads"], o["max_bias"]), dtype=cdt)
        neg = np.asarray(-np.abs(d), dtype=cdt)[..., None, :, :]
        return (neg * slopes[:, None, None]).astype(out)
    if enc.name == "shaw":
        m = o["max_distance"]
        return table[np.clip(d, -m, m) + m].astype(out)
    wide = backend.wide_float_dtype()
    real = enc.embed(backend.from_numpy(q, dtype=wide), backend.from_numpy(k, dtype=wide),
                     dtype=backend.float_dtypes()[np.dtype(out).name])
    return _np(backend, real)


def _exact_as_real(backend: Any, *positions: Any) -> bool:
    """Whether positions are exact in the backend's wide float dtype (float32 on JAX without
    x64 holds integers below 2**24)."""
    limit = 2**53 if "float64" in backend.float_dtypes() else 2**24
    return all(p is None or np.abs(p).max() < limit for p in positions)


def _dtypes(backend: Any) -> list[str | None]:
    """None (the default) and each other float dtype of the backend that NumPy has."""
    floats, default = backend.float_dtypes(), backend.default_float_dtype(None)
    return [None] + [n for n in ("float32", "float64", "float16")
                     if n in floats and floats[n] != default]


def _params(enc: Any, backend: Any, seed: int = 3) -> Any:
    if not enc.param_shapes():
        return None
    xp = backend.namespace()
    return enc.init(xp, seed=seed, dtype=xp.float32)


def _table(backend: Any, params: Any) -> Any:
    return None if params is None else _np(backend, params["table"])


# -- against the host ------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "options", "learned"), SPECS, ids=IDS)
def test_pairs_equal_the_host_reference(backend: Any, name: str, options: dict[str, Any],
                                        learned: bool) -> None:
    """Every position set, every output dtype, called twice: T5's buckets, ALiBi's products,
    Shaw's rows and Transformer-XL at real positions, bit for bit."""
    enc: Any = per.get_encoder(name, **options)
    params = _params(enc, backend)
    table = _table(backend, params)
    calls = [(q, k, dt) for dt in _dtypes(backend) for i, (q, k) in enumerate(POSITIONS)
             if (dt != "float16" or q.max() < 2**10)  # (larger biases overflow float16: warned)
             # (eager JAX runs 16-bit calls op by op, compiling each op per shape: a few)
             and (dt != "float16" or backend.name != "jax" or i < 4)
             and (name != "transformer-xl" or _exact_as_real(backend, q, k))]
    for again in (False, True):
        for q, k, dt in calls:
            got = _call(enc, backend, params, q, k, dt)
            out = _np(backend, got)
            want = host(enc, backend, table, q, k, out.dtype)
            assert out.shape == want.shape, (q, k, dt)
            np.testing.assert_array_equal(out, want, err_msg=f"{q}, {k}, {dt}, again={again}")


@pytest.mark.parametrize(("nq", "nk"), [(2, 3), (1, 13), (8, 8), (3, 40)])
def test_t5_few_and_many_pairs_equal_the_host_buckets(backend: Any, nq: int, nk: int) -> None:
    """max_distance=6: 13 clipped distances, so (2, 3) and (1, 13) look buckets up per pair and
    (8, 8), (3, 40) through the per-distance bias: both equal the host's buckets gathered."""
    for bidirectional in (True, False):
        enc: Any = per.get_encoder("t5", num_heads=3, num_buckets=8, max_distance=6,
                                   bidirectional=bidirectional)
        rng = np.random.default_rng(nq * 100 + nk)
        q, k = rng.integers(0, 30, nq), rng.integers(0, 30, nk)
        table = rng.standard_normal((8, 3)).astype(np.float32)
        out = enc.bias(backend.from_numpy(q), backend.from_numpy(k),
                       params={"table": backend.from_numpy(table)})
        buckets = np.asarray([[t5_bucket(int(b - a), bidirectional=bidirectional,
                                         num_buckets=8, max_distance=6) for b in k] for a in q])
        want = np.moveaxis(table[buckets], -1, 0)  # (heads, Q, K)
        np.testing.assert_array_equal(_np(backend, out), want)


@pytest.mark.parametrize("dim", [2, 6, 128])
@pytest.mark.parametrize(("q", "k"), [
    (np.arange(37), np.arange(50)),                      # 86 distances, 1850 pairs: by distance
    (np.arange(64) + 1000, np.arange(64) + 990),         # shifted
    (np.random.default_rng(0).integers(0, 10, (2, 32)), np.arange(40)),  # batched, repeats
    (np.arange(0, 3200, 100), np.arange(0, 3200, 100)),  # far apart: one angle per pair
    (np.arange(5) + 100, np.arange(7)),                  # few pairs
    (np.arange(3, dtype=np.int32), np.arange(4, dtype=np.int32)),
], ids=["window", "shifted", "batched", "far", "few", "int32"])
def test_transformer_xl_integer_positions_equal_real_ones(backend: Any, dim: int, q: Any,
                                                          k: Any) -> None:
    """At integer positions transformer-xl may compute one angle per distance and gather; the
    same positions as reals take the direct path, and ``q - k`` is exact in either: the same
    bits in every output dtype."""
    enc: Any = per.get_encoder("transformer-xl", dim=dim)
    floats = backend.float_dtypes()
    wide = backend.wide_float_dtype()
    for dt in floats.values():
        ints = enc.embed(backend.from_numpy(q), backend.from_numpy(k), dtype=dt)
        direct = enc.embed(backend.from_numpy(q, dtype=wide), backend.from_numpy(k, dtype=wide),
                           dtype=dt)
        assert ints.dtype == direct.dtype
        assert tuple(ints.shape) == (*q.shape, k.shape[-1], dim)
        np.testing.assert_array_equal(_np(backend, ints).astype(np.float64),
                                      _np(backend, direct).astype(np.float64),
                                      err_msg=f"{dt}, q={q.tolist()}, k={k.tolist()}")


def test_decode_steps_equal_the_host_reference(backend: Any) -> None:
    """One query against one more key each step, across T5's few/many threshold and
    Transformer-XL's by-distance threshold, and at far positions: the host's bits, and the
    result is the caller's own (writing into it changes no later call)."""
    writable = backend.name in ("numpy", "torch")
    steps = [(np.array([t]), np.arange(t + 1)) for t in (0, 3, 11, 12, 13, 40, 255, 256, 257,
                                                         1100)]
    steps += [(np.array([4096]), np.arange(3)), (np.array([0]), np.arange(4094, 4097)),
              (np.array([5000]), np.arange(3))]
    for name, options, _ in SPECS:
        enc: Any = per.get_encoder(name, **options)
        params = _params(enc, backend)
        table = _table(backend, params)
        for q, k in steps:
            out = _call(enc, backend, params, q, k)
            got = _np(backend, out)
            want = host(enc, backend, table, q, k, got.dtype)
            np.testing.assert_array_equal(got, want, err_msg=f"{name}, {q}")
            if writable:
                out[...] = 7.0
                np.testing.assert_array_equal(_np(backend, _call(enc, backend, params, q, k)),
                                              want, err_msg=f"{name}, {q}, after a write")


@cache
def _wide_t5() -> Any:
    """A T5 whose buckets reach 40000 (its lookup table takes a while to make)."""
    return per.get_encoder("t5", num_heads=2, max_distance=40000)


@pytest.mark.parametrize("dtype", [np.int16, np.int32])
def test_narrow_positions_whose_differences_overflow_their_dtype(backend: Any,
                                                                 dtype: Any) -> None:
    """Positions 40000 apart (beyond int16): every bucket is the host's ``t5_bucket`` of the
    exact difference, on every call; the table's rows are distinct, so a wrapped difference
    would show. The same for Shaw's clip and ALiBi's distances."""
    xp = backend.namespace()
    q, k = np.array([-20000, 0, 7], dtype=dtype), np.array([20000, 5], dtype=dtype)
    t5: Any = _wide_t5()
    table = np.arange(64, dtype=np.float32).reshape(32, 2)
    params = {"table": backend.from_numpy(table)}
    buckets = [[t5_bucket(int(b) - int(a), max_distance=40000) for b in k] for a in q]
    want = table[np.array(buckets)].transpose(2, 0, 1)
    for _ in range(2):
        got = t5.bias(backend.from_numpy(q), backend.from_numpy(k), params=params,
                      dtype=xp.float32)
        np.testing.assert_array_equal(_np(backend, got), want)
    shaw: Any = per.get_encoder("shaw", max_distance=30000, dim=1)
    rows = {"table": backend.from_numpy(np.arange(60001, dtype=np.float32).reshape(-1, 1))}
    alibi: Any = per.get_encoder("alibi", num_heads=1, max_bias=1.0)
    for enc, p in ((shaw, rows), (alibi, None)):
        got = _np(backend, _call(enc, backend, p, q, k, "float32"))
        want = host(enc, backend, None if p is None else _np(backend, p["table"]), q, k,
                    np.float32)
        np.testing.assert_array_equal(got, want, err_msg=enc.name)


def test_shaw_clips_distances_of_each_integer_dtype(backend: Any) -> None:
    """Distances inside, at and beyond ±max_distance, from int64 and int32 positions: the
    table's rows at the clipped distances."""
    enc: Any = per.get_encoder("shaw", max_distance=4, dim=2)
    table = np.arange(18, dtype=np.float32).reshape(9, 2)
    params = {"table": backend.from_numpy(table)}
    for dt in (np.int64, np.int32):
        q, k = np.arange(-3, 4).astype(dt), np.arange(-9, 10).astype(dt)
        got = _np(backend, enc.embed(backend.from_numpy(q), backend.from_numpy(k),
                                     params=params))
        want = table[np.clip(k[None, :].astype(np.int64) - q[:, None], -4, 4) + 4]
        np.testing.assert_array_equal(got, want, err_msg=str(dt))


def test_a_t5_subclass_with_its_own_lookup_index_is_served_by_it(backend: Any) -> None:
    class Halved(T5Bias):
        name = "t5-halved"

        def _lut_index(self, d: Any, *, ctx: Any) -> Any:
            return super()._lut_index(d, ctx=ctx) // 2

    enc = Halved(num_heads=2)
    params = _params(enc, backend, seed=0)
    table = _table(backend, params)
    m = enc.options["max_distance"]
    lut = np.asarray([t5_bucket(v, max_distance=m) for v in range(-m, m + 1)])
    for q, k in POSITIONS[:8]:
        kk = q if k is None else k
        d = kk.astype(np.int64)[None, :] - q.astype(np.int64)[:, None]
        want = np.moveaxis(table[lut[(np.clip(d, -m, m) + m) // 2]], -1, 0)
        for _ in range(2):
            np.testing.assert_array_equal(_np(backend, _call(enc, backend, params, q, k)),
                                          want, err_msg=f"{q}, {k}")


# -- repeated calls, dtypes, errors ---------------------------------------------------------------


def test_every_output_dtype_after_repeated_calls(backend: Any) -> None:
    enc: Any = per.get_encoder("transformer-xl", dim=4)
    pos = backend.from_numpy(np.arange(3))
    default = enc.embed(pos, pos)
    enc.embed(pos, pos)
    for name, dt in backend.float_dtypes().items():
        out = enc.embed(pos, pos, dtype=dt)
        assert out.dtype == dt, name
        assert enc.embed(pos, pos, dtype=name).dtype == dt, name
    assert enc.embed(pos, pos).dtype == default.dtype


def _errors_after_good_calls(backend: Any) -> list[tuple[str, Any, type, str]]:
    """(what, call, exception, words of its message) for bad calls sharing what they can with
    good ones made before."""
    xp = backend.native()
    t5: Any = per.get_encoder("t5", num_heads=2, num_buckets=8, max_distance=6)
    params = t5.init(xp)
    q, k = backend.from_numpy(np.arange(4)), backend.from_numpy(np.arange(5))
    t5.bias(q, k, params=params)
    t5.bias(q, k, params=params)
    q2 = backend.from_numpy(np.zeros((2, 4), dtype=np.int64))  # and (2, 4) against (2, 5)
    t5.bias(q2, backend.from_numpy(np.zeros((2, 5), dtype=np.int64)), params=params)
    wrong_shape = {"table": backend.from_numpy(np.zeros((8, 3), dtype=np.float32))}
    int_table = {"table": backend.from_numpy(np.zeros((8, 2), dtype=np.int32))}
    return [
        ("float positions", lambda: t5.bias(backend.from_numpy(np.arange(4.0)), k, params=params),
         TypeError, "q_positions"),
        ("no params", lambda: t5.bias(q, k), TypeError, "needs params"),
        ("params of another shape", lambda: t5.bias(q, k, params=wrong_shape), ValueError,
         "shape"),
        ("integer params", lambda: t5.bias(q, k, params=int_table), TypeError, "real floating"),
        ("unknown dtype", lambda: t5.bias(q, k, params=params, dtype="int8"), TypeError,
         "dtype='int8'"),
        ("a scalar position", lambda: t5.bias(backend.from_numpy(np.asarray(3)), k,
                                              params=params), ValueError, "scalar"),
        ("leading axes", lambda: t5.bias(backend.from_numpy(np.zeros((2, 4), dtype=np.int64)),
                                         backend.from_numpy(np.zeros((3, 5), dtype=np.int64)),
                                         params=params), ValueError, "broadcast"),
        ("a scalar key position", lambda: t5.bias(q, backend.from_numpy(np.asarray(3)),
                                                  params=params), ValueError, "scalar"),
        ("the keys' leading axes", lambda: t5.bias(q2, backend.from_numpy(
            np.zeros((3, 5), dtype=np.int64)), params=params), ValueError, "broadcast"),
    ]


def test_bad_calls_after_good_ones_raise(backend: Any) -> None:
    for what, call, exc, words in _errors_after_good_calls(backend):
        with pytest.raises(exc) as info:
            call()
        assert words in str(info.value) and "t5" in str(info.value), (what, str(info.value))


def test_a_subclass_validating_values_sees_every_call(backend: Any) -> None:
    """A plugin's T5 that refuses negative positions: its check runs on every call."""

    class NonNegativeT5(T5Bias):
        name = "test-non-negative-t5"

        def _positions(self, positions: Any, ctx: Any, what: str = "positions") -> Any:
            out = super()._positions(positions, ctx, what)
            if float(np.min(_np(backend, out))) < 0:
                raise ValueError(f"{self.name}: {what} must be >= 0")
            return out

    enc = NonNegativeT5(num_heads=2)
    params = enc.init(backend.native())
    good = backend.from_numpy(np.arange(4))
    enc.bias(good, good, params=params)
    enc.bias(good, good, params=params)
    with pytest.raises(ValueError, match="q_positions must be >= 0"):
        enc.bias(backend.from_numpy(np.arange(4) - 2), good, params=params)


def test_one_dimensional_take_equals_indexing(backend: Any) -> None:
    lut = backend.from_numpy(np.arange(10, 30))
    for dt in ("int64", "int32", "uint8"):
        idx = backend.from_numpy(np.asarray([[0, 19, 3], [4, 4, 7]], dtype=dt))
        got = backend.take(lut, idx, axis=0)
        np.testing.assert_array_equal(_np(backend, got),
                                      np.asarray([[10, 29, 13], [14, 14, 17]]))


def test_positions_of_two_frameworks_are_refused() -> None:
    torch = _torch()
    enc: Any = per.get_encoder("alibi", num_heads=2)
    pos = torch.arange(4)
    enc.bias(pos, pos)
    enc.bias(pos, pos)
    with pytest.raises(TypeError, match="k_positions is a numpy array"):
        enc.bias(pos, np.arange(4))
    t5: Any = per.get_encoder("t5", num_heads=2)
    params = t5.init(np)
    with pytest.raises(TypeError, match=r"params\['table'\] is a numpy array"):
        t5.bias(pos, pos, params=params)
    # Python lists follow the params' framework, each time
    out = t5.bias([0, 1, 2], [0, 1], params=params)
    assert isinstance(out, np.ndarray) and out.shape == (2, 3, 2)


def test_numpy_and_torch_calls_of_one_encoder() -> None:
    torch = _torch()
    enc: Any = per.get_encoder("shaw", max_distance=2, dim=3)
    pn = enc.init(np, seed=0)
    pt = {"table": torch.as_tensor(pn["table"])}
    for _ in range(2):
        a = enc.embed(np.arange(4), np.arange(4), params=pn)
        b = enc.embed(torch.arange(4), torch.arange(4), params=pt)
        assert isinstance(a, np.ndarray) and isinstance(b, torch.Tensor)
        np.testing.assert_array_equal(b.numpy(), a)


def test_a_new_default_dtype_is_seen_after_repeated_calls() -> None:
    torch = _torch()
    enc: Any = per.get_encoder("alibi", num_heads=2)
    pos = torch.arange(3)
    assert enc.bias(pos, pos).dtype == enc.bias(pos, pos).dtype == torch.get_default_dtype()
    before = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64 if before != torch.float64 else torch.float32)
        assert enc.bias(pos, pos).dtype == torch.get_default_dtype()
    finally:
        torch.set_default_dtype(before)
    assert enc.bias(pos, pos).dtype == before


def test_params_written_in_place_are_read_again() -> None:
    torch = _torch()
    enc: Any = per.get_encoder("shaw", max_distance=2, dim=3)
    params = enc.init(torch)
    pos = torch.arange(4)
    first = enc.embed(pos, pos, params=params)
    params["table"].mul_(2.0)  # same objects, new values
    again = enc.embed(pos, pos, params=params)
    torch.testing.assert_close(again, 2.0 * first, rtol=0, atol=0)


def test_results_never_alias_each_other() -> None:
    """Writing into one result changes no later call, for few and many pairs."""
    torch = _torch()
    for name, options, _ in SPECS:
        enc: Any = per.get_encoder(name, **options)
        params = enc.init(torch, seed=1) if enc.param_shapes() else None
        for q in (torch.arange(6), torch.arange(40)):
            call = _method(enc)
            want = call(q, q, params=params).clone()
            call(q, q, params=params).fill_(7.0)
            torch.testing.assert_close(call(q, q, params=params), want, rtol=0, atol=0,
                                       msg=name)


# -- the store of tables ---------------------------------------------------------------------------


def test_budget_zero_keeps_nothing_and_clear_caches_frees_all(backend: Any) -> None:
    """With the store's budget at 0 pair and sinusoidal calls keep nothing and give the same
    bits as with the default budget; ``clear_caches()`` leaves nothing kept; the store never
    holds more than its budget."""
    pos = np.arange(40)
    encs = [(per.get_encoder(name, **options), None) for name, options, _ in SPECS]
    encs = [(enc, _params(enc, backend)) for enc, _ in encs]
    sin_: Any = per.get_encoder("sinusoidal", dim=16)

    def run() -> list[Any]:
        outs = [_np(backend, _call(enc, backend, params, q, None))
                for enc, params in encs for q in (pos[:5], pos)]
        return [*outs, _np(backend, sin_.encode(backend.from_numpy(pos)))]

    budget = table_cache_bytes()[1]
    before = run()
    assert STORE.nbytes <= budget
    set_table_cache_bytes(0)
    try:
        after = run()
        assert table_cache_bytes()[0] == 0
    finally:
        set_table_cache_bytes(budget)
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)
    run()
    clear_caches()
    assert table_cache_bytes()[0] == 0


def test_tables_made_in_inference_mode_serve_training() -> None:
    """T5's and Transformer-XL's results first made inside torch.inference_mode, then with
    autograd on (few and many pairs): no inference tensor is kept, the values are the same, and
    T5's gradient counts each bucket's pairs."""
    torch = _torch()
    enc: Any = per.get_encoder("t5", num_heads=2)
    txl: Any = per.get_encoder("transformer-xl", dim=16)
    params = enc.init(torch, seed=0)
    for n in (5, 40):
        q = torch.arange(n)
        with torch.inference_mode():
            first = enc.bias(q, q, params=params)
            embedded = txl.embed(q, q)
        stored = [a for value, _ in list(STORE._entries.values())
                  for a in (value if isinstance(value, tuple) else (value,))
                  if isinstance(a, torch.Tensor)]
        assert not any(t.is_inference() for t in stored)
        table = params["table"].clone().requires_grad_(True)
        out = enc.bias(q, q, params={"table": table})
        out.sum().backward()
        torch.testing.assert_close(out.detach(), first.clone(), rtol=0, atol=0)
        want = np.zeros(tuple(table.shape))
        np.add.at(want, _buckets((q[None, :] - q[:, None]).numpy(), enc.options), 1.0)
        torch.testing.assert_close(table.grad, torch.as_tensor(want, dtype=table.dtype), rtol=0,
                                   atol=0)
        again = txl.embed(q, q)
        assert not again.is_inference()
        torch.testing.assert_close(again, embedded.clone(), rtol=0, atol=0)


def test_traces_and_tensor_subclasses() -> None:
    """``torch.jit.trace`` must not bake read values into the trace; a tensor subclass (a
    sharded DTensor, say) may only be read collectively: both give the bits of plain tensors."""
    torch = _torch()

    class Sub(torch.Tensor):
        pass

    enc: Any = per.get_encoder("alibi", num_heads=2)
    for n in (4, 40):
        q = torch.arange(n)
        sub = q.as_subclass(Sub)
        torch.testing.assert_close(torch.as_tensor(enc.bias(sub, sub)), enc.bias(q, q) + 0,
                                   rtol=0, atol=0)
    sin_: Any = per.get_encoder("sinusoidal", dim=8)
    txl: Any = per.get_encoder("transformer-xl", dim=8)

    def all_three(p: Any) -> Any:
        return enc.bias(p, p).sum() + sin_.encode(p).sum() + txl.embed(p, p).sum()

    for n in (4, 40):
        q = torch.arange(n)
        with warnings.catch_warnings():  # (deprecated in torch, but the way to export for ONNX)
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", torch.jit.TracerWarning)  # (shapes read: fixed here)
            traced = torch.jit.trace(all_three, (q,), check_trace=False)
        for p in (q * 3, q + 2990, q * 300):
            torch.testing.assert_close(traced(p), all_three(p), rtol=0, atol=0)


def test_nothing_made_inside_torch_func_transforms_is_kept() -> None:
    """Under torch.func transforms, arrays built from plain positions may be wrapped: none is
    kept, and later eager calls have the bits of the host."""
    torch = _torch()
    from peregistry.registry import default_registry

    backend = default_registry.backend("torch")
    clear_caches()
    for name, options, _ in SPECS:
        enc: Any = per.get_encoder(name, **options)
        call = _method(enc)
        for n in (6, 40):
            q = torch.arange(n)
            if enc.param_shapes():
                params = enc.init(torch, seed=0)
                torch.func.grad(lambda t, call=call, q=q: call(q, q, params={"table": t}).sum())(
                    params["table"])
            else:
                params = None
                torch.func.jacrev(lambda g, call=call, q=q: (call(q, q) * g).sum())(
                    torch.ones(()))
            stored = [a for value, _ in list(STORE._entries.values())
                      for a in (value if isinstance(value, tuple) else (value,))
                      if isinstance(a, torch.Tensor)]
            assert not any(torch._C._functorch.is_functorch_wrapped_tensor(t) for t in stored)
            table = None if params is None else params["table"].numpy()
            want = host(enc, backend, table, q.numpy(), None, np.float32)
            np.testing.assert_array_equal(call(q, q, params=params).numpy(), want,
                                          err_msg=f"{name} {n}")


# -- torch: tables of other kinds, gradients -------------------------------------------------------


def test_torch_parameters_are_read_eagerly_and_fake_ones_are_not() -> None:
    torch = _torch()
    from torch._subclasses.fake_tensor import FakeTensorMode

    from peregistry.registry import default_registry

    b = default_registry.backend("torch")
    gen = torch.Generator().manual_seed(0)
    assert not b.is_tracing(torch.nn.Parameter(torch.randn(3, generator=gen)))
    fake = torch.nn.Parameter(FakeTensorMode().from_tensor(torch.randn(3, generator=gen)))
    assert b.is_tracing(fake)
    # and a model's bias from Parameter params equals the one from plain tensors
    enc: Any = per.get_encoder("t5", num_heads=2)
    params = enc.init(torch)
    pos = torch.arange(5)
    got = enc.bias(pos, pos, params={"table": torch.nn.Parameter(params["table"].clone())})
    torch.testing.assert_close(got.detach(), enc.bias(pos, pos, params=params), rtol=0, atol=0)
    assert got.requires_grad


def test_t5_tables_plain_parameter_or_subclass_agree() -> None:
    """A plain tensor, a Parameter and a tensor subclass (a DTensor keeps its sharding so) as
    T5's table: the same bias bits and the same gradient values, few and many pairs, decode
    steps and batched positions, each twice."""
    torch = _torch()

    class Sub(torch.Tensor):
        pass

    enc: Any = per.get_encoder("t5", num_heads=3, num_buckets=8, max_distance=6)
    base = enc.init(torch, seed=4)["table"]
    cases = [(torch.arange(3), torch.arange(4)), (torch.arange(20), torch.arange(30)),
             (torch.tensor([9]), torch.arange(10)), (torch.arange(6).reshape(2, 3), None)]
    for q, k in cases * 2:
        k = q if k is None else k
        outs, grads = [], []
        for make in (lambda t: t, torch.nn.Parameter, lambda t: t.as_subclass(Sub)):
            table = make(base.clone()).requires_grad_(True)
            out = enc.bias(q, k, params={"table": table})
            out.backward(torch.ones_like(out))
            outs.append(out.detach().as_subclass(torch.Tensor))
            grads.append(table.grad.as_subclass(torch.Tensor))
        for other in outs[1:]:
            torch.testing.assert_close(other, outs[0], rtol=0, atol=0)
        for other in grads[1:]:
            torch.testing.assert_close(other, grads[0], rtol=0, atol=0)


def test_gradients_equal_hand_written_gathers() -> None:
    """The gradient with respect to the learned table equals that of the gathers T5 and Shaw
    document, written by hand in torch with the host's buckets (T5: the table at each pair's
    bucket for at most 2·max_distance + 1 pairs, else the bias of each clipped distance
    gathered at each pair's): the same terms summed in the same order, for few and many pairs
    and decode steps, on every call."""
    torch = _torch()
    for name, options in (("t5", {"num_heads": 3}), ("shaw", {"max_distance": 3, "dim": 4}),
                          ("t5", {"num_heads": 2, "num_buckets": 4, "max_distance": 3,
                                  "bidirectional": False})):
        enc: Any = per.get_encoder(name, **options)
        params = enc.init(torch, seed=2)
        m = enc.options["max_distance"]
        for n, n_keys in ((4, 6), (40, 50), (64, 64), (1, 40), (1, 5)):
            q, k = torch.arange(n) + (3 if n > 1 else 0), torch.arange(n_keys)
            d = k[None, :] - q[:, None]
            call = _method(enc)
            up = torch.randn(call(q, k, params=params).shape,
                             generator=torch.Generator().manual_seed(n))

            def grad(by_hand: bool, call: Any = call, q: Any = q, k: Any = k, d: Any = d,
                     up: Any = up, params: Any = params, enc: Any = enc, m: int = m) -> Any:
                table = params["table"].clone().requires_grad_(True)
                if not by_hand:
                    out = call(q, k, params={"table": table})
                elif enc.name == "shaw":
                    out = table[d.clamp(-m, m) + m]
                elif d.numel() <= 2 * m + 1:
                    out = table.T[:, torch.as_tensor(_buckets(d.numpy(), enc.options))]
                else:
                    lut = torch.as_tensor(_buckets(np.arange(-m, m + 1), enc.options))
                    out = table.T[:, lut][:, d.clamp(-m, m) + m]
                (out * up).sum().backward()
                return table.grad

            want = grad(True)
            for _ in range(2):
                torch.testing.assert_close(grad(False), want, rtol=0, atol=0,
                                           msg=f"{name} {n}x{n_keys}")


# -- sinusoids ------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["interleaved", "split"])
def test_sinusoidal_integer_positions_equal_real_ones(backend: Any, layout: str) -> None:
    """Integer positions (batched, int32, one, negative, far out) give the bits of the same
    positions as reals, in every output dtype."""
    enc: Any = per.get_encoder("sinusoidal", dim=24, layout=layout)
    rng = np.random.default_rng(4)
    sets = [np.arange(8), rng.integers(0, 1000, size=(2, 3, 5)), np.array([3000, 1, 2047]),
            np.arange(8).astype(np.int32), np.array([0]), np.array([-3, 4]),
            np.array([2**22, 5])]
    wide, default = backend.wide_float_dtype(), backend.default_float_dtype(None)
    for dt in [None, *(d for d in backend.float_dtypes().values() if d != default)]:
        for pos in sets:
            got = enc.encode(backend.from_numpy(pos), dtype=dt)
            real = enc.encode(backend.from_numpy(pos, dtype=wide), dtype=dt)
            assert got.dtype == real.dtype and tuple(got.shape) == (*pos.shape, 24)
            np.testing.assert_array_equal(_np(backend, got).astype(np.float64),
                                          _np(backend, real).astype(np.float64),
                                          err_msg=f"{dt}, {pos.tolist()}")


def test_a_zero_dimensional_position_gets_an_array_of_its_own() -> None:
    """Writing into the result of a 0-d position changes no later call."""
    torch = _torch()
    enc: Any = per.get_encoder("sinusoidal", dim=8)
    want = enc.encode(torch.tensor([3, 4]), dtype=torch.float64)
    out = enc.encode(torch.tensor(3), dtype=torch.float64)
    torch.testing.assert_close(out, want[0], rtol=0, atol=0)
    out.fill_(7.0)
    torch.testing.assert_close(enc.encode(torch.tensor([3, 4]), dtype=torch.float64), want,
                               rtol=0, atol=0)
    torch.testing.assert_close(enc.encode(torch.tensor(3), dtype=torch.float64), want[0],
                               rtol=0, atol=0)


def test_a_transformer_xl_subclass_with_its_own_frequencies_uses_them(backend: Any) -> None:
    class SlowXL(TransformerXL):
        name = "test-slow-xl"
        __slots__ = ()

        @property
        def frequencies(self) -> Any:
            return sinusoidal_frequencies(int(self._values["dim"]), 500.0)

    enc = SlowXL(dim=8)
    base = per.get_encoder("transformer-xl", dim=8, base=500.0)
    wide = backend.wide_float_dtype()
    for n in (6, 40):
        q = backend.from_numpy(np.arange(n))
        got = _np(backend, enc.embed(q, q))
        np.testing.assert_array_equal(got, _np(backend, base.embed(q, q)))
        real = backend.from_numpy(np.arange(n), dtype=wide)
        np.testing.assert_array_equal(got, _np(backend, enc.embed(real, real)))
        assert not np.array_equal(got, _np(backend, per.get_encoder("transformer-xl", dim=8)
                                           .embed(q, q)))
