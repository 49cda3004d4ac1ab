"""Regression tests of the hardening issue (adversarial use): each test names its item."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import peregistry as per


# -- item 8: None as positions is a TypeError naming the argument ------------------------------
@pytest.mark.parametrize(("name", "options"), [("sinusoidal", {"dim": 8}),
                                               ("learned", {"num_positions": 4, "dim": 2})])
def test_encode_none_names_positions(name: str, options: dict[str, Any]) -> None:
    enc = per.get_encoder(name, **options)
    params = enc.init(np) if enc.learned else None
    with pytest.raises(TypeError, match=r"positions must be an array .*got None"):
        enc.encode(None, params=params)


@pytest.mark.parametrize(("name", "options", "method"), [
    ("alibi", {"num_heads": 2}, "bias"),
    ("t5", {"num_heads": 2}, "bias"),
    ("transformer-xl", {"dim": 4}, "embed"),
    ("shaw", {"max_distance": 2, "dim": 4}, "embed"),
])
def test_pair_kinds_none_names_which_positions(name: str, options: dict[str, Any],
                                               method: str) -> None:
    enc = per.get_encoder(name, **options)
    params = enc.init(np) if enc.learned else None
    call = getattr(enc, method)
    with pytest.raises(TypeError, match=r"q_positions must be an array .*got None"):
        call(None, np.arange(3), params=params)
    with pytest.raises(TypeError, match=r"k_positions must be an array .*got None"):
        call(np.arange(3), None, params=params)
