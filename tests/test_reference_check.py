"""What ``check_matches_float64_numpy`` proves and what it does not (issue 34, item 2): it holds
each backend and dtype to the encoder's *own* float64 NumPy result, so a sinusoid with the wrong
base passes it; an encoder's ``float64_reference`` (code independent of the encoder's, the
paper's formula) is checked by ``check_matches_reference`` on every backend, and catches it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS

import peregistry as per
from peregistry.encoders.sinusoidal import Sinusoidal, sinusoidal_frequencies
from peregistry.plugin import LearnedParams
from peregistry.testing import check_encoder


class Base500(Sinusoidal):
    """Vaswani's sinusoid computed with base 500 whatever its ``base`` option says."""

    name = "test-sinusoid-base-500"

    def _validate(self) -> None:
        super()._validate()
        self._cache["freqs"] = sinusoidal_frequencies(self._values["dim"], 500.0)


def _statuses(enc: per.Encoder, backend: str) -> dict[str, str]:
    report = check_encoder(enc, backends=[backend])
    return {r.check: r.status for r in report.rows}


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_wrong_base_passes_self_agreement_and_fails_the_reference(backend: str) -> None:
    status = _statuses(Base500(dim=8), backend)
    assert status["check_matches_float64_numpy"] == "passed"  # agreement with itself only
    assert status["check_matches_reference"] == "failed"
    assert _statuses(Sinusoidal(dim=8, layout="split"), backend)["check_matches_reference"] \
        == "passed"


def _ramp(enc: per.Encoder, inputs: Mapping[str, Any], params: Any) -> Any:
    """A learned ramp's reference: ``p · w`` per feature, in float64."""
    return np.asarray(inputs["positions"], dtype=np.float64)[..., None] * params["w"]


class Ramp(LearnedParams, per.AbsoluteEncoder):
    """A plugin-style learned encoder with its reference attached: ``p · w``, ``w`` learned."""

    name = "test-learned-ramp"
    dim = per.Option(int, 4, allowed="a positive integer", check=lambda n: n > 0)
    float64_reference = _ramp

    @property
    def out_dim(self) -> int:
        return int(self._values["dim"])

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"w": (int(self._values["dim"]),)}

    def _encode(self, positions: Any, *, params: Mapping[str, Any], ctx: Any) -> Any:
        w = params["w"]
        return ctx.xp.astype(positions, w.dtype)[..., None] * w


class SteeperRamp(Ramp):
    name = "test-learned-ramp-steeper"

    def _encode(self, positions: Any, *, params: Mapping[str, Any], ctx: Any) -> Any:
        return 1.5 * super()._encode(positions, params=params, ctx=ctx)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_plugins_reference_with_learned_params(backend: str) -> None:
    """The reference receives the float64 params every case uses; a wrong formula fails."""
    assert _statuses(Ramp(), backend)["check_matches_reference"] == "passed"
    status = _statuses(SteeperRamp(), backend)
    assert status["check_matches_reference"] == "failed"
    assert status["check_matches_float64_numpy"] == "passed"


def test_without_a_reference_the_check_does_not_run() -> None:
    assert "check_matches_reference" not in _statuses(per.get_encoder("alibi", num_heads=4),
                                                      "numpy")
