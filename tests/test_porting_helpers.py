"""The two helpers porters ask for (issue 31, item 4): text position ids from an attention mask
under left padding, against Hugging Face's rule; and the q/k weight permutation between the
interleaved and half pair layouts, against transformers' Llama conversion formula and by the
attention scores it must keep. References are written here in NumPy (float64), not with
peregistry."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS

import peregistry as per
from peregistry.rope import permute_for_layout

MASK = np.array([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0]])


def hf_positions(mask: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """transformers 5.23 GenerationMixin._prepare_position_ids_for_generation, in NumPy."""
    pos = mask.astype(np.int64).cumsum(-1) - 1
    return np.where(mask == 0, 0, pos)


@pytest.mark.parametrize("dtype", ["bool", "int32", "int64", "uint8"])
def test_positions_from_attention_mask(backend: Any, xp: Any, dtype: str) -> None:
    mask = backend.from_numpy(MASK.astype(dtype))
    got = per.positions_from_attention_mask(mask)
    assert type(got) is type(mask)
    assert backend.to_numpy(got).tolist() == hf_positions(MASK).tolist()
    filled = backend.to_numpy(per.positions_from_attention_mask(mask, fill=1))
    assert filled.tolist() == np.where(MASK == 0, 1, hf_positions(MASK)).tolist()
    one_row = backend.from_numpy(MASK[0].astype(dtype))
    assert backend.to_numpy(per.positions_from_attention_mask(one_row)).tolist() == \
        hf_positions(MASK[0]).tolist()


@pytest.mark.skipif("torch" not in BACKENDS, reason="needs torch and transformers (torch env)")
def test_positions_match_transformers_generate() -> None:
    torch = pytest.importorskip("torch")
    generation = pytest.importorskip("transformers.generation.utils")
    mask = torch.tensor(MASK)
    ids = torch.ones_like(mask)
    theirs = generation.GenerationMixin._prepare_position_ids_for_generation(
        None, ids, {"attention_mask": mask})
    assert torch.equal(per.positions_from_attention_mask(mask), theirs)


def test_positions_refuse_what_is_not_a_mask(backend: Any, xp: Any) -> None:
    with pytest.raises(ValueError, match="mask must hold only 0 and 1, got \\[2\\]"):
        per.positions_from_attention_mask(backend.from_numpy(np.array([[1, 2, 1]])))
    with pytest.raises(TypeError, match="mask must have a bool or integer dtype"):
        per.positions_from_attention_mask(backend.from_numpy(np.ones((1, 3)), dtype=xp.float32))
    with pytest.raises(ValueError, match="sequence axis"):
        per.positions_from_attention_mask(backend.from_numpy(np.array(1)))
    with pytest.raises(TypeError, match="fill must be an int"):
        per.positions_from_attention_mask(backend.from_numpy(MASK), fill=0.5)  # type: ignore[arg-type]


def stored(backend: Any, w: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return backend.to_numpy(backend.from_numpy(w)).astype(np.float64)


def hf_permute(w: np.ndarray[Any, Any], n_heads: int) -> np.ndarray[Any, Any]:
    """``permute`` of transformers' convert_llama_weights_to_hf.py (Meta's interleaved q/k rows
    to Hugging Face's half layout), in NumPy."""
    dim1, dim2 = w.shape
    return w.reshape(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(0, 2, 1, 3).reshape(dim1, dim2)


def rope_scores(w_q: np.ndarray[Any, Any], w_k: np.ndarray[Any, Any], x: np.ndarray[Any, Any],
                heads: int, rotary_dim: int, layout: str) -> np.ndarray[Any, Any]:
    """``<R(m)q, R(n)k>`` per head in float64, by the pair formula of each layout."""
    seq = x.shape[0]
    q = (x @ w_q.T).reshape(seq, heads, -1).transpose(1, 0, 2)
    k = (x @ w_k.T).reshape(seq, heads, -1).transpose(1, 0, 2)
    half = rotary_dim // 2
    ang = np.arange(seq)[:, None] * 10000.0 ** (-np.arange(half) * 2.0 / rotary_dim)

    def rot(v: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        out = v.copy()
        if layout == "half":
            a, b = v[..., :half], v[..., half:rotary_dim]
            out[..., :half] = a * np.cos(ang) - b * np.sin(ang)
            out[..., half:rotary_dim] = b * np.cos(ang) + a * np.sin(ang)
        else:
            a, b = v[..., 0:rotary_dim:2], v[..., 1:rotary_dim:2]
            out[..., 0:rotary_dim:2] = a * np.cos(ang) - b * np.sin(ang)
            out[..., 1:rotary_dim:2] = b * np.cos(ang) + a * np.sin(ang)
        return out

    return np.einsum("hqd,hkd->hqk", rot(q), rot(k))


@pytest.mark.parametrize("rotary_dim", [8, 4])
def test_permuted_checkpoint_gives_the_same_scores(backend: Any, xp: Any,
                                                    rotary_dim: int) -> None:
    rng = np.random.default_rng(0)
    heads, head_dim, hidden = 2, 8, 6
    # as the backend stores them (float32 on JAX without x64): the permutation is exact
    w_q, w_k = (stored(backend, w) for w in rng.standard_normal((2, heads * head_dim, hidden)))
    x = rng.standard_normal((5, hidden))
    want = rope_scores(w_q, w_k, x, heads, rotary_dim, "interleaved")

    def moved(w: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        out = permute_for_layout(backend.from_numpy(w), num_heads=heads, source="interleaved",
                                 target="half", rotary_dim=rotary_dim)
        return backend.to_numpy(out)

    got = rope_scores(moved(w_q), moved(w_k), x, heads, rotary_dim, "half")
    np.testing.assert_allclose(got, want, rtol=0, atol=64 * np.finfo(np.float64).eps * 50)
    assert np.abs(rope_scores(w_q, w_k, x, heads, rotary_dim, "half") - want).max() > 1e-3
    # peregistry's own encoders agree: interleaved rotation of the old weights' q equals the
    # half rotation of the new ones', up to the same row permutation
    enc = {lay: per.get_encoder("rotary", dim=head_dim, layout=lay,
                                rotary_dim=None if rotary_dim == head_dim else rotary_dim)
           for lay in ("half", "interleaved")}
    q_old = backend.from_numpy((x @ w_q.T).reshape(5, heads, head_dim).transpose(1, 0, 2))
    q_new = backend.from_numpy((x @ moved(w_q).T).reshape(5, heads, head_dim).transpose(1, 0, 2))
    r_old = backend.to_numpy(enc["interleaved"].rotate(q_old))
    r_new = backend.to_numpy(enc["half"].rotate(q_new))
    perm = hf_permute(np.arange(heads * head_dim)[:, None], heads)[:, 0] if rotary_dim == 8 \
        else None
    if perm is not None:
        flat_old = r_old.transpose(1, 0, 2).reshape(5, -1)[:, perm]
        np.testing.assert_allclose(r_new.transpose(1, 0, 2).reshape(5, -1), flat_old,
                                   rtol=0, atol=1e-12 if r_old.dtype == np.float64 else 1e-5)


def test_permute_is_transformers_conversion_and_its_inverse(backend: Any) -> None:
    rng = np.random.default_rng(1)
    w = stored(backend, rng.standard_normal((4 * 16, 12)))
    got = backend.to_numpy(permute_for_layout(backend.from_numpy(w), num_heads=4,
                                              source="interleaved", target="half"))
    np.testing.assert_array_equal(got, hf_permute(w, 4))
    back = permute_for_layout(backend.from_numpy(got), num_heads=4, source="half",
                              target="interleaved")
    np.testing.assert_array_equal(backend.to_numpy(back), w)
    # a bias, and a Keras/Flax kernel (in, out) along its last axis
    b = stored(backend, rng.standard_normal(64))
    np.testing.assert_array_equal(backend.to_numpy(permute_for_layout(
        backend.from_numpy(b), num_heads=4, source="interleaved", target="half")),
        hf_permute(b[:, None], 4)[:, 0])
    np.testing.assert_array_equal(backend.to_numpy(permute_for_layout(
        backend.from_numpy(w.T), num_heads=4, source="interleaved", target="half", axis=-1)),
        hf_permute(w, 4).T)
    same = backend.from_numpy(w)
    assert permute_for_layout(same, num_heads=4, source="half", target="half") is same


def test_permute_refuses_bad_arguments(backend: Any) -> None:
    w = backend.from_numpy(np.zeros((12, 3)))
    with pytest.raises(ValueError, match="source must be one of"):
        permute_for_layout(w, num_heads=2, source="pairs", target="half")
    with pytest.raises(ValueError, match=r"w.shape\[0\] = 12 is not num_heads=5 heads"):
        permute_for_layout(w, num_heads=5, source="interleaved", target="half")
    with pytest.raises(ValueError, match="rotary_dim must be an even int in \\(0, head_dim=6\\]"):
        permute_for_layout(w, num_heads=2, source="interleaved", target="half", rotary_dim=3)
    with pytest.raises(ValueError, match="num_heads must be a positive int"):
        permute_for_layout(w, num_heads=0, source="interleaved", target="half")
    with pytest.raises(ValueError, match="axis=2 is out of range"):
        permute_for_layout(w, num_heads=2, source="interleaved", target="half", axis=2)


# array-api-compat's cumulative_sum looks its namespace up through an lru_cache, which Dynamo
# notes (a notice of how it traced, not a graph break: see tests/test_compile_warnings.py)
@pytest.mark.filterwarnings("ignore:Dynamo detected a call to a `functools.lru_cache`")
def test_positions_under_the_compilers(backend: Any) -> None:
    compiled = backend.jit(per.positions_from_attention_mask)
    if compiled is None:
        pytest.skip(f"{backend.name} has no tracing compiler")
    got = compiled(backend.from_numpy(MASK.astype("int32")))
    assert backend.to_numpy(got).tolist() == hf_positions(MASK).tolist()
