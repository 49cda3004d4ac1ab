"""Issue 8 (PyTorch): 4 gloo processes on 127.0.0.1 (tests/_torch_dist_worker.py): context
parallel rotary/M-RoPE equal the unsharded result exactly (contiguous and zigzag layouts, plain
and packed), and a DTensor sharded on the sequence
dimension goes through enc.rotate and stays a DTensor with the same placements."""

from __future__ import annotations

from pathlib import Path

import pytest
from _ranks import last_json, run_ranks

from peregistry.testing._core import selected_backends

pytestmark = pytest.mark.skipif("torch" not in [b.name for b in selected_backends()],
                                reason="torch backend not selected (PEREGISTRY_BACKENDS)")

WORKER = Path(__file__).with_name("_torch_dist_worker.py")
WORLD = 4


def test_context_parallel_and_dtensor_on_four_processes() -> None:
    result = last_json(run_ranks(WORKER, WORLD)[0])
    assert result == {"cp_rotary_equal": True, "cp_mrope_equal": True,
                      "zigzag_rotary_equal": True, "zigzag_mrope_equal": True,
                      "zigzag_packed_equal": True, "dtensor_type": True,
                      "dtensor_placements": "(Shard(dim=2),)", "dtensor_local_equal": True,
                      "dtensor_full_equal": True}
