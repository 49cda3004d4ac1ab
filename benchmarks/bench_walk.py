"""The walk of one call: how many peregistry functions and files a public call enters.

A call a newcomer can follow is short. This script follows three calls with ``sys.setprofile``
and counts the distinct peregistry functions (code objects: functions, lambdas, generator
expressions) the call enters, the distinct files they live in, and the moves between files (a
call whose caller is a peregistry function of another file):

* ``rotate``: ``enc.rotate(x)`` of a torch float32 tensor of a shape not seen before, eager;
* ``t5.bias``: the first ``bias`` call of a ``t5`` encoder on NumPy positions;
* ``sinusoidal.encode``: ``get_encoder("sinusoidal", dim=64).encode(positions)`` on NumPy
  (the registry already loaded: the plugins load once per process).

Goal (issue 29): each at most 20 functions in at most 6 files. ``--verbose`` lists them.

Run: ``python benchmarks/bench_walk.py [--verbose]``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import peregistry as per

ROOT = os.path.dirname(os.path.abspath(per.__file__))
GOAL_FUNCTIONS, GOAL_FILES = 20, 6


def walk(call: Callable[[], Any]) -> tuple[list[str], list[str], int]:
    """``(functions, files, moves)`` of peregistry code entered by ``call()``."""
    functions: dict[Any, str] = {}
    moves = 0

    def ours(code: Any) -> bool:
        return code.co_filename.startswith(ROOT)

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal moves
        if event != "call" or not ours(frame.f_code):
            return
        code = frame.f_code
        rel = os.path.relpath(code.co_filename, os.path.dirname(ROOT))
        functions.setdefault(code, f"{rel}:{code.co_firstlineno} {code.co_qualname}")
        back = frame.f_back
        if back is not None and ours(back.f_code) and back.f_code.co_filename != code.co_filename:
            moves += 1

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    names = list(functions.values())
    files = sorted({n.split(":")[0] for n in names})
    return names, files, moves


def cases() -> list[tuple[str, Callable[[], Any]]]:
    import torch

    rot = per.get_encoder("rotary", dim=64)
    rot.rotate(torch.randn(1, 2, 3, 64))  # the engine's first use, at another shape
    x = torch.randn(1, 8, 16, 64)
    t5 = per.get_encoder("t5", num_heads=4)
    params = t5.init(np)
    q = np.arange(8)
    per.get_encoder("sinusoidal", dim=8).encode(np.arange(3))  # the registry loaded
    pos = np.arange(16)
    return [
        ("rotate (torch, new shape, eager)", lambda: rot.rotate(x)),
        ("t5.bias (NumPy, first call)", lambda: t5.bias(q, q, params=params)),
        ("get_encoder('sinusoidal').encode (NumPy)",
         lambda: per.get_encoder("sinusoidal", dim=64).encode(pos)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--verbose", action="store_true", help="list the functions entered")
    args = parser.parse_args()
    print(f"{'call':<44} {'functions':>9} {'files':>5} {'moves':>5}  goal <= "
          f"{GOAL_FUNCTIONS} functions in <= {GOAL_FILES} files")
    for label, call in cases():
        names, files, moves = walk(call)
        ok = len(names) <= GOAL_FUNCTIONS and len(files) <= GOAL_FILES
        print(f"{label:<44} {len(names):>9} {len(files):>5} {moves:>5}  "
              f"{'ok' if ok else 'MISSED'}")
        if args.verbose:
            for n in names:
                print(f"    {n}")


if __name__ == "__main__":
    main()
