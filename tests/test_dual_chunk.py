"""Dual chunk attention positions (``dual-chunk``) against vLLM's ``DualChunkRotaryEmbedding``
(``vllm/model_executor/layers/rotary_embedding/dual_chunk_rope.py``) re-written in float64 NumPy
below, every role's positions, tables and rotations on every selected backend; DCA attention
assembled from the tables against vLLM's chunk loop (``_dual_chunk_flash_attn_prefill_func``,
dense, no sparse attention); the law that DCA scores are RoPE's within a chunk and up to a
distance of ``local_size``; options and inputs refused with errors that name them. The
conformance suite runs from ``tests/test_conformance.py``."""

from __future__ import annotations

import math
import pickle
from typing import Any

import array_api_compat
import numpy as np
import pytest

import peregistry as per
from peregistry.encoders.dual_chunk import DualChunk
from peregistry.testing._core import EPS

ROLES = DualChunk._fields


# -- vLLM's computation in float64 ----------------------------------------------------------------
class VllmDualChunk:
    """vLLM's ``DualChunkRotaryEmbedding`` in float64 NumPy: the same five cos/sin caches
    (``_compute_cos_sin_cache``), the same rows per role (``forward_native``) and the same
    rotation (``_apply_rotary_embedding`` with ``rotate_neox``/``rotate_gptj``)."""

    def __init__(self, head_size: int, rotary_dim: int, max_position: int, base: float,
                 is_neox_style: bool, chunk_size: int, local_size: int) -> None:
        self.head_size, self.rotary_dim, self.neox = head_size, rotary_dim, is_neox_style
        self.chunk_len = chunk_size - local_size
        inv_freq = 1.0 / base ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
        n = self.chunk_len
        steps = np.arange(n, dtype=np.float64)
        self.t = {
            "q": steps,
            "qc": np.minimum(steps + n, chunk_size),
            "k": np.arange(max_position, dtype=np.float64) % n,
            "qc_no_clamp": steps + n,
            "q_inter": steps + chunk_size,
        }
        self.cache = {key: np.concatenate((np.cos(np.outer(t, inv_freq)),
                                           np.sin(np.outer(t, inv_freq))), axis=-1)
                      for key, t in self.t.items()}

    def rows(self, positions: np.ndarray) -> dict[str, tuple[str, np.ndarray]]:
        """Per role: the cache and the row indices ``forward_native`` reads."""
        r = positions % self.chunk_len
        return {"q_intra": ("q", r), "q_succ": ("qc", r),
                "q_inter": ("qc", np.full_like(positions, self.chunk_len - 1)),
                "q_succ_critical": ("qc_no_clamp", r), "q_inter_critical": ("q_inter", r),
                "k": ("k", positions)}

    def positions(self, positions: np.ndarray) -> dict[str, np.ndarray]:
        return {role: self.t[cache][idx] for role, (cache, idx) in self.rows(positions).items()}

    def cos_sin(self, positions: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Full-width ``(cos, sin)`` per role, as ``_apply_rotary_embedding`` spreads them."""
        out = {}
        for role, (cache, idx) in self.rows(positions).items():
            cos, sin = np.split(self.cache[cache][idx], 2, axis=-1)
            if self.neox:
                cos, sin = np.concatenate((cos, cos), -1), np.concatenate((sin, sin), -1)
            else:
                cos, sin = np.repeat(cos, 2, axis=-1), np.repeat(sin, 2, axis=-1)
            out[role] = (cos, sin)
        return out

    def rotate(self, x: np.ndarray, positions: np.ndarray) -> dict[str, np.ndarray]:
        """``x`` ``(tokens, heads, head_size)`` rotated per role (positions ``(tokens,)``)."""
        rd = self.rotary_dim
        rot, rest = x[..., :rd], x[..., rd:]
        if self.neox:
            turned = np.concatenate((-rot[..., rd // 2:], rot[..., :rd // 2]), axis=-1)
        else:
            turned = np.stack((-rot[..., 1::2], rot[..., 0::2]), axis=-1).reshape(rot.shape)
        out = {}
        for role, (cos, sin) in self.cos_sin(positions).items():
            out[role] = np.concatenate((rot * cos[:, None] + turned * sin[:, None], rest), -1)
        return out


def vllm_prefill(q: np.ndarray, q_succ: np.ndarray, q_inter: np.ndarray, k: np.ndarray,
                 v: np.ndarray, chunk_len: int, softmax_scale: float) -> np.ndarray:
    """vLLM's ``_dual_chunk_flash_attn_prefill_func`` for one head, a whole prompt and no
    sparse attention, in float64: per chunk of queries, causal attention to its own chunk
    (``q``), full attention to the chunk before (``q_succ``) and to all older ones
    (``q_inter``), merged by their log-sum-exps (``_merge_attn_outputs``)."""

    def attend(qs: np.ndarray, ks: np.ndarray, vs: np.ndarray,
               causal: bool) -> tuple[np.ndarray, np.ndarray]:
        s = (qs @ ks.T) * softmax_scale
        if causal:  # flash-attn's causal mask, aligned at the bottom right (here: square)
            s = np.where(np.tril(np.ones(s.shape, dtype=bool), s.shape[1] - s.shape[0]), s,
                         -np.inf)
        m = s.max(-1, keepdims=True)
        e = np.exp(s - m)
        return (e / e.sum(-1, keepdims=True)) @ vs, (m + np.log(e.sum(-1, keepdims=True)))[:, 0]

    n, outs, begin = k.shape[0], [], 0
    while begin < n:
        prev_end = (begin // chunk_len) * chunk_len
        end = min(prev_end + chunk_len, n)
        parts = [attend(q[begin:end], k[prev_end:end], v[prev_end:end], True)]
        if prev_end - chunk_len >= 0:
            parts.append(attend(q_succ[begin:end], k[prev_end - chunk_len:prev_end],
                                v[prev_end - chunk_len:prev_end], False))
        if prev_end - 2 * chunk_len >= 0:
            parts.append(attend(q_inter[begin:end], k[:prev_end - chunk_len],
                                v[:prev_end - chunk_len], False))
        lse = np.stack([p[1] for p in parts])
        w = np.exp(lse - lse.max(0))
        w /= w.sum(0)
        outs.append(sum(wi[:, None] * p[0] for wi, p in zip(w, parts, strict=True)))
        begin = end
    return np.concatenate(outs)


# -- DCA attention from the tables, on any backend (the recipe of docs/rotary.md) -----------------
def dca_attention(xp: Any, r: DualChunk, v: Any, chunk_len: int, scale: float) -> Any:
    """Causal DCA attention ``(..., n, d)`` from ``rotate_dual_chunk``'s queries and keys: each
    pair's score from the query role of the key's chunk (own chunk, the one before, older)."""
    n = r.k.shape[-2]
    i = xp.arange(n, device=array_api_compat.device(r.k))
    ci, cj = (i // chunk_len)[:, None], (i // chunk_len)[None, :]
    kt = xp.matrix_transpose(r.k)
    scores = xp.where(ci == cj, r.q_intra @ kt,
                      xp.where(ci == cj + 1, r.q_succ @ kt, r.q_inter @ kt))
    scores = xp.where(i[None, :] <= i[:, None], scores * scale, -math.inf)
    e = xp.exp(scores - xp.max(scores, axis=-1, keepdims=True))
    return (e / xp.sum(e, axis=-1, keepdims=True)) @ v


# -- helpers --------------------------------------------------------------------------------------
def _wide(backend: Any) -> str:
    return "float64" if "float64" in backend.float_dtypes() else "float32"


def _arr(backend: Any, a: Any, dtype: str | None = None) -> Any:
    target = None if dtype is None else backend.float_dtypes()[dtype]
    return backend.from_numpy(np.asarray(a), dtype=target)


def tolerance(name: str, *, max_angle: float, scale: float) -> float:
    """What ``name`` results may be from float64: each angle ``P·ω`` (``ω <= 1``) rounded in
    the computing dtype (float32 for bfloat16/float16 inputs) is off by up to ``|P|·eps/2``,
    cos/sin and the rotation's two products and sum add a few ulps of the computing dtype, and
    a narrow result is rounded once more (half an ulp of ``name``)."""
    compute = name if name in ("float32", "float64") else "float32"
    return scale * (EPS[compute] * (max_angle + 16) + (EPS[name] if compute != name else 0.0))


#: (options, vLLM's constructor arguments besides head_size/rotary_dim/max_position/base).
CONFIGS = [
    {"dim": 16, "chunk_size": 64, "local_size": 16},
    {"dim": 16, "chunk_size": 64, "local_size": 16, "layout": "interleaved", "theta": 5e5},
    {"dim": 24, "rotary_dim": 16, "chunk_size": 40, "local_size": 0},
    {"dim": 8, "chunk_size": 20, "local_size": 13},  # 2L - 1 < chunk_size: q_inter below it
]


def _ids(o: dict[str, Any]) -> str:
    return "-".join(f"{k}{v}" for k, v in o.items())


def _vllm(options: dict[str, Any], max_position: int) -> VllmDualChunk:
    return VllmDualChunk(options["dim"], options.get("rotary_dim") or options["dim"],
                         max_position, options.get("theta", 1e4),
                         options.get("layout", "half") == "half", options["chunk_size"],
                         options["local_size"])


def _positions(rng: np.random.Generator, options: dict[str, Any], n: int) -> np.ndarray:
    """Seeded positions over several chunks, the first of a chunk and the last included."""
    top = 7 * options["chunk_size"]
    return np.concatenate([rng.integers(0, top, size=n - 3), [0, top - 1, options["chunk_size"]]])


# -- vLLM's positions, tables and rotations -------------------------------------------------------
@pytest.mark.parametrize("options", CONFIGS, ids=_ids)
def test_positions_are_vllms(backend: Any, xp: Any, options: dict[str, Any]) -> None:
    enc = per.get_encoder("dual-chunk", **options)
    pos = _positions(np.random.default_rng(0), options, 40)
    got = enc.dual_chunk_positions(_arr(backend, pos))  # type: ignore[attr-defined]
    want = _vllm(options, int(pos.max()) + 1).positions(pos)
    assert isinstance(got, DualChunk) and got._fields == ROLES
    for role in ROLES:
        g = backend.to_numpy(getattr(got, role))
        assert xp.isdtype(getattr(got, role).dtype, "integral"), role
        np.testing.assert_array_equal(g, want[role].astype(np.int64), err_msg=role)


@pytest.mark.parametrize("options", CONFIGS, ids=_ids)
def test_tables_are_vllms(backend: Any, options: dict[str, Any]) -> None:
    enc = per.get_encoder("dual-chunk", **options)
    pos = _positions(np.random.default_rng(1), options, 40).reshape(5, 8)
    name = _wide(backend)
    got = enc.dual_chunk_cos_sin(_arr(backend, pos), dtype=name)  # type: ignore[attr-defined]
    ref = _vllm(options, int(pos.max()) + 1)
    want = ref.cos_sin(pos.ravel())
    top = options["chunk_size"] + ref.chunk_len  # the largest position of any role
    tol = tolerance(name, max_angle=top, scale=1.0)
    for role in ROLES:
        for what, g, w in zip(("cos", "sin"), getattr(got, role), want[role], strict=True):
            g = backend.to_numpy(g)
            assert g.shape == (5, 8, ref.rotary_dim), (role, g.shape)
            err = np.abs(g.reshape(w.shape) - w).max()
            assert err <= tol, f"{role} {what}: {err:.3g} from vLLM's, tolerance {tol:.3g}"
    keys = enc.cos_sin(_arr(backend, pos), dtype=name)  # type: ignore[attr-defined]
    for a, b in zip(keys, got.k, strict=True):
        np.testing.assert_array_equal(backend.to_numpy(a), backend.to_numpy(b))


@pytest.mark.parametrize("options", CONFIGS, ids=_ids)
def test_rotations_are_vllms_in_every_dtype(backend: Any, options: dict[str, Any]) -> None:
    enc = per.get_encoder("dual-chunk", **options)
    rng = np.random.default_rng(2)
    tokens, heads, kv_heads = 24, 3, 2
    pos = _positions(rng, options, tokens)
    ref = _vllm(options, int(pos.max()) + 1)
    top = options["chunk_size"] + ref.chunk_len
    for name in backend.float_dtypes():
        # (heads, tokens, dim) as peregistry rotates; vLLM's (tokens, heads, dim) below
        qb = _arr(backend, rng.standard_normal((heads, tokens, options["dim"])), name)
        kb = _arr(backend, rng.standard_normal((kv_heads, tokens, options["dim"])), name)
        got = enc.rotate_dual_chunk(qb, kb, _arr(backend, pos))  # type: ignore[attr-defined]
        q64 = backend.to_numpy(qb).astype(np.float64)  # the inputs as rounded to the dtype
        k64 = backend.to_numpy(kb).astype(np.float64)
        want = ref.rotate(q64.transpose(1, 0, 2), pos)
        want["k"] = ref.rotate(k64.transpose(1, 0, 2), pos)["k"]
        for role in ROLES:
            out = getattr(got, role)
            x64 = k64 if role == "k" else q64
            assert out.dtype == (kb if role == "k" else qb).dtype, (role, name)
            assert tuple(out.shape) == x64.shape, (role, name)
            err = np.abs(backend.to_numpy(out).astype(np.float64)
                         - want[role].transpose(1, 0, 2)).max()
            tol = tolerance(name, max_angle=top, scale=float(np.abs(x64).max()) * math.sqrt(2))
            assert err <= tol, f"{role} {name}: {err:.3g} from vLLM's, tolerance {tol:.3g}"


def test_rotate_is_the_keys_and_the_intra_chunk_queries(backend: Any) -> None:
    """``rotate``/``cos_sin``/``tables`` are the keys' rotation, bit for bit the ``k`` and
    ``q_intra`` of ``rotate_dual_chunk``; the other roles turn as plain RoPE at their own
    positions, and ``cos_sin`` agrees with ``rotate``."""
    enc = per.get_encoder("dual-chunk", dim=16, chunk_size=48, local_size=8)
    rope = per.get_encoder("rotary", dim=16)
    name = _wide(backend)
    rng = np.random.default_rng(3)
    q = _arr(backend, rng.standard_normal((2, 30, 16)), name)
    pos = _arr(backend, rng.integers(0, 500, size=30))
    r = enc.rotate_dual_chunk(q, q, pos)  # type: ignore[attr-defined]
    same = backend.to_numpy(enc.rotate(q, pos))  # type: ignore[attr-defined]
    np.testing.assert_array_equal(backend.to_numpy(r.k), same)
    np.testing.assert_array_equal(backend.to_numpy(r.q_intra), same)
    np.testing.assert_array_equal(backend.to_numpy(enc.tables(pos).rotate(q)), same)  # type: ignore[attr-defined]
    roles = enc.dual_chunk_positions(pos)  # type: ignore[attr-defined]
    for role in ROLES[1:5]:
        np.testing.assert_array_equal(backend.to_numpy(getattr(r, role)),
                                      backend.to_numpy(rope.rotate(q, getattr(roles, role))))  # type: ignore[attr-defined]
    cos, sin = (backend.to_numpy(t) for t in enc.dual_chunk_cos_sin(pos, dtype=name).q_succ)  # type: ignore[attr-defined]
    x = backend.to_numpy(q)
    want = x * cos + np.concatenate((-x[..., 8:], x[..., :8]), -1) * sin
    np.testing.assert_allclose(backend.to_numpy(r.q_succ), want, rtol=0,
                               atol=8 * EPS[name] * np.abs(x).max())


def test_positions_none_is_offset_plus_arange(backend: Any) -> None:
    """Prefill (``positions=None``) and one decoding step (``offset``) equal explicit positions."""
    enc = per.get_encoder("dual-chunk", dim=8, chunk_size=16, local_size=4)
    name = _wide(backend)
    rng = np.random.default_rng(4)
    q = _arr(backend, rng.standard_normal((2, 7, 8)), name)
    k = _arr(backend, rng.standard_normal((1, 7, 8)), name)
    for offset in (0, 29):
        a = enc.rotate_dual_chunk(q, k, offset=offset)  # type: ignore[attr-defined]
        b = enc.rotate_dual_chunk(q, k, _arr(backend, offset + np.arange(7)))  # type: ignore[attr-defined]
        for role in ROLES:
            np.testing.assert_array_equal(backend.to_numpy(getattr(a, role)),
                                          backend.to_numpy(getattr(b, role)), err_msg=role)


def test_rotate_dual_chunk_compiles(backend: Any) -> None:
    """Under the backend's compiler (jax.jit, torch.compile) every role equals eager."""
    enc = per.get_encoder("dual-chunk", dim=8, chunk_size=16, local_size=4)

    def fn(q: Any, k: Any, pos: Any) -> tuple[Any, ...]:
        return tuple(enc.rotate_dual_chunk(q, k, pos)) + tuple(  # type: ignore[attr-defined]
            enc.rotate_dual_chunk(q, k, offset=5))  # type: ignore[attr-defined]

    compiled = backend.jit(fn)
    if compiled is None:
        pytest.skip(f"{backend.name} has no compiler")
    rng = np.random.default_rng(5)
    q = _arr(backend, rng.standard_normal((2, 9, 8)), "float32")
    k = _arr(backend, rng.standard_normal((2, 9, 8)), "float32")
    pos = _arr(backend, rng.integers(0, 200, size=9))
    for got, want in zip(compiled(q, k, pos), fn(q, k, pos), strict=True):
        np.testing.assert_allclose(backend.to_numpy(got), backend.to_numpy(want), rtol=0,
                                   atol=64 * EPS["float32"] * 4)


# -- DCA attention ---------------------------------------------------------------------------------
@pytest.mark.parametrize("options", CONFIGS, ids=_ids)
def test_attention_from_the_tables_is_vllms(backend: Any, xp: Any,
                                            options: dict[str, Any]) -> None:
    """DCA attention assembled from ``rotate_dual_chunk`` (one softmax over the three roles'
    scores) equals vLLM's chunk loop on vLLM's own rotations, in float64, with DCA's length
    scaling (``original_max_position_embeddings``) on keys and softmax scale."""
    opts = {**options, "original_max_position_embeddings": 2 * options["chunk_size"]}
    enc = per.get_encoder("dual-chunk", **opts)
    n, d = 5 * options["chunk_size"] - 3, options["dim"]  # a last chunk cut short
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((n, d)) for _ in range(3))
    factor = enc.attention_scaling(n)  # type: ignore[attr-defined]
    assert factor > 1.0
    scale = factor**2 / math.sqrt(d)  # vLLM: keys times the factor, softmax scale too
    ref = _vllm(options, n)
    pos = np.arange(n)
    rq, rk = ref.rotate(q[:, None], pos), ref.rotate(k[:, None], pos)["k"][:, 0]
    want = vllm_prefill(rq["q_intra"][:, 0], rq["q_succ"][:, 0], rq["q_inter"][:, 0], rk, v,
                        ref.chunk_len, scale)
    name = _wide(backend)
    r = enc.rotate_dual_chunk(_arr(backend, q, name), _arr(backend, k, name))  # type: ignore[attr-defined]
    got = backend.to_numpy(dca_attention(xp, r, _arr(backend, v, name), enc.chunk_len, scale))  # type: ignore[attr-defined]
    # a score is off by ~d·|q||k|·tolerance; the softmax turns it into a relative error of v
    logit = float(np.abs(q).max() * np.abs(k).max()) * d * scale
    tol = tolerance(name, max_angle=options["chunk_size"] + ref.chunk_len,
                    scale=logit * float(np.abs(v).max()) * 4)
    err = np.abs(got - want).max()
    assert err <= tol, f"DCA attention {err:.3g} from vLLM's loop, tolerance {tol:.3g}"


@pytest.mark.parametrize("options", CONFIGS, ids=_ids)
def test_scores_are_ropes_within_a_chunk_and_the_local_window(backend: Any,
                                                               options: dict[str, Any]) -> None:
    """The law: for a query at ``i`` and a key at ``j <= i`` in one chunk, or in the chunk
    before with the query at most ``local_size`` into its own (so every pair at a distance
    ``i - j <= min(local_size, chunk_len)``), the DCA score equals RoPE's ``<R(i)q, R(j)k>``;
    elsewhere it differs (positions clamped), and no DCA distance exceeds ``chunk_size``."""
    enc = per.get_encoder("dual-chunk", **options)
    rope = per.get_encoder("rotary", **{k: v for k, v in options.items()
                                        if k not in ("chunk_size", "local_size")})
    n, d = 4 * options["chunk_size"], options["dim"]
    name = _wide(backend)
    rng = np.random.default_rng(7)
    q, k = (_arr(backend, rng.standard_normal((n, d)), name) for _ in range(2))
    r = enc.rotate_dual_chunk(q, k)  # type: ignore[attr-defined]

    def scores(a: Any, b: Any) -> np.ndarray:
        return np.asarray(backend.to_numpy(a), np.float64) @ np.asarray(
            backend.to_numpy(b), np.float64).T

    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    ci, cj, L = i // enc.chunk_len, j // enc.chunk_len, enc.chunk_len  # type: ignore[attr-defined]
    dca = np.where(ci == cj, scores(r.q_intra, r.k),
                   np.where(ci == cj + 1, scores(r.q_succ, r.k), scores(r.q_inter, r.k)))
    plain = scores(rope.rotate(q), rope.rotate(k))  # type: ignore[attr-defined]
    causal = j <= i
    exact = causal & ((ci == cj) | ((ci == cj + 1) & (i % L <= options["local_size"])))
    window = min(options["local_size"], L)  # (a longer window reaches two chunks back)
    assert np.all(exact[causal & (i - j <= window)])
    logit = float(np.abs(backend.to_numpy(q)).max() * np.abs(backend.to_numpy(k)).max()) * d
    tol = tolerance(name, max_angle=n, scale=2 * logit)  # two rotated vectors per score
    err = np.abs(dca - plain)[exact].max()
    assert err <= tol, f"DCA scores differ from RoPE's by {err:.3g} where they should agree"
    assert np.abs(dca - plain)[causal & ~exact].max() > 10 * tol  # clamped elsewhere
    roles = {f: np.asarray(backend.to_numpy(v)) for f, v in
             enc.dual_chunk_positions(_arr(backend, np.arange(n)))._asdict().items()}  # type: ignore[attr-defined]
    p_q = np.where(ci == cj, roles["q_intra"][:, None],
                   np.where(ci == cj + 1, roles["q_succ"][:, None], roles["q_inter"][:, None]))
    distance = (p_q - roles["k"][None, :])[causal]
    assert distance.min() >= 0 and distance.max() <= options["chunk_size"]
    assert np.array_equal((p_q - roles["k"][None, :])[exact], (i - j)[exact])


# -- options, inputs, identity ----------------------------------------------------------------------
@pytest.mark.parametrize(("options", "error", "words"), [
    ({"chunk_size": 64, "local_size": 64}, ValueError, ["'local_size'", "64", "0..63"]),
    ({"chunk_size": 64, "local_size": 80}, ValueError, ["'local_size'", "80", "chunk_size=64"]),
    ({"chunk_size": 64, "local_size": -1}, ValueError, ["'local_size'", "-1", ">= 0"]),
    ({"chunk_size": 0, "local_size": 0}, ValueError, ["'chunk_size'", "0", "1..1073741824"]),
    ({"chunk_size": 2**31, "local_size": 0}, ValueError, ["'chunk_size'", str(2**31)]),
    ({"chunk_size": 64.5, "local_size": 0}, TypeError, ["chunk_size", "64.5"]),
    ({"chunk_size": 64}, TypeError, ["local_size"]),
    ({"chunk_size": 64, "local_size": 8, "original_max_position_embeddings": 0}, ValueError,
     ["'original_max_position_embeddings'", "0", "positive"]),
    ({"chunk_size": 64, "local_size": 8, "rotary_dim": 32}, ValueError,
     ["'rotary_dim'", "32", "dim (16)"]),
    ({"chunk_size": 64, "local_size": 8, "scaling": {"type": "linear", "factor": 2.0}},
     TypeError, ["scaling"]),
])
def test_bad_options_are_named(options: dict[str, Any], error: type[Exception],
                               words: list[str]) -> None:
    with pytest.raises(error) as info:
        per.get_encoder("dual-chunk", dim=16, **options)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_bad_inputs_are_named() -> None:
    enc = per.get_encoder("dual-chunk", dim=8, chunk_size=16, local_size=4)
    x = np.zeros((2, 5, 8))
    with pytest.raises(TypeError, match="positions must have an integer dtype"):
        enc.rotate(x, np.arange(5.0))  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="positions must have an integer dtype"):
        enc.dual_chunk_positions(np.arange(5.0))  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"q.shape=\(2, 5, 8\) and k.shape=\(2, 6, 8\)"):
        enc.rotate_dual_chunk(x, np.zeros((2, 6, 8)))  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="x.shape"):
        enc.rotate_dual_chunk(x, np.zeros((2, 5, 4)))  # type: ignore[attr-defined]
    for bad in (0, -3, 2.5, True, "8"):
        with pytest.raises(ValueError, match="seq_len must be a positive integer"):
            enc.attention_scaling(bad)  # type: ignore[attr-defined]


def test_attention_scaling_is_vllms() -> None:
    """``max(1, 0.1·ln(s / original_max_position_embeddings) + 1)``, 1 without that option."""
    enc = per.get_encoder("dual-chunk", dim=8, chunk_size=262144, local_size=8192,
                          original_max_position_embeddings=262144)
    assert enc.attention_scaling(1_000_000) == pytest.approx(0.1 * math.log(1e6 / 262144) + 1)  # type: ignore[attr-defined]
    assert enc.attention_scaling(1000) == 1.0  # type: ignore[attr-defined]
    assert enc.replace(original_max_position_embeddings=None).attention_scaling(10**6) == 1.0  # type: ignore[attr-defined]


def test_identity_and_qwen_sizes() -> None:
    """Qwen2.5-1M's sizes (its config.json ``dual_chunk_attention_config``) at a million
    tokens: positions stay below chunk_size + chunk_len, in int32 too."""
    enc = per.get_encoder("dual-chunk", dim=128, theta=1e7, chunk_size=262144, local_size=8192)
    assert enc.chunk_len == 253952  # type: ignore[attr-defined]
    assert enc == pickle.loads(pickle.dumps(enc)) and hash(enc) == hash(enc.replace())
    assert "chunk_size=262144" in repr(enc)
    pos = np.array([0, 253951, 253952, 999_999], dtype=np.int32)
    roles = enc.dual_chunk_positions(pos)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(roles.k, [0, 253951, 0, 999_999 - 3 * 253952])
    np.testing.assert_array_equal(roles.q_inter, [262144] * 4)
    np.testing.assert_array_equal(roles.q_succ, [253952, 262144, 253952, 262144])
    assert roles.q_inter_critical.max() < 2**31
