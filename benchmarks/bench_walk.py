"""The walk of one call: how many peregistry functions and files a public call enters.

A call a newcomer can follow is short. This script follows calls with ``sys.setprofile`` and
counts the distinct peregistry functions (code objects: functions, lambdas, generator
expressions) a call enters, the distinct files they live in, the moves between files (a call
whose caller is a peregistry function of another file), and how often the most visited file is
entered (a call from another file, or the call's first):

* ``rotate`` warm: ``enc.rotate(x)`` again at the shape of the call before (torch; NumPy);
* ``rotate`` new shape: a torch tensor of a shape not seen before, eager (the engine and the
  encoder's table of positions made by an earlier call);
* ``tables.rotate_all(q, k)``: one layer's call on the tables of one forward (torch);
* ``t5.bias``: the first ``bias`` call of a ``t5`` encoder on NumPy positions;
* ``sinusoidal.encode``: ``get_encoder("sinusoidal", dim=64).encode(positions)`` on NumPy,
  construction included (the registry already loaded: the plugins load once per process);
  and, apart, the ``encode`` of that encoder made before (the call a model makes again).

The limits (issue 44) are :data:`LIMITS`; the script exits 1 when one is missed.
``--verbose`` lists the functions; ``--markdown`` prints the table docs/architecture.md and
docs/benchmarks.md show (``tests/test_architecture.py`` holds the docs to :data:`LIMITS`).

Run: ``python benchmarks/bench_walk.py [--verbose | --markdown]``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

import peregistry as per

ROOT = os.path.dirname(os.path.abspath(per.__file__))


class Limit(NamedTuple):
    """At most ``functions`` functions in at most ``files`` files; ``once``: no file entered
    twice."""

    functions: int
    files: int
    once: bool = False

    def describe(self) -> str:
        return (f"≤ {self.functions} in ≤ {self.files} files"
                + (", no file entered twice" if self.once else ""))


#: Each call's label (as the tables show it) and its limit.
LIMITS: dict[str, Limit] = {
    "`rotate` (torch, warm)": Limit(12, 5),
    "`rotate` (NumPy, warm)": Limit(12, 5),
    "`rotate` (torch, a new shape)": Limit(16, 6),
    "`tables.rotate_all(q, k)` (torch, one layer)": Limit(4, 2),
    "`t5.bias` (NumPy, first call)": Limit(16, 5, once=True),
    "`get_encoder(\"sinusoidal\", dim=64).encode` (NumPy)": Limit(16, 5, once=True),
    "`sinusoidal.encode` (NumPy, the encoder made)": Limit(16, 5, once=True),
}


class Walk(NamedTuple):
    functions: list[str]
    files: list[str]
    moves: int
    entries: int  # how often the most visited file is entered

    def meets(self, limit: Limit) -> bool:
        return (len(self.functions) <= limit.functions and len(self.files) <= limit.files
                and (not limit.once or self.entries <= 1))

    def figures(self) -> str:
        return (f"{len(self.functions)} functions, {len(self.files)} files, {self.moves} moves, "
                f"a file entered at most {self.entries}x")


def walk(call: Callable[[], Any]) -> Walk:
    """The peregistry code entered by ``call()``."""
    functions: dict[Any, str] = {}
    entered: dict[str, int] = {}
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
        ours_back = back is not None and ours(back.f_code)
        if ours_back and back.f_code.co_filename != code.co_filename:
            moves += 1
        if not ours_back or back.f_code.co_filename != code.co_filename:
            entered[rel] = entered.get(rel, 0) + 1

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    names = list(functions.values())
    files = sorted({n.split(":")[0] for n in names})
    return Walk(names, files, moves, max(entered.values(), default=0))


def cases() -> dict[str, Callable[[], Any]]:
    """The calls of :data:`LIMITS`, each made ready (what it needs made by earlier calls)."""
    import torch

    rot = per.get_encoder("rotary", dim=64)
    rot.rotate(torch.randn(1, 2, 3, 64))  # the engine's first use, at another shape
    warm_t = torch.randn(1, 8, 16, 64)
    rot.rotate(warm_t)
    warm_n = np.random.default_rng(0).standard_normal((1, 8, 16, 64)).astype(np.float32)
    rot.rotate(warm_n)
    new = torch.randn(1, 4, 24, 64)
    q, k = torch.randn(1, 8, 16, 64), torch.randn(1, 8, 16, 64)
    tables = rot.tables(torch.arange(16))
    tables.rotate_all(q, k)
    t5 = per.get_encoder("t5", num_heads=4)
    params = t5.init(np)
    ids = np.arange(8)
    per.get_encoder("sinusoidal", dim=8).encode(np.arange(3))  # the registry loaded
    pos = np.arange(16)
    sinusoidal = per.get_encoder("sinusoidal", dim=64)
    calls: list[Callable[[], Any]] = [
        lambda: rot.rotate(warm_t),
        lambda: rot.rotate(warm_n),
        lambda: rot.rotate(new),
        lambda: tables.rotate_all(q, k),
        lambda: t5.bias(ids, ids, params=params),
        lambda: per.get_encoder("sinusoidal", dim=64).encode(pos),
        lambda: sinusoidal.encode(pos),
    ]
    return dict(zip(LIMITS, calls, strict=True))


def markdown(walks: dict[str, Walk]) -> str:
    """The table of the docs: call, functions / files / moves / most entries, the limit."""
    rows = ["| call | functions, files, moves, most entries of a file | limit | |",
            "| --- | --- | --- | --- |"]
    for label, w in walks.items():
        limit = LIMITS[label]
        rows.append(f"| {label} | {len(w.functions)}, {len(w.files)}, {w.moves}, {w.entries} | "
                    f"{limit.describe()} | {'ok' if w.meets(limit) else 'MISSED'} |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--verbose", action="store_true", help="list the functions entered")
    parser.add_argument("--markdown", action="store_true", help="print the docs' table")
    args = parser.parse_args()
    walks = {label: walk(call) for label, call in cases().items()}
    if args.markdown:
        print(markdown(walks))
    else:
        for label, w in walks.items():
            limit = LIMITS[label]
            print(f"{label:<52} {w.figures():<58} {limit.describe():<40} "
                  f"{'ok' if w.meets(limit) else 'MISSED'}")
            if args.verbose:
                for n in w.functions:
                    print(f"    {n}")
    return 0 if all(w.meets(LIMITS[label]) for label, w in walks.items()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
