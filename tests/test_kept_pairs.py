"""The relative encoders keep what they derive from short eager integer positions (T5's buckets,
Shaw's rows, ALiBi's ``-|k - q|``, Transformer-XL's distances) by the differences ``k - q``
(peregistry/encoders/_row_tables.py, ``kept_pairs``; issue 17: the cost of small calls). Checked
against computing (nothing kept) bit for bit, on every selected backend, through sliding windows,
clipping, decode shapes, every output dtype, and the cases nothing may be kept for."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS

import peregistry as per
from peregistry.encoders import _row_tables, relative
from peregistry.rope import _delegation

#: (name, options, params?) of each built-in encoder that keeps pairs.
SPECS = [
    ("t5", {"num_heads": 3}, True),
    ("t5", {"num_heads": 2, "bidirectional": False, "num_buckets": 8, "max_distance": 6}, True),
    ("alibi", {"num_heads": 5, "max_bias": 7.0}, False),  # (slopes not powers of two)
    ("shaw", {"max_distance": 3, "dim": 4}, True),
    ("transformer-xl", {"dim": 8}, False),
]
IDS = [f"{name}-{i}" for i, (name, _, _) in enumerate(SPECS)]

#: (q, k) position sets: a window and the same window slid (the same differences), a decode
#: step, negative and far positions (T5 and Shaw clip), scattered positions, int32, q != k, the
#: queries of the first with other keys, distances within every encoder's clipping (none
#: clipped: T5 and Shaw skip the clip), a distance float32 rounds.
POSITIONS = [
    (np.arange(8), None),
    (np.arange(8) + 100, None),
    (np.array([9]), np.arange(10)),
    (np.array([-4, 0, 3]), np.array([-9, 2, 5, 40])),
    (np.arange(40) * 7, None),
    (np.array([0, 5, 6, 31, 32]), np.array([1, 2, 60])),
    (np.arange(6, dtype=np.int32), np.arange(9, dtype=np.int32) - 2),
    (np.arange(8), np.arange(8)),
    (np.arange(8), np.arange(8) + 3),
    (np.array([2, 3]), np.array([1, 2, 4])),
    (np.array([0]), np.array([-6, -4, -3, 3, 4, 6])),  # at and past the clipping distances
    (np.array([0]), np.array([-4, 2, 4])),
    (np.array([0]), np.array([-512])),  # at the edges of transformer-xl's first table, and past
    (np.array([511]), np.array([0, 1023])),
    (np.array([0]), np.array([512, 513])),
    (np.array([4096]), np.arange(3)),  # decode steps at the edges of the kept slices, and past
    (np.array([0]), np.arange(4095, 4097)),
    (np.array([0]), np.arange(4096, 4098)),
    (np.array([5000]), np.arange(3)),
    (np.array([7]), np.array([0, 2, 1, 3])),  # one query, keys out of order
    (np.array([0, 2**24 + 1, 2**25 + 3]), None),
]


def _keeps(backend: Any) -> bool:
    """Where positions are read on the host for it: NumPy and CPU torch."""
    return backend.name in ("numpy", "torch")


def _kept(enc: Any) -> dict[Any, Any]:
    return enc._cache.get("pairs", {})  # type: ignore[no-any-return]


def _call(enc: Any, backend: Any, params: Any, q: Any, k: Any, dtype: Any = None) -> Any:
    qa = backend.from_numpy(q)
    ka = qa if k is None else backend.from_numpy(k)
    if enc.name in ("shaw", "transformer-xl"):
        return enc.embed(qa, ka, params=params, dtype=dtype)
    return enc.bias(qa, ka, params=params, dtype=dtype)


def _dtypes(backend: Any, name: str) -> list[str | None]:
    out: list[str | None] = [None, "float32"]
    if backend.name != "jax" or _x64():
        out.append("float64")
    if backend.name != "array_api_strict":
        out.append("float16")
    return out


def _x64() -> bool:
    try:
        import jax
    except ImportError:
        return False
    return bool(jax.config.jax_enable_x64)


@pytest.mark.parametrize(("name", "options", "learned"), SPECS, ids=IDS)
def test_kept_pairs_have_the_bits_of_computing(backend: Any, name: str, options: dict[str, Any],
                                               learned: bool,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    if not _keeps(backend):  # (which test_kept_pairs_are_served_by_differences checks)
        pytest.skip(f"nothing is kept on {backend.name}: both sides would be computed")
    enc: Any = per.get_encoder(name, **options)
    xp = backend.namespace()
    params = enc.init(xp, seed=3, dtype=xp.float32) if learned else None
    calls = [(q, k, dtype) for dtype in _dtypes(backend, name) for q, k in POSITIONS
             if dtype != "float16" or q.max() < 2**10]  # (a bias float16 overflows: warned)
    monkeypatch.setattr(_row_tables, "PAIRS_SKIPPED", 0)  # every call keeps (no pause)
    with monkeypatch.context() as m:
        m.setattr(_row_tables, "PAIR_SIDE", 0)  # nothing read, nothing kept: computed
        m.setattr(_row_tables, "ROW_TABLE_BYTES", 0)  # (no table of rows either)
        wants = [backend.to_numpy(_call(enc, backend, params, q, k, d)) for q, k, d in calls]
        assert not _kept(enc)
    for again in (False, True):  # kept by the first pass, served to the second
        for (q, k, dtype), want in zip(calls, wants, strict=True):
            if not again:  # (transformer-xl's table of rows is made for each call's reach)
                per.rope.clear_caches()
            got = backend.to_numpy(_call(enc, backend, params, q, k, dtype))
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want, err_msg=f"{q}, {k}, {dtype}")
    assert _kept(enc)


@pytest.mark.parametrize(("name", "options", "learned"), SPECS[:4], ids=IDS[:4])
def test_kept_pairs_are_served_by_differences(backend: Any, name: str, options: dict[str, Any],
                                              learned: bool,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A window slid along computes no distance again; new differences do, once."""
    enc: Any = per.get_encoder(name, **options)
    xp = backend.namespace()
    params = enc.init(xp, seed=3) if learned else None
    computed: list[Any] = []
    real, looked_up = relative.int_distance, _delegation.take_differences
    monkeypatch.setattr(relative, "int_distance",
                        lambda q, k, idt, xp: computed.append(q.shape) or real(q, k, idt, xp=xp))
    monkeypatch.setattr(_delegation, "take_differences",  # (T5's entries of read positions)
                        lambda v, q, k, ctx: computed.append(q.shape) or looked_up(v, q, k, ctx=ctx))
    for shift in (0, 5, 1000, -70):
        _call(enc, backend, params, np.arange(6) + shift, None)
    _call(enc, backend, params, np.arange(6) * 2, None)
    _call(enc, backend, params, np.arange(6) * 2 + 9, None)
    if backend.name == "jax":  # the hook runs as one compiled program per shape
        assert not _kept(enc)
        return
    assert len(computed) == (2 if _keeps(backend) else 6)
    assert len(_kept(enc)) == (2 if _keeps(backend) else 0)


def test_transformer_xl_keeps_distances_by_differences(backend: Any) -> None:
    enc: Any = per.get_encoder("transformer-xl", dim=8)
    for shift in (0, 3, 500):
        _call(enc, backend, None, np.arange(5) + shift, np.arange(7) + shift)
    assert len(_kept(enc)) == (1 if _keeps(backend) else 0)
    _call(enc, backend, None, np.arange(5), np.arange(7) + 1)
    assert len(_kept(enc)) == (2 if _keeps(backend) else 0)


def test_kept_pairs_are_bounded(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_row_tables, "PAIRS_SKIPPED", 0)  # every call keeps (no pause)
    enc: Any = per.get_encoder("alibi", num_heads=2)
    for i in range(3 * _row_tables.PAIRS_KEPT):
        _call(enc, backend, None, np.array([0, 1]), np.array([0, i + 2]))
        assert len(_kept(enc)) <= _row_tables.PAIRS_KEPT
    if _keeps(backend):
        assert _kept(enc)


def test_new_differences_on_every_call_pause_keeping(backend: Any) -> None:
    """A full set that served no call (new differences every call) pauses keeping for
    PAIRS_SKIPPED calls, which build as computing does; a set that served one does not."""
    if not _keeps(backend):
        pytest.skip(f"nothing is kept on {backend.name}")
    n, skipped = _row_tables.PAIRS_KEPT, _row_tables.PAIRS_SKIPPED
    enc: Any = per.get_encoder("alibi", num_heads=2)
    fresh: Any = per.get_encoder("alibi", num_heads=2)

    def keys(i: int) -> Any:
        return np.array([0, i + 2])

    for i in range(n + 1):  # the (n + 1)-th drops the full set, which served no call
        _call(enc, backend, None, np.array([0, 1]), keys(i))
    assert len(_kept(enc)) == 1
    for i in range(skipped):  # neither looked up nor kept, even a repeat; the same bits
        out = _call(enc, backend, None, np.array([0, 1]), keys(i % 3))
        expect = _call(fresh, backend, None, np.array([0, 1]), keys(i % 3))
        np.testing.assert_array_equal(backend.to_numpy(out), backend.to_numpy(expect))
        assert len(_kept(enc)) == 1
    _call(enc, backend, None, np.array([0, 1]), keys(0))
    assert len(_kept(enc)) == 2  # kept again
    other: Any = per.get_encoder("alibi", num_heads=3)
    for i in range(n + 1):  # one repeat among them: the set served a call
        _call(other, backend, None, np.array([0, 1]), keys(i if i != 1 else 0))
    for i in range(2):
        _call(other, backend, None, np.array([0, 1]), keys(100 + i))
    assert len(_kept(other)) == 2


def test_pauses_double_while_nothing_kept_serves(backend: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Each further full set that served no call doubles the pause, up to PAIRS_SKIPPED_MOST;
    a set that served a call ends the pausing (the next fruitless set pauses PAIRS_SKIPPED)."""
    if not _keeps(backend):
        pytest.skip(f"nothing is kept on {backend.name}")
    monkeypatch.setattr(_row_tables, "PAIRS_KEPT", 2)
    monkeypatch.setattr(_row_tables, "PAIRS_SKIPPED", 3)
    monkeypatch.setattr(_row_tables, "PAIRS_SKIPPED_MOST", 10)
    enc: Any = per.get_encoder("alibi", num_heads=2)
    new, sizes = iter(range(2, 10**6)), []

    def call(key: int | None = None) -> int:
        """One call at new differences (or those of ``key``'s); what is kept after it."""
        key = next(new) if key is None else key
        _call(enc, backend, None, np.array([0, 1]), np.array([0, key]))
        sizes.append(len(_kept(enc)))
        return key

    def pauses() -> list[int]:
        """The calls that kept nothing after each dropped set: runs of one kept array between
        full sets, less the call that dropped the set."""
        runs, n = [], -1
        for size in sizes:
            if size == 1 and n >= 0:
                n += 1
            elif size == 2:
                if n > 0:
                    runs.append(n - 1)
                n = 0
        return runs

    key = 0
    while len(pauses()) < 4:
        key = call()
    assert sizes[-1] == 2
    call(key)  # served by the set
    while len(pauses()) < 6:
        call()
    assert pauses() == [3, 6, 10, 10, 0, 3]


@pytest.mark.parametrize("dtype", [np.int16, np.int32])
def test_narrow_positions_whose_differences_overflow_their_dtype(backend: Any,
                                                                 dtype: Any) -> None:
    """int16 positions 40000 apart (beyond int16): every bucket is the host's ``t5_bucket`` of
    the exact difference, on the first call and on a remembered one; the table's rows are
    distinct, so a wrapped difference would show."""
    t5: Any = per.get_encoder("t5", num_heads=2, max_distance=40000)
    xp = backend.namespace()
    table = np.arange(64, dtype=np.float32).reshape(32, 2)
    params = {"table": backend.from_numpy(table)}
    q, k = np.array([-20000, 0, 7], dtype=dtype), np.array([20000, 5], dtype=dtype)
    buckets = [[relative.t5_bucket(int(b) - int(a), max_distance=40000) for b in k] for a in q]
    want = table[np.array(buckets)].transpose(2, 0, 1)
    for _ in range(2):
        got = t5.bias(backend.from_numpy(q), backend.from_numpy(k), params=params,
                      dtype=xp.float32)
        np.testing.assert_array_equal(backend.to_numpy(got), want)


def test_what_nothing_is_kept_for(backend: Any) -> None:
    """Batched (2-D) positions, more than PAIR_SIDE per side, real positions (transformer-xl):
    computed every call, nothing kept."""
    t5: Any = per.get_encoder("t5", num_heads=2)
    xp = backend.namespace()
    params = t5.init(xp, seed=0)
    side = _row_tables.PAIR_SIDE
    _call(t5, backend, params, np.arange(8).reshape(2, 4), None)
    _call(t5, backend, params, np.arange(side + 1), np.arange(3))
    _call(t5, backend, params, np.arange(3), np.arange(side + 1))
    assert not _kept(t5)
    txl: Any = per.get_encoder("transformer-xl", dim=8)
    _call(txl, backend, None, np.array([0.5, 1.5]), np.array([0.0, 2.0]))
    assert not _kept(txl)


def _torch() -> Any:
    torch = pytest.importorskip("torch")
    if "torch" not in BACKENDS:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
    return torch


def test_results_never_alias_what_is_kept() -> None:
    torch = _torch()
    for name, options, learned in SPECS:
        enc: Any = per.get_encoder(name, **options)
        params = enc.init(torch, seed=1) if learned else None
        q = torch.arange(6)
        call = enc.embed if name in ("shaw", "transformer-xl") else enc.bias
        want = call(q, q, params=params).clone()
        call(q, q, params=params).fill_(7.0)  # writing into a result changes nothing kept
        torch.testing.assert_close(call(q, q, params=params), want, rtol=0, atol=0)


def test_pairs_kept_in_inference_mode_serve_training() -> None:
    """Buckets first kept inside torch.inference_mode serve a later call with autograd on (an
    inference tensor could not be saved for backward)."""
    torch = _torch()
    enc: Any = per.get_encoder("t5", num_heads=2)
    params = enc.init(torch, seed=0)
    q = torch.arange(5)
    with torch.inference_mode():
        first = enc.bias(q, q, params=params)
    assert not any(v.is_inference() for v in _kept(enc).values())
    table = params["table"].clone().requires_grad_(True)
    out = enc.bias(q, q, params={"table": table})
    out.sum().backward()
    torch.testing.assert_close(out.detach(), first.clone(), rtol=0, atol=0)
    want = torch.zeros_like(table)
    for b in enc.buckets(q[None, :] - q[:, None]).reshape(-1).tolist():
        want[b] += 1.0
    torch.testing.assert_close(table.grad, want, rtol=0, atol=0)


def test_traces_and_tensor_subclasses_read_no_values() -> None:
    """``torch.jit.trace`` would bake read values into the trace; a tensor subclass (a sharded
    DTensor, say) may read them collectively: neither is read nor kept."""
    torch = _torch()

    class Sub(torch.Tensor):
        pass

    enc: Any = per.get_encoder("alibi", num_heads=2)
    q = torch.arange(4)
    sub = q.as_subclass(Sub)
    torch.testing.assert_close(torch.as_tensor(enc.bias(sub, sub)), enc.bias(q, q) + 0,
                               rtol=0, atol=0)
    enc2: Any = per.get_encoder("alibi", num_heads=2)
    enc2.bias(sub, sub)
    assert not _kept(enc2)
    with warnings.catch_warnings():  # (deprecated in torch, but the way to export for ONNX)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # (shapes read: fixed here)
        traced = torch.jit.trace(lambda a: enc2.bias(a, a), (q,), check_trace=False)
    assert not _kept(enc2)
    torch.testing.assert_close(traced(q * 3), enc2.bias(q * 3, q * 3), rtol=0, atol=0)


def test_numpy_and_torch_keep_apart() -> None:
    torch = _torch()
    enc: Any = per.get_encoder("shaw", max_distance=2, dim=3)
    pn = enc.init(np, seed=0)
    pt = {"table": torch.as_tensor(pn["table"])}
    a = enc.embed(np.arange(4), np.arange(4), params=pn)
    b = enc.embed(torch.arange(4), torch.arange(4), params=pt)
    assert isinstance(a, np.ndarray) and isinstance(b, torch.Tensor)
    np.testing.assert_array_equal(b.numpy(), a)
    assert len(_kept(enc)) == 2


def test_kept_pairs_follow_the_table_budget_and_clear_caches(backend: Any) -> None:
    """Nothing is kept with the tables' budget at 0; clear_caches() ends what is kept."""
    enc: Any = per.get_encoder("alibi", num_heads=2)
    q = backend.from_numpy(np.arange(5))
    budget = per.rope.table_cache_bytes()[1]
    per.rope.set_table_cache_bytes(0)
    try:
        enc.bias(q, q)
        assert not _kept(enc)
    finally:
        per.rope.set_table_cache_bytes(budget)
    enc.bias(q, q)
    assert len(_kept(enc)) == (1 if _keeps(backend) else 0)
    per.rope.clear_caches()
    enc.bias(q, q)  # a new entry: the one kept before is not read
    assert len(_kept(enc)) == (2 if _keeps(backend) else 0)


def test_a_t5_subclass_with_its_own_lookup_index_is_served_by_it(
        backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    class Halved(relative.T5Bias):
        name = "t5-halved"

        def _lut_index(self, d: Any, *, ctx: Any) -> Any:
            return super()._lut_index(d, ctx=ctx) // 2

    enc = Halved(num_heads=2)
    xp = backend.namespace()
    params = enc.init(xp, seed=0)
    for q, k in POSITIONS[:6]:
        with monkeypatch.context() as m:
            m.setattr(_row_tables, "PAIR_SIDE", 0)
            want = backend.to_numpy(_call(enc, backend, params, q, k))
        np.testing.assert_array_equal(backend.to_numpy(_call(enc, backend, params, q, k)), want)


def test_gradients_have_the_bits_of_computing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept paths gather in the order of the computed ones: the gradient with respect to
    the learned table sums the same terms in the same order (few and many pairs)."""
    torch = _torch()
    for name, options in (("t5", {"num_heads": 3}), ("shaw", {"max_distance": 3, "dim": 4}),
                          ("t5", {"num_heads": 2, "num_buckets": 4, "max_distance": 3,
                                  "bidirectional": False})):
        enc: Any = per.get_encoder(name, **options)
        params = enc.init(torch, seed=2)
        for n, m_ in ((4, 6), (40, 50), (64, 64), (1, 40), (1, 5)):  # (and decode steps)
            q, k = torch.arange(n) + (3 if n > 1 else 0), torch.arange(m_)
            call = enc.embed if name == "shaw" else enc.bias
            up = torch.randn(call(q, k, params=params).shape, generator=torch.Generator().manual_seed(n))

            def grad(call: Any = call, q: Any = q, k: Any = k, up: Any = up,
                     params: Any = params) -> Any:
                table = params["table"].clone().requires_grad_(True)
                (call(q, k, params={"table": table}) * up).sum().backward()
                return table.grad

            with monkeypatch.context() as m:
                m.setattr(_row_tables, "PAIR_SIDE", 0)
                want = grad()
            for _ in range(2):  # kept, then served
                torch.testing.assert_close(grad(), want, rtol=0, atol=0, msg=f"{name} {n}x{m_}")


def test_t5_tables_gathered_flat_or_along_an_axis_agree() -> None:
    """On torch, a plain tensor or parameter table is gathered flat (row offsets plus heads,
    one ``torch.take``), a tensor subclass (a DTensor keeps its sharding so) along an axis:
    the same bias bits and the same gradient values, few and many pairs, decode steps and
    batched positions, kept and served."""
    torch = _torch()

    class Sub(torch.Tensor):
        pass

    enc: Any = per.get_encoder("t5", num_heads=3, num_buckets=8, max_distance=6)
    base = enc.init(torch, seed=4)["table"]
    cases = [(torch.arange(3), torch.arange(4)), (torch.arange(20), torch.arange(30)),
             (torch.tensor([9]), torch.arange(10)), (torch.arange(6).reshape(2, 3), None)]
    for q, k in cases * 2:  # (kept, then served)
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


def test_nothing_made_inside_torch_func_transforms_is_kept() -> None:
    """Under torch.func transforms, arrays built from plain positions may be wrapped: they are
    not kept, and later eager calls (the C kernel reads storage) have the bits of computing."""
    torch = _torch()
    enc: Any = per.get_encoder("mrope", dim=64, sections=(8, 12, 12))
    x, ids = torch.randn(1, 2, 1, 64), torch.tensor([[5], [3], [7]])
    torch.func.jacrev(lambda g: (enc.rotate(x, ids) * g).sum(-1))(torch.ones(64))
    assert not enc._table_cache.entries
    fresh = per.get_encoder("mrope", dim=64, sections=(8, 12, 12))
    torch.testing.assert_close(enc.rotate(x, ids), fresh.rotate(x, ids), rtol=0, atol=0)
    for name, options, learned in SPECS:
        pair: Any = per.get_encoder(name, **options)
        q = torch.arange(6)
        call = pair.embed if name in ("shaw", "transformer-xl") else pair.bias
        if learned:
            params = pair.init(torch, seed=0)
            torch.func.grad(lambda t, call=call, q=q: call(q, q, params={"table": t}).sum())(
                params["table"])
        else:
            params = None
            torch.func.jacrev(lambda g, call=call, q=q: (call(q, q) * g).sum())(
                torch.ones(()))
        assert not _kept(pair), name
        torch.testing.assert_close(call(q, q, params=params),
                                   getattr(pair.replace(), call.__name__)(q, q, params=params),
                                   rtol=0, atol=0)


def test_a_decode_step_is_a_slice(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """One query against consecutive keys (a decode step, one key more each step): each
    encoder slices a vector kept per distance, computing no distance and keeping nothing per
    step; the bits are those of computing (test_kept_pairs_have_the_bits_of_computing). T5
    beyond 2·max_distance + 1 keys takes its kept lookup indices instead (the gather order of
    computing: test_gradients_have_the_bits_of_computing)."""
    if not _keeps(backend):
        pytest.skip(f"nothing is read on {backend.name}")
    computed: list[Any] = []
    real = relative.int_distance
    monkeypatch.setattr(relative, "int_distance",
                        lambda q, k, idt, xp: computed.append(q.shape) or real(q, k, idt, xp=xp))
    xp = backend.namespace()
    for name, options, learned in SPECS:
        enc: Any = per.get_encoder(name, **options)
        params = enc.init(xp, seed=3) if learned else None
        keys = 2 * enc.options["max_distance"] + 1 if name == "t5" else 64
        for t in range(3, min(40, keys)):
            _call(enc, backend, params, np.array([t]), np.arange(t + 1))
        assert not _kept(enc), name
    assert not computed
