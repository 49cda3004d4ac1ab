"""Regression tests of the rotary engine's hardening (issue 15, items 1, 5, 6, 7, 17): each test
failed before its fix.

* item 1: integer ``offset`` near its dtype's limit never wraps (positions in a wide integer
  dtype, or an error naming ``offset``);
* item 5: concurrent first use on every backend, in fresh processes;
* item 6: huge or non-finite float options are a ``ValueError`` naming the option;
* item 7: absurd ``dim`` is rejected before anything proportional to it is allocated;
* item 17: equal encoders share one position table per process, under a byte budget.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

import peregistry as per

# -- item 6: float options that overflow float64 --------------------------------------------------


@pytest.mark.parametrize(("name", "options", "option"), [
    ("rotary", {"dim": 8, "theta": 10**400}, "theta"),
    ("mrope", {"dim": 8, "sections": (2, 1, 1), "theta": 10**400}, "theta"),
    ("mrope", {"dim": 8, "sections": (2, 1, 1), "theta": -(10**400)}, "theta"),
    ("rotary", {"dim": 8, "theta": math.inf}, "theta"),
    ("rotary", {"dim": 8, "theta": math.nan}, "theta"),
    ("sinusoidal", {"dim": 8, "base": 10**400}, "base"),
    ("transformer-xl", {"dim": 8, "base": 10**400}, "base"),
    ("rotary", {"dim": 8, "scaling": {"type": "linear", "factor": 10**400}}, "factor"),
    ("rotary", {"dim": 8, "scaling": {"type": "longrope", "short_factor": [10**400] * 4,
                                      "long_factor": [1.0] * 4,
                                      "original_max_position_embeddings": 16}}, "short_factor"),
    ("rotary", {"dim": 8, "scaling": {"type": "yarn", "factor": 4.0,
                                      "original_max_position_embeddings": 10**400}}, "scaling"),
])
def test_float_options_beyond_float64_are_a_value_error_naming_the_option(
        name: str, options: dict[str, Any], option: str) -> None:
    with pytest.raises(ValueError, match=option):
        per.get_encoder(name, **options)


def test_option_float_conversion_reports_overflow() -> None:
    spec = per.Option(float, 1.0, allowed="a finite number")
    spec.name = "scale"
    with pytest.raises(ValueError, match=r"x: option 'scale' must be a finite number"):
        spec.convert("x", 10**400)
    floats = per.Option(tuple, (), item=float, allowed="finite numbers")
    floats.name = "weights"
    with pytest.raises(ValueError, match=r"option 'weights'"):
        floats.convert("x", (1.0, -(10**400)))
    assert spec.convert("x", 10**300) == 1e300  # large but finite: kept


# -- item 7: absurd sizes rejected before allocating --------------------------------------------


#: Builds one encoder under a 2 GiB address-space limit (a run of the unfixed code then fails
#: with MemoryError at once instead of exhausting the machine) and prints what it raised.
_BUILD_UNDER_A_MEMORY_CAP = """
import resource, sys, tracemalloc
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
import peregistry as per
name, options = sys.argv[1], eval(sys.argv[2])
tracemalloc.start()
try:
    per.get_encoder(name, **options)
except Exception as exc:
    print(type(exc).__name__, exc, tracemalloc.get_traced_memory()[1])
else:
    print("built")
"""


@pytest.mark.parametrize(("name", "options"), [
    ("rotary", {"dim": 2**40}),
    ("rotary", {"dim": 2**32}),
    ("rotary", {"dim": 2**16 + 2}),
    ("mrope", {"dim": 2**40, "sections": (2**39, 0, 0)}),
    ("transformer-xl", {"dim": 2**40}),
])
def test_absurd_dim_is_rejected_naming_dim_and_the_limit(name: str,
                                                         options: dict[str, Any]) -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _BUILD_UNDER_A_MEMORY_CAP, name, repr(options)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    kind, _, rest = out.strip().partition(" ")
    assert kind == "ValueError", out
    message, _, peak = rest.rpartition(" ")
    assert f"{name}: option 'dim' must be a positive even integer <= 65536, got " in message
    assert int(peak) < 16 << 20, f"{peak} bytes allocated before rejecting dim"


def test_the_largest_dim_is_accepted_and_documented() -> None:
    enc = per.get_encoder("rotary", dim=2**16)
    assert enc.inv_freq().shape == (2**15,)
    assert "<= 65536" in type(enc).dim.allowed
    from peregistry._options import MAX_DIM

    assert MAX_DIM == 2**16
