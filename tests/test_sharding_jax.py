"""Issue 8 (JAX): encoders under jax.jit on a (2, 2, 2) mesh of 8 host devices keep the inputs'
sharding, compile to no cross-device collective and give the unsharded values; context
parallelism in the contiguous and the zigzag layout (plain, packed with a traced cu_seqlens,
M-RoPE) inside shard_map, each rank's positions from its traced axis_index. XLA_FLAGS must be
set before jax is imported, so the mesh runs in a subprocess (tests/_jax_mesh_worker.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from peregistry.testing._core import selected_backends

pytestmark = pytest.mark.skipif("jax" not in [b.name for b in selected_backends()],
                                reason="jax backend not selected (PEREGISTRY_BACKENDS)")

WORKER = Path(__file__).with_name("_jax_mesh_worker.py")


MODES = ["auto", "explicit"]


@pytest.fixture(scope="module")
def all_modes() -> dict[str, dict[str, Any]]:
    """Both mesh modes, run in one subprocess (jax imported and initialized once)."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
           "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, str(WORKER), *MODES], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["devices"] == 8
    return dict(result["modes"])


@pytest.fixture(params=MODES)
def mesh_cases(request: pytest.FixtureRequest,
               all_modes: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    return request.param, dict(all_modes[request.param])


EXPECTED = {"rotate", "rotate-positions", "mrope", "sinusoidal", "context-parallel-rotate",
            "context-parallel-mrope"}
ZIGZAG = {"zigzag-rotate", "zigzag-packed-rotate", "zigzag-mrope"}  # shard_map: Auto mesh only


def test_sharded_jit_keeps_sharding_without_collectives(
        mesh_cases: tuple[str, dict[str, Any]]) -> None:
    mode, cases = mesh_cases
    want = EXPECTED | ({"t5", "t5-heads"} | ZIGZAG if mode == "auto" else set())
    assert set(cases) == want
    for name, case in cases.items():
        assert case["collectives"] == [], f"{mode}/{name}: compiled HLO has {case['collectives']}"
        assert case["sharding_ok"], f"{mode}/{name}: {case['detail']}"


def test_sharded_values_equal_unsharded(mesh_cases: tuple[str, dict[str, Any]]) -> None:
    mode, cases = mesh_cases
    for name, case in cases.items():
        if name == "mrope":
            # On a mesh the cos/sin table is not split off by materialize's lax.cond, so XLA
            # fuses the trigonometry into the rotation: a few float32 ulps apart at most.
            assert case["max_abs_diff"] <= 1e-6, f"{mode}/{name}: {case['max_abs_diff']}"
        else:
            assert case["equal"], f"{mode}/{name}: max |diff| {case['max_abs_diff']}"
