"""The shortcuts of the pair kinds' small calls (issue 17) keep every value and every error, on
every backend (``PEREGISTRY_BACKENDS``).

* ``bias``/``embed`` remember the signatures of validated eager calls (classes, dtypes, number of
  axes, leading axes and devices of positions; classes, dtypes, shapes and devices of params;
  the dtype asked for): a remembered call must give the bits of a fresh encoder's, and a call
  differing in anything validated must raise as ever.
* ``clip`` of distances runs as one kernel on torch and NumPy: the integers of the generic two
  ``where``s.
* T5 looks a few pairs' buckets up one by one and many pairs' through a per-distance bias: both
  equal Hugging Face's buckets (:func:`peregistry.encoders.relative.t5_bucket`) gathered from the
  table on the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS

import peregistry as per
from peregistry.encoders.relative import t5_bucket
from peregistry.encoders.relative_calls import KEPT


def _np(backend: Any, a: Any) -> Any:
    return np.asarray(backend.to_numpy(a))


def _encoders(backend: Any) -> list[tuple[str, Any, Any]]:
    """(method, encoder, params) of the four built-in pair encoders."""
    xp = backend.native()
    t5: Any = per.get_encoder("t5", num_heads=3, num_buckets=8, max_distance=6)
    shaw: Any = per.get_encoder("shaw", max_distance=3, dim=4)
    return [("bias", t5, t5.init(xp)), ("bias", per.get_encoder("alibi", num_heads=3), None),
            ("embed", shaw, shaw.init(xp)),
            ("embed", per.get_encoder("transformer-xl", dim=6), None)]


def _call(method: str, enc: Any, q: Any, k: Any, params: Any, **kw: Any) -> Any:
    return getattr(enc, method)(q, k, params=params, **kw)


def test_remembered_calls_give_the_bits_of_a_fresh_encoder(backend: Any) -> None:
    rng = np.random.default_rng(0)
    for method, enc, params in _encoders(backend):
        for trial in range(3):  # the first validates, the next two are remembered
            q = backend.from_numpy(rng.integers(0, 50, (2, 5)))
            k = backend.from_numpy(rng.integers(0, 50, (1, 7)))
            got = _call(method, enc, q, k, params)
            fresh = _call(method, enc.replace(), q, k, params)
            assert got.dtype == fresh.dtype
            np.testing.assert_array_equal(_np(backend, got), _np(backend, fresh),
                                          err_msg=f"{enc.name}, call {trial}")
        kept = enc._cache.get("pair_calls", ())
        assert 1 <= len(kept) <= KEPT, enc.name


def test_at_most_kept_signatures(backend: Any) -> None:
    enc: Any = per.get_encoder("alibi", num_heads=2)
    for n in range(1, 2 * KEPT + 2):  # leading axes (n,): a signature each
        pos = backend.from_numpy(np.arange(3 * n).reshape(n, 3))
        out = enc.bias(pos, pos)
        assert tuple(out.shape) == (n, 2, 3, 3)
    assert len(enc._cache["pair_calls"]) == KEPT


def test_decode_steps_share_one_signature(backend: Any) -> None:
    """Validation never reads the lengths Q and K: a decode step's one query against one more
    key each step keeps the signature, and every step has the bits of a fresh encoder's."""
    for method, enc, params in _encoders(backend):
        for t in range(3, 12):
            q, k = backend.from_numpy(np.array([t])), backend.from_numpy(np.arange(t + 1))
            got = _call(method, enc, q, k, params)
            fresh = _call(method, enc.replace(), q, k, params)
            np.testing.assert_array_equal(_np(backend, got), _np(backend, fresh),
                                          err_msg=f"{enc.name}, step {t}")
        assert len(enc._cache["pair_calls"]) == 1, enc.name


def test_params_written_in_place_are_read_again() -> None:
    torch = pytest.importorskip("torch")
    if "torch" not in BACKENDS:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
    enc: Any = per.get_encoder("shaw", max_distance=2, dim=3)
    params = enc.init(torch)
    pos = torch.arange(4)
    first = enc.embed(pos, pos, params=params)
    params["table"].mul_(2.0)  # same objects, new values
    again = enc.embed(pos, pos, params=params)
    torch.testing.assert_close(again, 2.0 * first, rtol=0, atol=0)


def _errors_after_a_remembered_call(backend: Any) -> list[tuple[str, Any, type, str]]:
    """(what, call, exception, words of its message) for bad calls sharing what they can with
    a remembered good one."""
    xp = backend.native()
    t5: Any = per.get_encoder("t5", num_heads=2, num_buckets=8, max_distance=6)
    params = t5.init(xp)
    q, k = backend.from_numpy(np.arange(4)), backend.from_numpy(np.arange(5))
    t5.bias(q, k, params=params)
    t5.bias(q, k, params=params)  # remembered
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


def test_remembered_calls_keep_every_error(backend: Any) -> None:
    for what, call, exc, words in _errors_after_a_remembered_call(backend):
        with pytest.raises(exc) as info:
            call()
        assert words in str(info.value) and "t5" in str(info.value), (what, str(info.value))


def test_another_dtype_asked_for_after_a_remembered_call(backend: Any) -> None:
    enc: Any = per.get_encoder("transformer-xl", dim=4)
    pos = backend.from_numpy(np.arange(3))
    default = enc.embed(pos, pos)
    enc.embed(pos, pos)
    for name, dt in backend.float_dtypes().items():
        out = enc.embed(pos, pos, dtype=dt)
        assert out.dtype == dt, name
        assert enc.embed(pos, pos, dtype=name).dtype == dt, name
    assert enc.embed(pos, pos).dtype == default.dtype


def test_positions_of_two_frameworks_are_refused_after_a_remembered_call() -> None:
    torch = pytest.importorskip("torch")
    if "torch" not in BACKENDS:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
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


@pytest.mark.parametrize(("nq", "nk"), [(2, 3), (1, 13), (8, 8), (3, 40)])
def test_t5_few_and_many_pairs_equal_the_host_buckets(backend: Any, nq: int, nk: int) -> None:
    """max_distance=6: 13 clipped distances, so (2, 3) and (1, 13) look buckets up per pair and
    (8, 8), (3, 40) through the per-distance bias; both are gathers, equal to the bit."""
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


def test_clip_int_equals_two_wheres(backend: Any) -> None:
    from peregistry.rope import _delegation

    xp = backend.namespace()
    d = np.arange(-9, 10).reshape(1, -1) - np.arange(-3, 4).reshape(-1, 1)
    for dt in ("int64", "int32"):
        a = backend.from_numpy(d.astype(dt))
        got = _delegation.clip_int(a, -4, 6, xp=xp)
        want = xp.where(a > 6, 6, xp.where(a < -4, -4, a))
        assert got.dtype == a.dtype
        np.testing.assert_array_equal(_np(backend, got), _np(backend, want))
        np.testing.assert_array_equal(_np(backend, got), np.clip(d, -4, 6))


def test_one_dimensional_take_equals_indexing(backend: Any) -> None:
    lut = backend.from_numpy(np.arange(10, 30))
    for dt in ("int64", "int32", "uint8"):
        idx = backend.from_numpy(np.asarray([[0, 19, 3], [4, 4, 7]], dtype=dt))
        got = backend.take(lut, idx, axis=0)
        np.testing.assert_array_equal(_np(backend, got),
                                      np.asarray([[10, 29, 13], [14, 14, 17]]))


def test_flat_take_equals_numpy(backend: Any) -> None:
    """``take_flat``: the elements in row-major order, of a contiguous table and of a transposed
    view, at N-d indices of each integer dtype (torch: one ``torch.take`` eagerly, indexing of
    the flattened table under vmap; the standard's ``take`` elsewhere); gathered flat only on
    torch, for its own tensors and parameters (T5: tests/test_kept_pairs.py)."""
    from peregistry.rope import _delegation

    xp = backend.namespace()
    table = np.arange(24.0, dtype=np.float32).reshape(6, 4)
    where = np.asarray([[[0, 23, 5], [4, 4, 17]], [[1, 2, 3], [22, 9, 0]]])
    for dt in ("int64", "int32", "uint8"):
        idx = backend.from_numpy(where.astype(dt))
        for t, want in ((backend.from_numpy(table), table),
                        (xp.permute_dims(backend.from_numpy(table), (1, 0)), table.T)):
            got = _delegation.take_flat(t, idx, xp=xp)
            np.testing.assert_array_equal(_np(backend, got), np.take(want, where))
    assert _delegation.gathers_flat(backend.from_numpy(table), xp=xp) == (backend.name == "torch")
    if backend.name == "torch":
        import torch

        class Sub(torch.Tensor):
            pass

        t = torch.from_numpy(table)
        assert _delegation.gathers_flat(torch.nn.Parameter(t), xp=xp)
        assert not _delegation.gathers_flat(t.as_subclass(Sub), xp=xp)
        idx = torch.from_numpy(where)
        got = torch.func.vmap(lambda i: _delegation.take_flat(t, i, xp=xp))(idx)
        np.testing.assert_array_equal(got.numpy(), np.take(table, where))


def test_eager_contexts_are_shared(backend: Any) -> None:
    from peregistry.encoders.context import make_context

    a, b = backend.from_numpy(np.arange(3)), backend.from_numpy(np.arange(4))
    ctx1, _ = make_context("test", (a, None))
    ctx2, _ = make_context("test", (b,))
    assert ctx1 is ctx2
    assert ctx1.backend is backend and ctx1.wide == backend.wide_float_dtype(ctx1.device)


def test_a_subclass_validating_values_sees_every_call(backend: Any) -> None:
    """A plugin's T5 that refuses negative positions: its check runs on every call, also after
    calls of the same signature (which are then never remembered)."""
    from peregistry.encoders.relative import T5Bias

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
    assert not enc._cache.get("pair_calls")


def test_rotation_plans_follow_the_layout() -> None:
    """The torch kernel's plan is kept per (shape, strides, dtype) of x and the tables: a view of
    the same shape with other strides (not C-contiguous: the kernel refuses it) and tables that
    broadcast differently must each be rotated as the generic rotation does, in any order."""
    torch = pytest.importorskip("torch")
    if "torch" not in BACKENDS:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
    from peregistry.registry import default_registry
    from peregistry.rope import _delegation

    xp = default_registry.backend("torch").namespace()
    g = torch.Generator().manual_seed(0)
    base = torch.randn(2, 3, 5, 8, generator=g)
    views = [base, base.transpose(1, 2).contiguous().transpose(1, 2)]  # same shape, strides differ
    tables = [(torch.randn(5, 4, generator=g, dtype=torch.float64),) * 2,
              (torch.randn(2, 1, 5, 4, generator=g, dtype=torch.float64),) * 2,
              (torch.randn(1, 3, 5, 4, generator=g), torch.randn(1, 3, 5, 4, generator=g))]
    for _ in range(2):
        for x in views:
            for cos, sin in tables:
                cdt = cos.dtype
                got = _delegation.rotate(x, cos, sin, rotary_dim=8, interleaved=False, cdt=cdt,
                                         xp=xp)
                want = _delegation.rotate(x, cos, sin, rotary_dim=8, interleaved=False, cdt=cdt,
                                          xp=xp, native=False)
                assert got.dtype == want.dtype
                torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_new_default_dtype_is_seen_after_a_remembered_call() -> None:
    torch = pytest.importorskip("torch")
    if "torch" not in BACKENDS:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
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


def test_torch_parameters_are_read_eagerly_and_fake_ones_are_not() -> None:
    torch = pytest.importorskip("torch")
    if "torch" not in BACKENDS:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
    from torch._subclasses.fake_tensor import FakeTensorMode

    from peregistry.registry import default_registry

    b = default_registry.backend("torch")
    assert not b.is_tracing(torch.nn.Parameter(torch.randn(3)))
    fake = torch.nn.Parameter(FakeTensorMode().from_tensor(torch.randn(3)))
    assert b.is_tracing(fake)
    # and a model's bias from Parameter params equals the one from plain tensors
    enc: Any = per.get_encoder("t5", num_heads=2)
    params = enc.init(torch)
    pos = torch.arange(5)
    got = enc.bias(pos, pos, params={"table": torch.nn.Parameter(params["table"].clone())})
    torch.testing.assert_close(got.detach(), enc.bias(pos, pos, params=params), rtol=0, atol=0)
    assert got.requires_grad
