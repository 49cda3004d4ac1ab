"""docs/examples/torch_causal_lm.py runs as its docstring says (torch env): a tiny causal model
using ``enc.tables()`` once per forward equals a hand-written RoPE, learns, and decodes with a
KV cache as a full forward does. Its reference check is shown to catch a wrong rotation."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

import peregistry as per
from peregistry.testing._core import selected_backends

pytestmark = pytest.mark.skipif("torch" not in [b.name for b in selected_backends()],
                                reason="torch is not a selected backend")

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "torch_causal_lm.py"


@pytest.fixture(scope="module")
def example() -> dict[str, Any]:
    """The example's module globals (not run as ``__main__``)."""
    return runpy.run_path(str(EXAMPLE), run_name="torch_causal_lm_example")


def test_example_runs_as_documented(example: dict[str, Any],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    threads = torch.get_num_threads()
    try:
        rc = example["main"]([])              # the documented command's defaults
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.startswith("threads 1, 60 steps\n"), out
    assert "FAILED" not in out, out


def test_reference_check_catches_a_wrong_rotation(example: dict[str, Any]) -> None:
    import torch

    torch.manual_seed(0)
    model = example["TinyLM"](example["Config"]())
    ids = torch.randint(0, model.cfg.vocab, (2, 12))
    assert example["check_reference"](model, ids) <= 256 * torch.finfo(torch.float64).eps
    # the other pairing of features: the hand-written reference must tell it apart
    model.enc = per.get_encoder("rotary", dim=model.head_dim, layout="interleaved")
    diff = example["check_reference"](model, ids)
    assert diff > 1e-3, diff
    assert example["failures"]({"reference_rel_diff": diff, "loss_end": 0.0, "accuracy": 1.0,
                                "loss_start": 1.0, "decode_rel_diff": 0.0,
                                "decode_same_tokens": 1.0}, 16)
