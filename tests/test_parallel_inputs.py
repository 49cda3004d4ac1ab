"""peregistry.parallel on the inputs docs/distributed.md allows and the mistakes it must name:
every integer dtype of ``cu_seqlens``, NumPy integer scalars as ranks, arrays of two frameworks,
and out-of-range indices and offsets (issue 30, items 7-10). References are plain Python."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import peregistry as per
from peregistry.parallel import (
    packed_bias,
    packed_mask,
    packed_positions,
    sequence_ids,
    shard_bounds,
    shard_offset,
    shard_positions,
    shard_tokens,
)

LENGTHS = [4, 0, 8, 4]
CU = [0, 4, 4, 12, 16]
TOTAL = 16
POSITIONS = [p for n in LENGTHS for p in range(n)]
SEQ = [j for j, n in enumerate(LENGTHS) for _ in range(n)]


def _ints(backend: Any, values: list[int], dtype: str) -> Any:
    return backend.from_numpy(np.asarray(values, dtype=dtype))


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16"])
def test_every_integer_dtype_of_cu_seqlens(backend: Any, xp: Any, dtype: str) -> None:
    if not hasattr(xp, dtype) or (dtype == "int64" and backend.name == "jax"
                                  and xp.asarray(np.zeros(1, np.int64)).dtype != xp.int64):
        pytest.skip(f"{backend.name} has no {dtype} here (JAX without x64)")
    cu = _ints(backend, CU, dtype)
    got = packed_positions(cu)
    assert got.dtype == cu.dtype
    assert backend.to_numpy(got).tolist() == POSITIONS
    assert backend.to_numpy(sequence_ids(cu)).tolist() == SEQ
    idx = _ints(backend, [15, 0, 5], dtype)
    assert backend.to_numpy(packed_positions(cu, index=idx)).tolist() == [3, 0, 1]
    mask = backend.to_numpy(packed_mask(cu, index=idx))
    assert mask.tolist() == [[SEQ[q] == SEQ[k] for k in range(TOTAL)] for q in (15, 0, 5)]
    for layout in ("contiguous", "zigzag"):
        tokens = backend.to_numpy(shard_tokens(TOTAL, 2, 1, layout=layout, cu_seqlens=cu))
        pos = backend.to_numpy(shard_positions(TOTAL, 2, 1, layout=layout, cu_seqlens=cu))
        assert pos.tolist() == [POSITIONS[t] for t in tokens.tolist()]
    bias = packed_bias(per.get_encoder("alibi", num_heads=2), cu)
    assert bias.shape == (2, TOTAL, TOTAL)


def test_numpy_integer_ranks_are_ints(backend: Any, xp: Any) -> None:
    q = backend.from_numpy(np.random.default_rng(0).standard_normal((2, 4, 8)), dtype=xp.float32)
    enc = per.get_encoder("rotary", dim=8)
    cu = _ints(backend, [0, 8], "int32")
    for r in np.arange(2):  # np.int64 ranks, as a loop over np.arange gives
        pos = shard_positions(8, 2, r, like=q)
        assert type(pos) is type(q)  # like=q's framework, not NumPy's
        assert backend.to_numpy(pos).tolist() == list(range(4 * int(r), 4 * int(r) + 4))
        rotated = enc.rotate(q, shard_positions(8, 2, r, like=q))  # docs/distributed.md
        assert rotated.shape == q.shape
        packed = shard_positions(8, 2, r, cu_seqlens=cu)
        assert backend.to_numpy(packed).tolist() == list(range(4 * int(r), 4 * int(r) + 4))
        assert backend.to_numpy(shard_tokens(8, 2, np.int32(r), layout="zigzag",
                                             cu_seqlens=cu)).tolist() == \
            [[0, 1, 6, 7], [2, 3, 4, 5]][int(r)]
    assert shard_offset(4, np.int64(1), offset=np.int16(2)) == 6
    assert type(shard_offset(4, np.int64(1))) is int
    assert shard_bounds(8, 2, np.int64(1)) == (4, 8)


def test_arrays_of_two_frameworks_are_named(backend: Any, xp: Any) -> None:
    if backend.name == "numpy":
        pytest.skip("needs a second framework: runs in the torch, jax and strict envs")
    mine, theirs = _ints(backend, CU, "int32"), np.asarray(CU, dtype=np.int32)
    mine_idx, their_idx = _ints(backend, [1], "int32"), np.asarray([1], dtype=np.int32)
    other = backend.name
    cases = [
        (lambda: packed_positions(theirs, index=mine_idx), "cu_seqlens", "index"),
        (lambda: packed_positions(mine, index=their_idx), "cu_seqlens", "index"),
        (lambda: sequence_ids(theirs, index=mine_idx), "cu_seqlens", "index"),
        (lambda: packed_mask(mine, index=their_idx), "cu_seqlens", "index"),
        (lambda: shard_positions(TOTAL, 2, xp.asarray(1), cu_seqlens=theirs), "cu_seqlens",
         "cp_rank"),
        (lambda: shard_tokens(TOTAL, 2, 1, cu_seqlens=mine, like=theirs), "cu_seqlens", "like"),
        (lambda: shard_offset(4, xp.asarray(1), offset=np.asarray(2)), "shard_index",
         "offset"),
    ]
    for call, first, second in cases:
        with pytest.raises(TypeError, match=rf"inputs mix arrays of (numpy and {other}|{other} "
                                            rf"and numpy): {first} is a .* array but {second} "
                                            rf"is a .* array"):
            call()


def test_out_of_range_values_are_errors_naming_the_argument(backend: Any, xp: Any) -> None:
    cu = _ints(backend, [0, 3, 5], "int32")
    for bad in ([-1], [5], [7], [0, 9]):
        with pytest.raises(ValueError, match=r"packed_positions: every entry of index must be "
                                             r"in \[0, 5\)"):
            packed_positions(cu, index=_ints(backend, bad, "int32"))
    with pytest.raises(ValueError, match=r"sequence_ids: every entry of index"):
        sequence_ids(cu, index=_ints(backend, [-6], "int32"))
    with pytest.raises(ValueError, match=r"packed_mask: every entry of index"):
        packed_mask(cu, index=_ints(backend, [5], "int32"))
    with pytest.raises(ValueError, match=r"shard_index must be >= 0, got -1"):
        shard_offset(4, -1)
    with pytest.raises(ValueError, match=r"offset must be >= 0, got -5"):
        shard_offset(4, 1, offset=-5)
    with pytest.raises(ValueError, match=r"shard_offset: every entry of shard_index must be "
                                         r">= 0"):
        shard_offset(4, xp.asarray(-1))  # a 0-d array: read, since it is concrete
    # the same arguments are refused by shard_bounds, which shard_offset pairs with
    with pytest.raises(ValueError, match="shard_index must be >= 0, got -1"):
        shard_bounds(8, 2, -1)
    with pytest.raises(ValueError, match="offset must be >= 0, got -5"):
        shard_bounds(8, 2, 1, offset=-5)
