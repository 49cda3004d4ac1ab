"""docs/examples/flax_causal_lm.py runs as its docstring says (flax env): a tiny Flax NNX model
using ``enc.tables()`` once per forward under ``nnx.jit`` equals a hand-written RoPE at position
ids with gaps, depends only on relative positions, and learns. Its reference check is shown to
catch a wrong rotation."""

from __future__ import annotations

import os
import runpy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import peregistry as per
from peregistry.testing._core import selected_backends

if "jax" not in [b.name for b in selected_backends()]:
    pytest.skip("jax is not a selected backend", allow_module_level=True)
pytest.importorskip("flax.nnx")
pytest.importorskip("optax")

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "flax_causal_lm.py"


@pytest.fixture(scope="module")
def example() -> Iterator[dict[str, Any]]:
    """The example's module globals (not run as ``__main__``); the XLA_FLAGS it sets for its
    own process are taken back (jax, imported already, has read its flags)."""
    saved = os.environ.get("XLA_FLAGS")
    try:
        yield runpy.run_path(str(EXAMPLE), run_name="flax_causal_lm_example")
    finally:
        if saved is None:
            os.environ.pop("XLA_FLAGS", None)
        else:
            os.environ["XLA_FLAGS"] = saved


def test_example_runs_as_documented(example: dict[str, Any],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    rc = example["main"]([])                  # the documented command's defaults
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.startswith("cpu, 60 steps under nnx.jit\n"), out
    assert "FAILED" not in out, out


def test_reference_check_catches_a_wrong_rotation(example: dict[str, Any]) -> None:
    import numpy as np

    cfg = example["Config"]()
    model = example["make_model"](cfg, 0)
    ids = np.arange(64, dtype=np.int32).reshape(4, 16) % cfg.vocab   # the example's shapes:
    pos = example["gapped_positions"](4, 16)                          # its programs again
    cos, sin = example["hand_tables"](cfg.dim // cfg.heads, cfg.theta, pos[:, None, :])
    ours, ref, _ = example["compare"](model, ids, pos, cos, sin)
    tol = 64 * np.finfo(np.float32).eps * np.abs(ref).max()
    assert np.abs(ours - ref).max() <= tol
    # positions ignored (arange instead of the gapped ids): the reference tells it apart
    plain = np.broadcast_to(np.arange(16, dtype=np.int32), pos.shape)
    assert np.abs(example["compare"](model, ids, plain, cos, sin)[0] - ref).max() > 1e3 * tol
    # the other pairing of features, likewise
    model.enc = per.get_encoder("rotary", dim=cfg.dim // cfg.heads, layout="interleaved")
    assert np.abs(example["compare"](model, ids, pos, cos, sin)[0] - ref).max() > 1e3 * tol
