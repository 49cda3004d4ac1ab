"""peregistry.parallel: per-shard positions for sequence (context) parallelism."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import peregistry as per
from peregistry.parallel import shard_bounds, shard_ids, shard_offset


def test_shard_bounds_and_offset() -> None:
    assert [shard_bounds(16, 4, i) for i in range(4)] == [(0, 4), (4, 8), (8, 12), (12, 16)]
    assert shard_bounds(16, 4, 1, offset=100) == (104, 108)
    assert shard_offset(4, 3) == 12
    assert shard_offset(4, 3, offset=100) == 112


@pytest.mark.parametrize(("args", "message"), [
    ((10, 4, 0), "not divisible by num_shards=4"),
    ((16, 4, 4), "shard_index must be < num_shards=4"),
    ((16, 0, 0), "num_shards must be >= 1"),
])
def test_shard_bounds_errors(args: tuple[int, int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        shard_bounds(*args)


def test_shard_bounds_rejects_non_int() -> None:
    with pytest.raises(TypeError, match="seq_len must be an int"):
        shard_bounds(16.0, 4, 0)  # type: ignore[arg-type]


def test_context_parallel_rotary_and_mrope_equal_unsharded() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 16, 32))
    rot = per.get_encoder("rotary", dim=32)
    mrope = per.get_encoder("mrope", dim=32, sections=(4, 6, 6))
    ids = rng.integers(0, 40, size=(3, 16))
    whole_r, whole_m = rot.rotate(x, offset=7), mrope.rotate(x, ids)
    for i in range(4):
        start, stop = shard_bounds(16, 4, i)
        xs = x[..., start:stop, :]
        got = rot.rotate(xs, offset=shard_offset(stop - start, i, offset=7))
        np.testing.assert_array_equal(got, whole_r[..., start:stop, :])
        np.testing.assert_array_equal(mrope.rotate(xs, shard_ids(ids, 4, i)),
                                      whole_m[..., start:stop, :])


def test_shard_ids_axis() -> None:
    ids = np.arange(3 * 2 * 8).reshape(3, 2, 8)
    np.testing.assert_array_equal(shard_ids(ids, 2, 1), ids[..., 4:])
    np.testing.assert_array_equal(shard_ids(ids, 2, 0, axis=1), ids[:, :1])
    with pytest.raises(ValueError, match="axis=3 is out of range"):
        shard_ids(ids, 2, 0, axis=3)


def test_zigzag_shard_and_bounds_errors() -> None:
    from peregistry.parallel import zigzag_bounds, zigzag_shard

    ids = np.arange(3 * 16).reshape(3, 16)
    np.testing.assert_array_equal(zigzag_shard(ids, 2, 1), ids[:, 4:12])
    np.testing.assert_array_equal(zigzag_shard(ids, 1, 0), ids)
    with pytest.raises(ValueError, match="axis=2 is out of range"):
        zigzag_shard(ids, 2, 0, axis=2)
    with pytest.raises(ValueError, match=r"cp_rank must be in \[0, cp_size=2\), got 2"):
        zigzag_bounds(16, 2, 2)
    with pytest.raises(TypeError, match="cp_size must be an int"):
        zigzag_bounds(16, 2.0, 0)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 5), min_size=1, max_size=6), cp=st.integers(1, 4))
def test_zigzag_packed_ranks_partition_the_row(lengths: list[int], cp: int) -> None:
    """Any packed row (lengths multiples of 2*cp, some empty): the ranks' tokens are a
    permutation of the row, rank r holds chunks r and 2cp-1-r of every sequence, and their
    positions are the packed positions at those tokens."""
    from peregistry.parallel import packed_positions, shard_positions, shard_tokens

    lengths = [n * 2 * cp for n in lengths]
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    total = int(cu[-1])
    seen: list[int] = []
    for r in range(cp):
        idx = shard_tokens(total, cp, r, layout="zigzag", cu_seqlens=cu)
        want = []
        for start, n in zip(cu[:-1].tolist(), lengths, strict=True):
            c = n // (2 * cp)
            want += [*range(start + r * c, start + (r + 1) * c),
                     *range(start + (2 * cp - 1 - r) * c, start + (2 * cp - r) * c)]
        assert idx.tolist() == want
        np.testing.assert_array_equal(
            shard_positions(total, cp, r, layout="zigzag", cu_seqlens=cu),
            packed_positions(cu)[idx])
        seen += want
    assert sorted(seen) == list(range(total))
