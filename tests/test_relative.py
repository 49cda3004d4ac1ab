"""The relative encoders (t5, alibi, shaw, transformer-xl) against independent float64 NumPy
formulas written here, against Hugging Face transformers where a model defines the convention
(T5 buckets and ``compute_bias``, Bloom's ALiBi), on every backend, and their errors."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import peregistry as per

HF_REASON = "Hugging Face transformers defines the reference convention (torch env)"


def wide(backend: Any) -> str:
    return "float64" if "float64" in backend.float_dtypes() else "float32"


def call(backend: Any, method: Any, q: Any, k: Any, *, params: Any = None,
         dtype: str | None = None) -> Any:
    dt = backend.float_dtypes()[dtype or wide(backend)]
    out = method(backend.from_numpy(np.asarray(q)), backend.from_numpy(np.asarray(k)),
                 params=params, dtype=dt)
    return backend.to_numpy(out).astype(np.float64)


def np_params(enc: per.Encoder) -> dict[str, Any]:
    return {k: np.asarray(v, dtype=np.float64) for k, v in enc.init(np, dtype=np.float32).items()}


def backend_params(enc: per.Encoder, backend: Any) -> Any:
    return enc.init(backend.native(), dtype=backend.float_dtypes()[wide(backend)])


# -- T5 ------------------------------------------------------------------------------------------
def t5_bucket_ref(rel: Any, bidirectional: bool, num_buckets: int, max_distance: int) -> Any:
    """Mesh TensorFlow's bucket rule, vectorised in NumPy with its float32 logarithm."""
    rel = np.asarray(rel, dtype=np.int64)
    ret = np.zeros_like(rel)
    nb = num_buckets
    if bidirectional:
        nb //= 2
        ret += (rel > 0) * nb
        n = np.abs(rel)
    else:
        n = np.maximum(-rel, 0)
    max_exact = nb // 2
    with np.errstate(divide="ignore"):
        v = (np.log(n.astype(np.float32) / np.float32(max_exact))
             / np.float32(math.log(max_distance / max_exact)) * np.float32(nb - max_exact))
    large = np.minimum(max_exact + np.trunc(np.maximum(v, 0)).astype(np.int64), nb - 1)
    return ret + np.where(n < max_exact, n, large)


T5_CONFIGS = [(32, 128, True), (32, 128, False), (16, 20, True), (64, 256, False), (8, 8, True),
              (10, 50, False)]


@pytest.mark.parametrize(("num_buckets", "max_distance", "bidirectional"), T5_CONFIGS)
def test_t5_bias_is_table_at_bucket(backend: Any, num_buckets: int, max_distance: int,
                                    bidirectional: bool) -> None:
    enc = per.get_encoder("t5", num_heads=3, num_buckets=num_buckets, max_distance=max_distance,
                          bidirectional=bidirectional)
    q = np.arange(40) * 7
    k = np.arange(50) * 11
    out = call(backend, enc.bias, q, k, params=backend_params(enc, backend))
    table = np_params(enc)["table"]
    buckets = t5_bucket_ref(k[None, :] - q[:, None], bidirectional, num_buckets, max_distance)
    want = np.moveaxis(table[buckets], -1, 0)  # (H, Q, K)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize(("num_buckets", "max_distance", "bidirectional"), T5_CONFIGS)
def test_t5_buckets_match_hugging_face(num_buckets: int, max_distance: int,
                                       bidirectional: bool) -> None:
    pytest.importorskip("transformers", reason=HF_REASON)
    import torch
    from transformers.models.t5.modeling_t5 import T5Attention

    rel = torch.arange(-4 * max_distance - 3, 4 * max_distance + 4)
    rel = torch.cat([rel, torch.tensor([10**6, -(10**6)])])
    want = T5Attention._relative_position_bucket(rel, bidirectional=bidirectional,
                                                 num_buckets=num_buckets,
                                                 max_distance=max_distance)
    enc = per.get_encoder("t5", num_heads=1, num_buckets=num_buckets, max_distance=max_distance,
                          bidirectional=bidirectional)
    assert torch.equal(enc.buckets(rel), want)
    host = [per.encoders.relative.t5_bucket(int(r), bidirectional=bidirectional,
                                            num_buckets=num_buckets, max_distance=max_distance)
            for r in rel]
    assert host == want.tolist()


@pytest.mark.parametrize("is_decoder", [False, True])
def test_t5_bias_matches_hugging_face_compute_bias(is_decoder: bool) -> None:
    pytest.importorskip("transformers", reason=HF_REASON)
    import torch
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    config = T5Config(d_model=32, d_kv=8, num_heads=4, relative_attention_num_buckets=32,
                      relative_attention_max_distance=128, is_decoder=is_decoder)
    torch.manual_seed(0)  # the module's random init is the table compared
    attn = T5Attention(config, has_relative_attention_bias=True)
    enc = per.get_encoder("t5", num_heads=4, bidirectional=not is_decoder)
    params = {"table": attn.relative_attention_bias.weight}  # (num_buckets, num_heads)
    for past in (0, 300):
        want = attn.compute_bias(5, 400, past_seen_tokens=past)  # (1, H, Q, K)
        got = enc.bias(torch.arange(5) + past, torch.arange(400), params=params,
                       dtype=torch.float32)
        assert torch.equal(got, want[0])


def test_t5_causal_future_keys_share_bucket_zero(backend: Any) -> None:
    enc = per.get_encoder("t5", num_heads=2, bidirectional=False)
    out = call(backend, enc.bias, [100], [100, 101, 150, 5000], params=backend_params(enc, backend))
    table = np_params(enc)["table"]
    np.testing.assert_array_equal(out[:, 0, :], np.repeat(table[0][:, None], 4, axis=1))


# -- ALiBi ---------------------------------------------------------------------------------------
def paper_get_slopes(n: int) -> list[float]:
    """Press et al., reference code ``get_slopes`` (attention_with_linear_biases, fairseq)."""

    def get_slopes_power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return get_slopes_power_of_2(closest) + paper_get_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 8, 12, 16, 20, 24, 40, 64, 96])
def test_alibi_slopes_follow_the_paper(n: int) -> None:
    enc = per.get_encoder("alibi", num_heads=n)
    np.testing.assert_allclose(enc.slopes, paper_get_slopes(n), rtol=1e-15)


def test_alibi_slopes_for_8_heads_are_powers_of_one_half() -> None:
    assert per.get_encoder("alibi", num_heads=8).slopes == tuple(2.0**-i for i in range(1, 9))


@pytest.mark.parametrize("n", [8, 6])
def test_alibi_bias_formula(backend: Any, n: int) -> None:
    enc = per.get_encoder("alibi", num_heads=n)
    q = np.arange(30) * 3
    k = np.arange(45) * 2
    out = call(backend, enc.bias, q, k)
    want = -np.asarray(paper_get_slopes(n))[:, None, None] * np.abs(q[:, None] - k[None, :])
    np.testing.assert_allclose(out, want, rtol=2**-22, atol=0)
    assert not np.signbit(out[:, np.arange(0, 30, 2), np.arange(0, 45, 3)]).any()  # +0 diagonal


def test_alibi_float32_output_is_within_an_ulp(backend: Any) -> None:
    enc = per.get_encoder("alibi", num_heads=12)
    if "float32" not in backend.float_dtypes():
        pytest.skip("no float32")
    q, k = np.arange(300), np.arange(300)
    out = call(backend, enc.bias, q, k, dtype="float32")
    want = -np.asarray(paper_get_slopes(12))[:, None, None] * np.abs(q[:, None] - k[None, :])
    np.testing.assert_allclose(out, want, rtol=2**-22, atol=0)


@pytest.mark.parametrize("n", [8, 12])
def test_alibi_matches_bloom_up_to_a_row_constant(n: int) -> None:
    """Bloom's ``build_alibi_tensor`` gives ``+m_h·k`` (batch·heads, 1, K), relying on softmax
    ignoring a per-row constant: for keys k <= q it equals our ``-m_h·|q - k|`` plus ``m_h·q``."""
    pytest.importorskip("transformers", reason=HF_REASON)
    import torch
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    seq = 64
    bloom = build_alibi_tensor(torch.ones(1, seq), n, torch.float32)[:, 0, :]  # (H, K)
    enc = per.get_encoder("alibi", num_heads=n)
    ours = enc.bias(torch.arange(seq), torch.arange(seq), dtype=torch.float64)  # (H, Q, K)
    slopes = torch.tensor(enc.slopes, dtype=torch.float64)
    causal = torch.tril(torch.ones(seq, seq, dtype=torch.bool))
    shifted = ours + slopes[:, None, None] * torch.arange(seq, dtype=torch.float64)[None, :, None]
    want = bloom.double()[:, None, :].expand(n, seq, seq)
    torch.testing.assert_close(shifted[:, causal], want[:, causal], rtol=1e-6, atol=1e-6)
    # and the softmax over the visible keys is the same
    mask = torch.where(causal, 0.0, -torch.inf).double()
    torch.testing.assert_close(torch.softmax(ours + mask, -1), torch.softmax(want + mask, -1),
                               rtol=1e-5, atol=1e-6)


# -- Shaw ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("max_distance", [1, 4, 16])
def test_shaw_formula(backend: Any, max_distance: int) -> None:
    enc = per.get_encoder("shaw", max_distance=max_distance, dim=5)
    q = np.arange(12) * 3
    k = np.arange(20)
    out = call(backend, enc.embed, q, k, params=backend_params(enc, backend))
    table = np_params(enc)["table"]
    idx = np.clip(k[None, :] - q[:, None], -max_distance, max_distance) + max_distance
    np.testing.assert_array_equal(out, table[idx])
    assert out.shape == (12, 20, 5)


# -- Transformer-XL ------------------------------------------------------------------------------
def xl_ref(q: Any, k: Any, dim: int, base: float = 10000.0) -> Any:
    rel = np.asarray(q, dtype=np.float64)[:, None] - np.asarray(k, dtype=np.float64)[None, :]
    inv_freq = 1.0 / base ** (np.arange(0.0, dim, 2.0) / dim)
    ang = rel[..., None] * inv_freq
    return np.concatenate([np.sin(ang), np.cos(ang)], axis=-1)


@pytest.mark.parametrize("dim", [2, 8, 64])
def test_transformer_xl_formula(backend: Any, dim: int) -> None:
    enc = per.get_encoder("transformer-xl", dim=dim)
    q = np.arange(10) + 5000
    k = np.arange(17) * 300
    out = call(backend, enc.embed, q, k)
    tol = 1e-10 if wide(backend) == "float64" else 2e-6
    np.testing.assert_allclose(out, xl_ref(q, k, dim), atol=tol, rtol=0)


def test_transformer_xl_equals_reference_code_pos_emb(backend: Any) -> None:
    """The reference ``PositionalEmbedding(pos_seq)`` with ``pos_seq = klen-1 … 0`` is
    ``R[q - k]`` for the last query against every key."""
    dim, klen = 16, 12
    pos_seq = np.arange(klen - 1, -1, -1.0)
    inv_freq = 1 / (10000 ** (np.arange(0.0, dim, 2.0) / dim))
    sinusoid = np.outer(pos_seq, inv_freq)
    pos_emb = np.concatenate([np.sin(sinusoid), np.cos(sinusoid)], axis=-1)
    enc = per.get_encoder("transformer-xl", dim=dim)
    out = call(backend, enc.embed, [klen - 1], np.arange(klen))[0]
    np.testing.assert_allclose(out, pos_emb, atol=2e-6)


def test_transformer_xl_accepts_real_positions(backend: Any) -> None:
    enc = per.get_encoder("transformer-xl", dim=8)
    dt = backend.float_dtypes()[wide(backend)]
    q = backend.from_numpy(np.asarray([0.5, 2.25]), dtype=dt)
    k = backend.from_numpy(np.asarray([0, 1, 3]))
    out = backend.to_numpy(enc.embed(q, k, dtype=dt))
    np.testing.assert_allclose(out, xl_ref([0.5, 2.25], [0, 1, 3], 8), atol=2e-6)


# -- batching, namespaces, gradients -------------------------------------------------------------
@pytest.mark.parametrize("name", ["t5", "alibi", "shaw", "transformer-xl"])
def test_batched_positions_broadcast(backend: Any, name: str) -> None:
    opts = {"t5": {"num_heads": 3}, "alibi": {"num_heads": 3},
            "shaw": {"max_distance": 4, "dim": 6}, "transformer-xl": {"dim": 6}}[name]
    enc: Any = per.get_encoder(name, **opts)
    method = enc.bias if enc.kind == "bias" else enc.embed
    params = backend_params(enc, backend) if enc.learned else None
    rng = np.random.default_rng(0)
    q = rng.integers(0, 300, size=(2, 1, 4))
    k = rng.integers(0, 300, size=(1, 3, 5))
    out = call(backend, method, q, k, params=params)
    lead = 3 if enc.kind == "bias" else 0
    assert out.shape == ((2, 3, 3, 4, 5) if lead else (2, 3, 4, 5, 6))
    for i in range(2):
        for j in range(3):
            np.testing.assert_array_equal(out[i, j], call(backend, method, q[i, 0], k[0, j],
                                                          params=params))


@pytest.mark.parametrize("name", ["t5", "shaw"])
def test_gradient_is_scatter_add_of_upstream(backend: Any, name: str) -> None:
    grad = backend.grad(lambda p: None)
    if grad is None:
        pytest.skip(f"{backend.name} has no autodiff")
    enc: Any = per.get_encoder(name, **({"num_heads": 3} if name == "t5" else
                                        {"max_distance": 3, "dim": 4}))
    method = enc.bias if name == "t5" else enc.embed
    q, k = np.arange(6) * 2, np.arange(9)
    rng = np.random.default_rng(1)
    shape = (3, 6, 9) if name == "t5" else (6, 9, 4)
    w = rng.standard_normal(shape)
    dt = backend.float_dtypes()[wide(backend)]
    xp = backend.namespace()
    wb = backend.from_numpy(w, dtype=dt)
    qb, kb = backend.from_numpy(q), backend.from_numpy(k)

    def loss(p: Any) -> Any:
        return xp.sum(method(qb, kb, params=p, dtype=dt) * wb)

    g = backend.to_numpy(backend.grad(loss)(backend_params(enc, backend))["table"])
    want = np.zeros(enc.param_shapes()["table"])
    if name == "t5":
        b = t5_bucket_ref(k[None, :] - q[:, None], True, 32, 128)
        np.add.at(want, b, np.moveaxis(w, 0, -1))
    else:
        idx = np.clip(k[None, :] - q[:, None], -3, 3) + 3
        np.add.at(want, idx, w)
    np.testing.assert_allclose(g, want, atol=1e-5)


def test_lists_of_positions_follow_the_params_framework(backend: Any) -> None:
    enc: Any = per.get_encoder("t5", num_heads=2)
    out = enc.bias([0, 1], [0, 1, 2], params=backend_params(enc, backend))
    assert per.registry.default_registry.backend_of(out) is backend


# -- errors --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("opts", "match"), [
    ({"num_heads": 0}, "option 'num_heads' must be a positive integer, got 0"),
    ({"num_heads": 2, "num_buckets": 2}, "option 'num_buckets' must be >= 4 with bidirectional"),
    ({"num_heads": 2, "num_buckets": 32, "max_distance": 8},
     "option 'max_distance' must be > 8"),
    ({"num_heads": 2, "bidirectional": 1}, "option 'bidirectional' must be"),
])
def test_t5_bad_options(opts: dict[str, Any], match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        per.get_encoder("t5", **opts)


def test_other_bad_options() -> None:
    with pytest.raises(ValueError, match="option 'dim' must be a positive even integer <= 65536, got 7"):
        per.get_encoder("transformer-xl", dim=7)
    with pytest.raises(ValueError, match="option 'max_distance' must be a positive integer"):
        per.get_encoder("shaw", max_distance=0, dim=4)
    with pytest.raises(TypeError, match="missing required option 'num_heads'"):
        per.get_encoder("alibi")


def test_position_errors(backend: Any) -> None:
    t5: Any = per.get_encoder("t5", num_heads=2)
    alibi: Any = per.get_encoder("alibi", num_heads=2)
    p = backend_params(t5, backend)
    ar = backend.from_numpy(np.arange(3))
    with pytest.raises(ValueError, match="q_positions is a scalar"):
        t5.bias(backend.from_numpy(np.asarray(1)), ar, params=p)
    with pytest.raises(ValueError, match="do not broadcast"):
        alibi.bias(backend.from_numpy(np.zeros((2, 3), dtype=np.int64)),
                   backend.from_numpy(np.zeros((3, 4), dtype=np.int64)))
    fl = backend.from_numpy(np.arange(3.0), dtype=backend.float_dtypes()["float32"])
    with pytest.raises(TypeError, match="k_positions must have an integer dtype"):
        alibi.bias(ar, fl)
    with pytest.raises(TypeError, match="q_positions must have an integer dtype"):
        t5.bias(fl, ar, params=p)


def test_params_errors(backend: Any) -> None:
    t5: Any = per.get_encoder("t5", num_heads=2)
    alibi: Any = per.get_encoder("alibi", num_heads=2)
    ar = backend.from_numpy(np.arange(3))
    with pytest.raises(TypeError, match=r"t5 needs params \(from enc.init\(xp\)\); got None"):
        t5.bias(ar, ar)
    with pytest.raises(TypeError, match="alibi has no learned parameters"):
        alibi.bias(ar, ar, params={"table": ar})
    good = backend_params(t5, backend)
    with pytest.raises(ValueError, match=r"params must have keys \['table'\], got \['tabel'\]"):
        t5.bias(ar, ar, params={"tabel": good["table"]})
    bad = backend.from_numpy(np.zeros((32, 3)), dtype=backend.float_dtypes()["float32"])
    with pytest.raises(ValueError, match=r"params\['table'\].shape=\(32, 3\), but should be "
                                         r"\(32, 2\)"):
        t5.bias(ar, ar, params={"table": bad})
    with pytest.raises(TypeError, match=r"params\['table'\] must be an array"):
        t5.bias(ar, ar, params={"table": [[0.0, 0.0]] * 32})
    with pytest.raises(TypeError, match=r"params\['table'\] must have a real floating dtype"):
        t5.bias(ar, ar, params={"table": backend.from_numpy(np.zeros((32, 2), dtype=np.int64))})


def test_params_of_another_framework_are_an_error(backend: Any) -> None:
    if backend.name == "numpy":
        pytest.skip("needs a second framework")
    enc: Any = per.get_encoder("shaw", max_distance=2, dim=3)
    with pytest.raises(TypeError, match="inputs mix arrays of"):
        enc.embed(backend.from_numpy(np.arange(3)), backend.from_numpy(np.arange(3)),
                  params=enc.init(np))


# -- the public pairing helpers (peregistry.plugin) ----------------------------------------------
def _clipped_table() -> type[per.RelativeEmbedding]:
    from peregistry.plugin import LearnedParams, distance, gather

    class ClippedTable(LearnedParams, per.RelativeEmbedding):
        """Shaw-style table written from the public building blocks only."""

        name = "test-clipped-table"
        max_distance = per.Option(int, 3)
        dim = per.Option(int, 4)

        @property
        def out_dim(self) -> int:
            return int(self._values["dim"])

        def param_shapes(self) -> dict[str, tuple[int, ...]]:
            m = int(self._values["max_distance"])
            return {"table": (2 * m + 1, int(self._values["dim"]))}

        def _embed(self, q: Any, k: Any, *, params: Any, ctx: Any, dtype: Any) -> Any:
            m, xp = int(self._values["max_distance"]), ctx.xp
            # (two wheres, not xp.clip: array-api-compat's torch clip asks math.isnan of its
            # bounds, which torch.compile(dynamic=True) makes symbolic: docs/conformance.md)
            d = distance(q, k, ctx=ctx)
            idx = xp.where(d > m, m, xp.where(d < -m, -m, d)) + m
            return gather(params["table"], idx, axis=0, ctx=ctx)

    return ClippedTable


def test_public_pairing_helpers_give_k_minus_q_and_table_rows(backend: Any) -> None:
    enc = _clipped_table()(max_distance=3, dim=4)
    q = np.asarray([[0, 5, 2]], dtype=np.uint8)  # uint8: k - q must not wrap around
    k = np.asarray([[7, 1, 0, 2]], dtype=np.uint8)
    params = backend_params(enc, backend)
    got = call(backend, enc.embed, q, k, params=params)
    d = k.astype(np.int64)[..., None, :] - q.astype(np.int64)[..., :, None]
    want = np_params(enc)["table"][np.clip(d, -3, 3) + 3]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got.shape == (1, 3, 4, 4)


def test_public_pairing_helpers_pass_the_conformance_suite(backend: Any) -> None:
    from peregistry.testing import check_encoder

    report = check_encoder(_clipped_table()(max_distance=3, dim=4), backends=backend.name)
    assert report.ok, str(report)


def test_distance_index_dtype_and_compute_dtype(backend: Any) -> None:
    from peregistry.encoders.base import make_context
    from peregistry.plugin import compute_dtype, distance, index_dtype

    q = backend.from_numpy(np.asarray([0, 3], dtype=np.int32))
    k = backend.from_numpy(np.asarray([1, 2, 9], dtype=np.int32))
    ctx, (qa, ka) = make_context("test", (q, k))
    d = distance(qa, ka, ctx=ctx)
    assert d.dtype == index_dtype(ctx)
    np.testing.assert_array_equal(backend.to_numpy(d), [[1, 2, 9], [-2, -1, 6]])
    floats = backend.float_dtypes()
    assert compute_dtype(floats["float32"], ctx=ctx) == floats["float32"]
    if "bfloat16" in floats:
        assert compute_dtype(floats["bfloat16"], ctx=ctx) == floats["float32"]


# -- ALiBi's max_bias (issue 16, item 3): MPT's and keras-hub's alibi_bias_max -------------------
@pytest.mark.parametrize(("heads", "max_bias"), [(8, 8.0), (12, 8.0), (16, 16.0), (12, 12.5)])
def test_alibi_max_bias_is_the_papers_rule_with_range_b(heads: int, max_bias: float) -> None:
    """m_h = 2^(-B·h/p) for the largest power of two p <= n heads, then every other slope of
    2p heads, in float64 from the formula (Press et al. 2022, §3, with B for the paper's 8)."""
    p = 2 ** int(np.floor(np.log2(heads)))
    want = [2.0 ** (-max_bias * (h + 1) / p) for h in range(p)]
    want += [2.0 ** (-max_bias * (2 * h + 1) / (2 * p)) for h in range(heads - p)]
    enc = per.get_encoder("alibi", num_heads=heads, max_bias=max_bias)
    np.testing.assert_allclose(enc.slopes, want, rtol=4 * np.finfo(np.float64).eps, atol=0)
    bias = enc.bias(np.asarray([7]), np.arange(8))
    np.testing.assert_allclose(bias[:, 0, :], -np.asarray(want)[:, None] * (7 - np.arange(8)),
                               rtol=4 * np.finfo(np.float64).eps, atol=0)


@pytest.mark.parametrize(("heads", "max_bias"), [(8, 8), (16, 16), (4, 12)])
def test_alibi_max_bias_matches_mpt(heads: int, max_bias: int) -> None:
    """MPT (transformers' build_mpt_alibi_tensor, float32) for power-of-two head counts; for
    others MPT interleaves the slopes of the next power of two, a rule of its own."""
    torch = pytest.importorskip("torch")
    mpt = pytest.importorskip("transformers.models.mpt.modeling_mpt",
                              reason="transformers is the reference only in the torch env")
    seq = 9
    want = mpt.build_mpt_alibi_tensor(heads, seq, alibi_bias_max=max_bias)[:, 0, :]  # (H, K)
    enc = per.get_encoder("alibi", num_heads=heads, max_bias=float(max_bias))
    got = enc.bias(torch.tensor([seq - 1]), torch.arange(seq), dtype=torch.float32)[:, 0, :]
    tol = 4 * float(torch.finfo(torch.float32).eps) * float(want.abs().max())
    assert float((got - want).abs().max()) <= tol


def test_alibi_max_bias_is_validated() -> None:
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="alibi: option 'max_bias' must be a finite number"):
            per.get_encoder("alibi", num_heads=8, max_bias=bad)
