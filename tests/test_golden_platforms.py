"""The golden outputs (``tests/test_golden.py``) on another instruction set, and the host
constants that must not depend on it (issue 42, item 0).

This machine is made to look like one without AVX-512 in a subprocess: NumPy drops the dispatch
targets named in ``NPY_DISABLE_CPU_FEATURES``, torch's vectorized kernels follow
``ATEN_CPU_CAPABILITY=avx2`` and XLA compiles for ``--xla_cpu_max_isa=AVX2``. (The C rotation
kernel is not steered: it takes the same bits on every instruction set, ``-ffp-contract=off``
and no FMA, which ``tests/test_native_kernel.py`` holds it to.) On a machine without AVX-512
the subprocess is this machine again, and the tests check what they check here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from peregistry.testing._core import selected_backends

TESTS = Path(__file__).parent


def _without_avx512() -> dict[str, str]:
    """The environment of a process that takes no AVX-512 code (as far as it can be steered)."""
    from numpy._core._multiarray_umath import __cpu_dispatch__ as dispatch

    env = dict(os.environ)
    # Only targets this NumPy dispatches to may be named (others are an error at import):
    # X86_V4, AVX512_ICL, AVX512_SPR on NumPy 2.4; AVX512F, AVX512_SKX, ... before.
    env["NPY_DISABLE_CPU_FEATURES"] = " ".join(
        t for t in dispatch if t.startswith("AVX512") or t == "X86_V4")
    env["ATEN_CPU_CAPABILITY"] = "avx2"
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_max_isa=AVX2").strip()
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _run(code: str, *, timeout: float = 300) -> str:
    done = subprocess.run([sys.executable, "-c", code], env=_without_avx512(), cwd=TESTS.parent,
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def frequencies() -> list[list[str]]:
    """Inverse frequencies of a few rotary dims and bases, as hex (bits)."""
    from peregistry.rope import inv_freq

    return [[w.hex() for w in inv_freq(d, t)] for d in (8, 16, 32, 64, 96, 128)
            for t in (10000.0, 500000.0, 1e6, 22081.79)]


def test_inverse_frequencies_are_the_same_without_avx512() -> None:
    # NumPy's float64 power runs SVML code on AVX-512 (errors up to an ulp) and the C library's
    # pow elsewhere; an ulp of ω_i moves the angle p·ω_i by p·ulp(ω_i): 5.8e-9 in a decode
    # step's output at p = 2**31. The host frequencies must be the same bits on every CPU.
    there = json.loads(_run("import json, test_golden_platforms as t\n"
                            "print(json.dumps(t.frequencies()))"))
    here = frequencies()
    assert there == here


@pytest.mark.parametrize("backend", [b.name for b in selected_backends()])
def test_golden_outputs_hold_without_avx512(backend: str) -> None:
    # The golden files were made with AVX-512; without it the comparison is within the bounds
    # of test_golden.bound (before: 39 outputs of the rotary decode cases failed on torch and
    # NumPy, float32 bit for bit and float64 within 64 ulps).
    how, differ, total = json.loads(_run(
        "import json, test_golden\n"
        f"print(json.dumps(test_golden.compare({backend!r})))"))
    assert not differ, f"{len(differ)} of {total} outputs changed, compared {how}:\n" + \
        "\n".join(differ[:20])
