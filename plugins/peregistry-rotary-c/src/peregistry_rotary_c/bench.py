"""Micro-benchmark: the kernel against a memory copy, ``python -m peregistry_rotary_c.bench``.

A rotation reads ``x`` once and writes a new array once, so its limit is a copy of ``x`` made by
the same framework (``x.copy()``, ``x.clone()``): every figure is a ratio against that copy,
timed in the same run in alternating repetitions (ours, copy, ours, copy, ...) so that a drift
of the machine hits both alike; the ratio of the medians is printed. Cases: a prefill
(1, 32, 2048, 128) float32, half and interleaved, bfloat16 too (torch), and a decode step
(1, 32, 1, 128), on NumPy and torch eager; also the prefill on one thread, to show what the pool
brings. The threads each case ran on are printed (the kernel's rule: at most the user's count,
one per 2^16 elements).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from .kernel import CRotationKernel, kernel_status, load, numpy_threads

__all__ = ["main"]


def _median_seconds(fn: Callable[[], Any], number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number


def ratio(ours: Callable[[], Any], copy: Callable[[], Any], *, number: int, repeat: int) -> tuple[float, float, float]:
    """(median seconds of ours, of the copy, their ratio), alternating repetitions."""
    ours(), copy()  # warm: first-call costs (plans, pool threads, page faults) are not measured
    a, b = [], []
    for _ in range(repeat):
        a.append(_median_seconds(ours, number))
        b.append(_median_seconds(copy, number))
    ma, mb = statistics.median(a), statistics.median(b)
    return ma, mb, ma / mb


def _threads_used(elements: int, rows: int, threads: int) -> int:
    """The extension's rule (``_rotary.c``: rotate): one thread per 2^16 elements, at most the
    count asked for."""
    module = load()
    if module is None:
        return 0
    n: int = min(threads, elements // module.MIN_ELEMENTS_PER_THREAD, rows, module.MAX_THREADS)
    return max(1, n)


def _row(name: str, ours: float, copy: float, r: float, threads: int, goal: str) -> None:
    unit, scale = ("us", 1e6) if copy < 1e-3 else ("ms", 1e3)
    print(f"{name:<44} {ours * scale:9.2f} {copy * scale:9.2f} {unit}  {r:6.2f}x  {threads:>3}  {goal}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m peregistry_rotary_c.bench", description=__doc__)
    parser.add_argument("--repeat", type=int, default=15, help="alternating repetitions (default 15)")
    parser.add_argument("--no-torch", action="store_true", help="NumPy only")
    args = parser.parse_args(argv)
    import numpy as np

    status = kernel_status()
    module = load()
    print(f"peregistry-rotary-c: {status}; ISA {getattr(module, 'ISA', '-')}; "
          f"pool threads so far {module.pool_threads() if module else '-'}; cpus "
          f"{len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()}")
    if module is None:
        return 1
    k = CRotationKernel()
    rng = np.random.default_rng(0)
    pos = np.arange(2048)[:, None] * 10000.0 ** (-np.arange(64) / 64)
    cos, sin = np.cos(pos).astype(np.float32), np.sin(pos).astype(np.float32)
    prefill = rng.standard_normal((1, 32, 2048, 128)).astype(np.float32)
    decode = rng.standard_normal((1, 32, 1, 128)).astype(np.float32)
    big, small = dict(number=3, repeat=args.repeat), dict(number=2000, repeat=args.repeat)
    print(f"{'case':<44} {'ours':>9} {'copy':>9}      {'ratio':>6}  thr  goal")

    nt = numpy_threads()
    rows = 32 * 2048
    for layout in ("half", "interleaved"):
        _row(f"numpy prefill f32 {layout}", *ratio(partial(k.rotate, prefill, cos, sin, layout=layout),
                                                   prefill.copy, **big), _threads_used(prefill.size, rows, nt),
             "<= 1.5x")
    old = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        _row("numpy prefill f32 half, kernel on 1 thread",
             *ratio(lambda: k.rotate(prefill, cos, sin, layout="half"), prefill.copy, **big), 1, "(pool off)")
    finally:
        if old is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = old
    _row("numpy decode (1, 32, 1, 128) f32 half",
         *ratio(lambda: k.rotate(decode, cos[7:8], sin[7:8], layout="half"), decode.copy, **small), 1, "")

    if not args.no_torch:
        try:
            import torch
        except ImportError:
            print("torch: not installed")
            return 0
        tt = torch.get_num_threads()
        tcos, tsin = torch.from_numpy(cos), torch.from_numpy(sin)
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.from_numpy(prefill).to(dtype)
            for layout in ("half", "interleaved"):
                _row(f"torch prefill {str(dtype)[6:]} {layout}",
                     *ratio(partial(k.rotate, x, tcos, tsin, layout=layout), x.clone, **big),
                     _threads_used(x.numel(), rows, tt), "<= 1.2x")
        x = torch.from_numpy(prefill)
        torch.set_num_threads(1)
        try:
            t1 = ratio(lambda: k.rotate(x, tcos, tsin, layout="half"), x.clone, **big)
        finally:
            torch.set_num_threads(tt)
        print("  (next row: the kernel and the copy both on torch.set_num_threads(1))")
        _row("torch prefill float32 half, 1 thread", *t1, 1, "(pool off)")
        xd = torch.from_numpy(decode)
        _row("torch decode (1, 32, 1, 128) f32 half",
             *ratio(lambda: k.rotate(xd, tcos[7:8], tsin[7:8], layout="half"), xd.clone, **small), 1, "")
    print(f"pool threads now: {module.pool_threads()} (created once, reused by every call)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
