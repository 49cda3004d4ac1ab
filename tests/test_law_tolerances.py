"""The rotary law checks must pass a correct encoder whatever positions they draw. Repeated with
other draws (pytest-repeat), check_rotary_relative and check_mrope_relative_per_axis rejected
the built-in mrope on NumPy about once in a hundred: ``<R(m)q, R(n)k>`` varied by 1.2e-12 against
a float64 tolerance of 8.4e-13 that ignored how far the positions reach, though each angle
``p·ω`` rounded in float64 is off by up to ``|p|·eps/2`` (found in issue 15's repeated runs)."""

from __future__ import annotations

import numpy as np
import pytest

import peregistry as per
from peregistry.testing import cases_for
from peregistry.testing._core import selected_backends

pytestmark = pytest.mark.skipif("numpy" not in [b.name for b in selected_backends()],
                                reason="numpy backend not selected (PEREGISTRY_BACKENDS)")

ENCODERS = [
    ("mrope", {"dim": 16, "sections": (2, 3, 3)}),
    ("mrope", {"dim": 32, "sections": (6, 5, 5), "interleaved": True}),
    ("rotary", {"dim": 16}),
    ("rotary", {"dim": 64, "layout": "interleaved"}),
]
CHECKS = ("check_rotary_relative", "check_mrope_relative_per_axis")


@pytest.mark.parametrize(("name", "options"), ENCODERS)
def test_rotary_laws_pass_a_correct_encoder_for_every_draw(name: str,
                                                           options: dict[str, object]) -> None:
    enc = per.get_encoder(name, **options)
    cases = [c for c in cases_for([enc], backends="numpy") if c.spec.name in CHECKS]
    assert cases, "the law checks apply to this encoder"
    failures = []
    for case in cases:
        for seed in range(150):
            case._rng = np.random.default_rng(seed)
            try:
                case.run()
            except Exception as exc:
                failures.append(f"seed {seed}: {exc}")
    assert not failures, f"{len(failures)} draws rejected a correct encoder: {failures[:3]}"
