"""peregistry.parallel: per-shard positions for sequence (context) parallelism."""

from __future__ import annotations

import numpy as np
import pytest

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
