"""Issue 18: packed (varlen / ``thd``) positions and the zigzag context-parallel layout.

References are written independently of peregistry.parallel: plain Python loops over the
sequence lengths (positions restart at 0 in each sequence; zigzag chunk ``r`` and
``2*cp - 1 - r`` of each sequence, as Megatron-core ``get_batch_on_this_cp_rank`` and
TransformerEngine's fused RoPE kernel ``s_id_for_freqs`` compute them). Sharded results must equal
the matching rows of the unsharded ones bit for bit, on every selected backend.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import peregistry as per
from peregistry.parallel import (
    pack_ids,
    packed_bias,
    packed_mask,
    packed_positions,
    positions_from_sequence_ids,
    sequence_ids,
    shard_positions,
    shard_tokens,
    zigzag_bounds,
    zigzag_shard,
)

LENGTHS = [8, 16, 0, 24, 8]  # uneven, one empty; each a multiple of 2 * cp for cp in (2, 4)
CU = np.concatenate([[0], np.cumsum(LENGTHS)]).astype(np.int32)
TOTAL = int(CU[-1])  # 56
# One x shape and one encoder of each kind across the tests: JAX compiles each op per shape.
X = np.random.default_rng(0).standard_normal((2, TOTAL, 16))
ROT = per.get_encoder("rotary", dim=16)
MROPE = per.get_encoder("mrope", dim=16, sections=(2, 3, 3))


def ref_positions(lengths: list[int]) -> np.ndarray[Any, Any]:
    return np.array([p for n in lengths for p in range(n)], dtype=np.int64)


def ref_zigzag(lengths: list[int], cp: int, r: int) -> list[int]:
    """Global indices rank r holds: chunks r and 2cp-1-r of each sequence, sequence by sequence."""
    out: list[int] = []
    start = 0
    for n in lengths:
        c = n // (2 * cp)
        out += [start + r * c + k for k in range(c)]
        out += [start + (2 * cp - 1 - r) * c + k for k in range(c)]
        start += n
    return out


def same(backend: Any, got: Any, want: Any, dtype: Any = None) -> None:
    """Namespace (the backend owns it) and exact values."""
    assert backend.owns(got), f"got a {type(got)}, not a {backend.name} array"
    if dtype is not None:
        assert got.dtype == dtype, f"dtype {got.dtype}, want {dtype}"
    np.testing.assert_array_equal(backend.to_numpy(got), np.asarray(want))


def test_packed_positions_and_sequence_ids(backend: Any, xp: Any) -> None:
    cu = backend.from_numpy(CU)
    same(backend, packed_positions(cu), ref_positions(LENGTHS), cu.dtype)
    same(backend, packed_positions(cu, TOTAL), ref_positions(LENGTHS), cu.dtype)
    want_ids = [j for j, n in enumerate(LENGTHS) for _ in range(n)]
    same(backend, sequence_ids(cu), want_ids, cu.dtype)
    idx = backend.from_numpy(np.array([0, 9, 30, 55]))
    same(backend, packed_positions(cu, index=idx), ref_positions(LENGTHS)[[0, 9, 30, 55]])
    assert packed_positions(cu).device == cu.device


def test_positions_from_sequence_ids(backend: Any) -> None:
    ids = backend.from_numpy(np.array([7, 7, 7, 2, 2, 9, 7, 7], dtype=np.int32))
    same(backend, positions_from_sequence_ids(ids), [0, 1, 2, 0, 1, 0, 0, 1])
    runs = np.repeat(np.arange(len(LENGTHS)), LENGTHS)
    same(backend, positions_from_sequence_ids(backend.from_numpy(runs)), ref_positions(LENGTHS))
    same(backend, positions_from_sequence_ids(backend.from_numpy(np.zeros(0, np.int64))), [])


def test_packed_mask_is_block_diagonal(backend: Any) -> None:
    cu = backend.from_numpy(CU)
    seq = np.repeat(np.arange(len(LENGTHS)), LENGTHS)
    want = seq[:, None] == seq[None, :]
    same(backend, packed_mask(cu), want)
    causal = want & (np.arange(TOTAL)[None, :] <= np.arange(TOTAL)[:, None])
    same(backend, packed_mask(cu, causal=True), causal)
    rows = [3, 40]
    same(backend, packed_mask(cu, index=backend.from_numpy(np.array(rows)), causal=True),
         causal[rows])


@pytest.mark.parametrize("name", ["alibi", "t5"])
def test_packed_bias_masks_other_sequences(backend: Any, xp: Any, name: str) -> None:
    enc = per.get_encoder(name, num_heads=4)
    params = enc.init(xp, seed=0, dtype=xp.float32) if enc.learned else None
    cu = backend.from_numpy(CU)
    got = backend.to_numpy(packed_bias(enc, cu, params=params, dtype=xp.float32))
    assert got.shape == (4, TOTAL, TOTAL)
    seq = np.repeat(np.arange(len(LENGTHS)), LENGTHS)
    assert np.all(np.isneginf(got[:, seq[:, None] != seq[None, :]]))
    longest = max(LENGTHS)  # each sequence alone = the top-left block of the longest's
    own = backend.to_numpy(enc.bias(xp.arange(longest), xp.arange(longest), params=params,
                                     dtype=xp.float32))
    for j, n in enumerate(LENGTHS):
        a = int(CU[j])
        np.testing.assert_array_equal(got[:, a:a + n, a:a + n], own[:, :n, :n])


def test_packed_bias_rows_of_one_rank_and_embed_blocks(backend: Any, xp: Any) -> None:
    """``index`` (one rank's queries) gives the matching rows of the full masked bias; a
    relative embedding of packed positions equals each sequence's own on the diagonal blocks."""
    cu = backend.from_numpy(CU)
    alibi = per.get_encoder("alibi", num_heads=2)
    full = backend.to_numpy(packed_bias(alibi, cu, causal=True))
    idx = shard_tokens(TOTAL, 4, 1, layout="zigzag", cu_seqlens=cu)
    rows = backend.to_numpy(packed_bias(alibi, cu, index=idx, causal=True))
    np.testing.assert_array_equal(rows, full[:, backend.to_numpy(idx)])
    txl = per.get_encoder("transformer-xl", dim=8)
    pos = packed_positions(cu)
    emb = backend.to_numpy(txl.embed(pos, pos, dtype=xp.float32))
    # Dai et al.: sin then cos of (q - k) / 10000^(2i/d); each block is its sequence's own.
    d = np.arange(max(LENGTHS))[:, None] - np.arange(max(LENGTHS))[None, :]
    ang = d[..., None] * 10000.0 ** (-np.arange(0, 8, 2) / 8)
    own = np.concatenate([np.sin(ang), np.cos(ang)], axis=-1)
    for j, n in enumerate(LENGTHS):
        a = int(CU[j])
        np.testing.assert_allclose(emb[a:a + n, a:a + n], own[:n, :n], atol=1e-5, rtol=0)


def test_thd_layout_takes_positions_as_a_column(backend: Any, xp: Any) -> None:
    """TransformerEngine/flash-attention ``thd`` tensors are ``(total, heads, dim)``: positions
    broadcast against ``x.shape[:-1]``, so they go in as ``pos[:, None]``."""
    x = backend.from_numpy(X, dtype=xp.float32)  # (heads, total, dim)
    pos = packed_positions(backend.from_numpy(CU))
    thd = backend.to_numpy(ROT.rotate(xp.permute_dims(x, (1, 0, 2)), pos[:, None]))
    np.testing.assert_array_equal(thd, np.transpose(backend.to_numpy(ROT.rotate(x, pos)),
                                                    (1, 0, 2)))


def test_packed_rotate_sinusoidal_and_mrope_per_sequence(backend: Any, xp: Any) -> None:
    """Packed positions give each sequence what it gets alone (float64 NumPy formula for
    rotary: angles p * theta^(-2i/d), half layout)."""
    x_host = X
    x = backend.from_numpy(x_host, dtype=xp.float32)
    cu = backend.from_numpy(CU)
    pos = packed_positions(cu)
    rot = ROT
    got = backend.to_numpy(rot.rotate(x, pos)).astype(np.float64)
    p = ref_positions(LENGTHS)[:, None] * 10000.0 ** (-np.arange(0, 16, 2) / 16)
    cos, sin = np.cos(np.concatenate([p, p], -1)), np.sin(np.concatenate([p, p], -1))
    rot_half = np.concatenate([-x_host[..., 8:], x_host[..., :8]], -1)
    np.testing.assert_allclose(got, x_host * cos + rot_half * sin, atol=2e-6, rtol=0)
    # Sinusoidal, Vaswani et al.: PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(...).
    table = backend.to_numpy(per.get_encoder("sinusoidal", dim=16).encode(pos))
    want = np.zeros((TOTAL, 16))
    want[:, 0::2], want[:, 1::2] = np.sin(p), np.cos(p)
    np.testing.assert_allclose(table, want, atol=2e-6, rtol=0)
    # M-RoPE ids per packed sequence: each sequence's own ids from multimodal (starting at 0),
    # packed with their cu_seqlens. (Rotating them: test_each_rank_equals_unsharded_rows.)
    from peregistry.multimodal import Image, Text, position_ids

    rows = [position_ids([Text(2), Image((1, 4, 4)), Text(2)], like=cu).ids,
            position_ids([Text(8)], like=cu).ids]
    ids, cu2 = pack_ids(rows)
    same(backend, cu2, [0, 8, 16], xp.int32)
    same(backend, ids, np.concatenate([backend.to_numpy(r) for r in rows], axis=-1))
    assert backend.to_numpy(ids)[:, [0, 8]].tolist() == [[0, 0]] * 3


@pytest.mark.parametrize(("layout", "packed"),
                         list(itertools.product(["contiguous", "zigzag"], [False, True])))
def test_each_rank_equals_unsharded_rows(backend: Any, xp: Any, layout: str,
                                         packed: bool) -> None:
    """Rotary (offset 7 when plain) and M-RoPE: every rank's rotate of its own tokens equals the
    matching rows of the unsharded rotate, bit for bit; the ranks cover every token once."""
    cp = 4
    rng = np.random.default_rng(1)
    x = backend.from_numpy(X, dtype=xp.float32)
    ids = backend.from_numpy(rng.integers(0, 60, size=(3, TOTAL)))
    rot, mrope = ROT, MROPE
    cu = backend.from_numpy(CU) if packed else None
    offset = 0 if packed else 7
    whole_pos = packed_positions(cu) if packed else xp.arange(TOTAL) + offset
    whole = backend.to_numpy(rot.rotate(x, whole_pos))
    whole_m = backend.to_numpy(mrope.rotate(x, ids))
    seen: list[int] = []
    for r in range(cp):
        idx = shard_tokens(TOTAL, cp, r, layout=layout, cu_seqlens=cu, like=x)
        pos = shard_positions(TOTAL, cp, r, layout=layout, cu_seqlens=cu, offset=offset, like=x)
        host = backend.to_numpy(idx)
        if layout == "zigzag":
            want = ref_zigzag(LENGTHS if packed else [TOTAL], cp, r)
        else:
            want = list(range(r * TOTAL // cp, (r + 1) * TOTAL // cp))
        assert host.tolist() == want
        seen += want
        xl = xp.take(x, idx, axis=1)
        np.testing.assert_array_equal(backend.to_numpy(rot.rotate(xl, pos)), whole[..., host, :])
        np.testing.assert_array_equal(backend.to_numpy(mrope.rotate(xl, xp.take(ids, idx, axis=1))),
                                      whole_m[..., host, :])
        if layout == "zigzag" and not packed:
            np.testing.assert_array_equal(backend.to_numpy(zigzag_shard(x, cp, r, axis=-2)),
                                          backend.to_numpy(xl))
    assert sorted(seen) == list(range(TOTAL))


def test_zigzag_bounds_match_megatron_and_te() -> None:
    # seq 16, cp 2: chunks of 4; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
    assert zigzag_bounds(16, 2, 0) == ((0, 4), (12, 16))
    assert zigzag_bounds(16, 2, 1) == ((4, 8), (8, 12))
    assert zigzag_bounds(16, 2, 1, offset=100) == ((104, 108), (108, 112))
    # TransformerEngine fused RoPE: local s_id -> s_id_for_freqs (cur_seqlens = 2c local tokens).
    for cp, r, n in [(2, 0, 16), (2, 1, 16), (4, 3, 24)]:
        cur = n // cp
        te = [s + r * cur // 2 if s < cur // 2 else cur * cp - (r + 1) * cur // 2 + s - cur // 2
              for s in range(cur)]
        (a0, b0), (a1, b1) = zigzag_bounds(n, cp, r)
        assert [*range(a0, b0), *range(a1, b1)] == te


@pytest.mark.parametrize(("cu", "total", "message"), [
    ([0, 5, 3, 9], None, r"must not decrease, but cu_seqlens\[1\]=5 > cu_seqlens\[2\]=3"),
    ([1, 5, 9], None, r"must start at 0, got cu_seqlens\[0\]=1"),
    ([0, 5, 9], 10, r"cu_seqlens ends at 9 tokens but total=10"),
])
def test_bad_cu_seqlens(backend: Any, cu: list[int], total: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        packed_positions(backend.from_numpy(np.array(cu, dtype=np.int32)), total)


def test_bad_layout_arguments(backend: Any, xp: Any) -> None:
    cu = backend.from_numpy(np.array([0, 8, 14], dtype=np.int32))
    with pytest.raises(ValueError, match=r"sequence 1 has length 6, which does not divide into "
                                         r"2 \* cp_size = 4 zigzag chunks"):
        shard_tokens(14, 2, 0, layout="zigzag", cu_seqlens=cu)
    with pytest.raises(ValueError, match=r"total=12 tokens do not divide into 8 equal chunks"):
        shard_tokens(12, 4, 0, layout="zigzag", like=cu)
    with pytest.raises(ValueError, match=r"cp_rank must be in \[0, cp_size=4\), got 4"):
        shard_tokens(16, 4, 4, like=cu)
    with pytest.raises(ValueError, match=r"cp_rank must be in \[0, cp_size=4\), got 5"):
        shard_tokens(16, 4, xp.asarray(5), like=cu)
    with pytest.raises(ValueError, match=r"layout must be one of .*got 'ring'"):
        shard_tokens(16, 4, 0, layout="ring", like=cu)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seq_len=12 is not divisible into 2 . cp_size = 8"):
        zigzag_bounds(12, 4, 0)
    with pytest.raises(ValueError, match="offset=3 with cu_seqlens"):
        shard_positions(14, 1, 0, cu_seqlens=cu, offset=3)
    with pytest.raises(TypeError, match="cu_seqlens must have an integer dtype"):
        packed_positions(xp.asarray([0.0, 3.0]))
    with pytest.raises(TypeError, match="enc must be an encoder of kind 'bias', got 'rotary'"):
        packed_bias(per.get_encoder("rotary", dim=8), cu)


def test_traced_cu_seqlens_under_jit_and_compile(backend: Any, xp: Any) -> None:
    """jax.jit with cu_seqlens and cp_rank traced (static total); torch.compile(fullgraph)."""
    rot = ROT
    x = backend.from_numpy(X[0], dtype=xp.float32)
    cu = backend.from_numpy(CU)
    want = backend.to_numpy(rot.rotate(x, packed_positions(cu)))

    def packed(x: Any, cu: Any) -> Any:
        return rot.rotate(x, packed_positions(cu, TOTAL))

    def rank_rows(x: Any, cu: Any, r: Any) -> Any:
        idx = shard_tokens(TOTAL, 2, r, layout="zigzag", cu_seqlens=cu)
        pos = shard_positions(TOTAL, 2, r, layout="zigzag", cu_seqlens=cu)
        return rot.rotate(xp.take(x, idx, axis=0), pos)

    if backend.name == "jax":
        import jax

        with pytest.raises(ValueError, match="cu_seqlens is traced.*pass total="):
            jax.jit(packed_positions)(cu)
        got, got_r = jax.jit(packed)(x, cu), jax.jit(rank_rows)(x, cu, xp.asarray(1))
    elif backend.name == "torch":
        import torch

        from peregistry.backends._torch import COMPILE_BACKEND_ENV

        mode = os.environ.get(COMPILE_BACKEND_ENV, "aot_eager")
        got = torch.compile(packed, fullgraph=True, backend=mode)(x, cu)
        got_r = torch.compile(rank_rows, fullgraph=True, backend=mode)(x, cu, torch.tensor(1))
    else:
        pytest.skip(f"{backend.name} has no jit")
    np.testing.assert_array_equal(backend.to_numpy(got), want)
    np.testing.assert_array_equal(backend.to_numpy(got_r), want[ref_zigzag(LENGTHS, 2, 1)])


def test_import_parallel_imports_no_framework() -> None:
    code = ("import sys, peregistry, peregistry.parallel\n"
            "print([m for m in ('torch', 'jax', 'array_api_strict') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_distributed_md_examples_give_the_values_shown() -> None:
    """The python blocks of docs/distributed.md marked ``<!-- runs: tests/test_packed.py -->``
    run in order in one namespace; every expression line ending in a ``# <literal>`` comment
    evaluates to that literal."""
    import ast
    import math
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "distributed.md").read_text()
    blocks = text.split("<!-- runs: tests/test_packed.py -->\n```python\n")[1:]
    assert len(blocks) == 4
    namespace: dict[str, Any] = {"inf": math.inf}
    checked = 0
    for block in (b.split("```", 1)[0] for b in blocks):
        lines = block.splitlines()
        for stmt in ast.parse(block).body:
            code = ast.Module(body=[stmt], type_ignores=[])
            if not isinstance(stmt, ast.Expr):
                exec(compile(code, "distributed.md", "exec"), namespace)
                continue
            comment = lines[stmt.end_lineno - 1].split("#", 1)[1].split(":")[0].strip()
            got = eval(compile(ast.Expression(stmt.value), "distributed.md", "eval"), namespace)
            want = -math.inf if comment == "-inf" else ast.literal_eval(comment)
            assert got == want, f"{ast.unparse(stmt)}: got {got!r}, docs say {comment}"
            checked += 1
    assert checked == 12
