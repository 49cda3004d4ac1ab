"""Benchmark of ``rotary`` against baselines, as ratios measured in one run.

Each ratio is median(time of ours) / median(time of the baseline), with the two timed in
interleaved repetitions (ours, baseline, ours, baseline, ...) so drifts of the machine hit both.

* prefill, torch float32 and bfloat16, q and k of (1, 32, 4096, 128) and (4, 8, 2048, 64):
  ``rotate(q); rotate(k)`` vs ``q.clone(); k.clone()`` (goal <= 2x); for information, the same
  with tables made once (``enc.tables(positions).rotate_all(q, k)``) and under ``torch.compile``;
* decode, (8, 32, 1, 128) at position 4095, one torch thread: vs a minimal hand-written torch
  RoPE (goal <= 1.2x);
* ``jax.jit(rotate)`` vs a jitted hand-written jax RoPE (goal <= 1.1x), prefill and decode;
* NumPy vs a hand-written NumPy RoPE (goal <= 1.2x);
* ``--copy``: only the prefill (1, 32, 2048, 128) float32 of both layouts against a copy of
  ``x`` made by the same framework (NumPy and torch eager, ``torch.compile``, ``jax.jit``), as
  wall-clock and as CPU-time ratios. CPU time (``time.process_time``: every thread of the
  process) does not count the time other processes hold the cores, so on a shared machine it
  moves far less than the wall clock (it still counts their share of caches and memory
  bandwidth). Run it with ``PEREGISTRY_NATIVE=0`` for the core alone; the threads are
  ``OMP_NUM_THREADS`` (torch and the rotation kernels) and XLA's own pool.

Run: ``python benchmarks/bench_rotary.py [--reps N] [--quick] [--copy]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

import peregistry as per


def interleaved(ours: Callable[[], Any], base: Callable[[], Any], reps: int,
                sync: Callable[[Any], Any] = lambda r: r) -> float:
    for _ in range(2):  # warm-up (allocator, caches, compilation)
        sync(ours())
        sync(base())
    t_ours, t_base = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        sync(ours())
        t1 = time.perf_counter()
        sync(base())
        t2 = time.perf_counter()
        t_ours.append(t1 - t0)
        t_base.append(t2 - t1)
    return statistics.median(t_ours) / statistics.median(t_base)


def interleaved_cpu(ours: Callable[[], Any], base: Callable[[], Any], reps: int,
                    sync: Callable[[Any], Any] = lambda r: r) -> tuple[float, float]:
    """(wall-clock ratio, CPU-time ratio) of the medians, timed as :func:`interleaved`."""
    for _ in range(2):
        sync(ours())
        sync(base())
    wall: tuple[list[float], list[float]] = ([], [])
    cpu: tuple[list[float], list[float]] = ([], [])
    for _ in range(reps):
        for fn, w, c in ((ours, wall[0], cpu[0]), (base, wall[1], cpu[1])):
            t0, p0 = time.perf_counter(), time.process_time()
            sync(fn())
            c.append(time.process_time() - p0)
            w.append(time.perf_counter() - t0)
    med = statistics.median
    return med(wall[0]) / med(wall[1]), med(cpu[0]) / med(cpu[1])


def copy_bench(reps: int) -> None:
    """Prefill against a copy of ``x`` (see the module): each framework that is installed."""
    shape = (1, 32, 2048, 128)
    x_np = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    encs: dict[str, Any] = {lay: per.get_encoder("rotary", dim=128, layout=lay)
                            for lay in ("half", "interleaved")}
    print(f"{'prefill (1, 32, 2048, 128) float32 vs a copy of x':<58} {'wall':>6}  {'cpu':>6}")

    def row(name: str, ratios: tuple[float, float]) -> None:
        print(f"{name:<58} {ratios[0]:5.2f}x  {ratios[1]:5.2f}x", flush=True)

    for lay, enc in encs.items():
        row(f"numpy eager, {lay}", interleaved_cpu(partial(enc.rotate, x_np), x_np.copy, reps))
    try:
        import torch
    except ImportError:
        print("torch not installed: skipped")
    else:
        xt = torch.from_numpy(x_np.copy())
        for lay, enc in encs.items():
            row(f"torch eager, {lay}", interleaved_cpu(partial(enc.rotate, xt), xt.clone, reps))
        for lay, enc in encs.items():
            f = torch.compile(enc.rotate, fullgraph=True, dynamic=False)
            row(f"torch.compile (inductor, compiled cold), {lay}",
                interleaved_cpu(partial(f, xt), xt.clone, reps))
    try:
        import jax
    except ImportError:
        print("jax not installed: skipped")
    else:
        xj = jax.numpy.asarray(x_np)
        copy = partial(jax.jit(jax.numpy.copy), xj)

        def ready(out: Any) -> Any:
            return out.block_until_ready()

        for lay, enc in encs.items():
            row(f"jax.jit, {lay}", interleaved_cpu(partial(jax.jit(enc.rotate), xj), copy, reps,
                                                   sync=ready))


def report(name: str, ratio: float, goal: float) -> None:
    mark = "ok" if ratio <= goal else "MISSED"
    print(f"{name:<58} {ratio:6.2f}x   (goal <= {goal}x: {mark})", flush=True)


def torch_prefill(reps: int, quick: bool) -> None:
    import torch

    shapes = [(4, 8, 2048, 64)] if quick else [(1, 32, 4096, 128), (4, 8, 2048, 64)]
    for shape in shapes:
        enc = per.get_encoder("rotary", dim=shape[-1])
        for dtype in (torch.float32, torch.bfloat16):
            q = torch.randn(shape, dtype=dtype)
            k = torch.randn(shape, dtype=dtype)
            r = interleaved(lambda q=q, k=k, enc=enc: (enc.rotate(q), enc.rotate(k)),
                            lambda q=q, k=k: (q.clone(), k.clone()), reps)
            report(f"torch prefill {shape} {str(dtype)[6:]} vs clone", r, 2.0)
            tables = enc.tables(torch.arange(shape[-2]))  # type: ignore[attr-defined]
            r = interleaved(lambda q=q, k=k, t=tables: t.rotate_all(q, k),
                            lambda q=q, k=k: (q.clone(), k.clone()), reps)
            report("  same, enc.tables(...).rotate_all(q, k) (information)", r, 2.0)
            compiled = _compiled_pair(enc)
            r = interleaved(lambda q=q, k=k, f=compiled: f(q, k),
                            lambda q=q, k=k: (q.clone(), k.clone()), reps)
            report("  same, torch.compile(rotate) (information)", r, 2.0)


def _compiled_pair(enc: Any) -> Callable[[Any, Any], Any]:
    import torch

    return torch.compile(lambda q, k: (enc.rotate(q), enc.rotate(k)), fullgraph=True)  # type: ignore[no-any-return]


def _torch_minimal_rope(inv_freq: Any) -> Callable[[Any, int], Any]:
    import torch

    def rope(x: Any, pos: int) -> Any:
        freqs = torch.arange(pos, pos + x.shape[-2], dtype=torch.float32)[:, None] * inv_freq
        cos, sin = freqs.cos(), freqs.sin()
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h], x[..., h:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    return rope


def _torch_minimal_rope_ids(inv_freq: Any) -> Callable[[Any, Any], Any]:
    """The same, given a position_ids tensor (as Hugging Face models pass them)."""
    import torch

    def rope(x: Any, pos: Any) -> Any:
        freqs = pos.to(torch.float32)[:, None] * inv_freq
        cos, sin = freqs.cos(), freqs.sin()
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h], x[..., h:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    return rope


def torch_decode(reps: int) -> None:
    """A decode loop: every call is at the next position (4095, 4096, ...), as in generation, so
    no per-call cache can help; ours and the baseline step through the same positions."""
    import itertools

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        enc = per.get_encoder("rotary", dim=128)
        inv = torch.tensor(enc.inv_freq(), dtype=torch.float32)  # type: ignore[attr-defined]
        rope = _torch_minimal_rope(inv)
        q = torch.randn(8, 32, 1, 128)
        ours_t, base_t = itertools.count(4095), itertools.count(4095)
        r = interleaved(lambda: enc.rotate(q, offset=next(ours_t)),
                        lambda: rope(q, next(base_t)), reps * 20)
        report("torch decode (8, 32, 1, 128) from @4095, 1 thread", r, 1.2)
        rope_ids = _torch_minimal_rope_ids(inv)
        ours_p, base_p = itertools.count(4095), itertools.count(4095)
        r = interleaved(lambda: enc.rotate(q, torch.tensor([next(ours_p)])),
                        lambda: rope_ids(q, torch.tensor([next(base_p)])), reps * 20)
        report("  same, given a position_ids tensor each step (both)", r, 1.2)
    finally:
        torch.set_num_threads(threads)


def jax_bench(reps: int, quick: bool) -> None:
    import jax
    import jax.numpy as jnp

    def hand(inv: Any) -> Callable[[Any, Any], Any]:
        def rope(x: Any, pos: Any) -> Any:
            freqs = pos.astype(jnp.float32)[:, None] * inv
            cos, sin = jnp.cos(freqs), jnp.sin(freqs)
            h = x.shape[-1] // 2
            x1, x2 = x[..., :h], x[..., h:]
            return jnp.concatenate((x1 * cos - x2 * sin, x2 * cos + x1 * sin), axis=-1)

        return jax.jit(rope)

    cases = [((4, 8, 2048, 64), 0), ((8, 32, 1, 128), 4095)]
    if not quick:
        cases.insert(0, ((1, 32, 4096, 128), 0))
    for shape, start in cases:
        enc = per.get_encoder("rotary", dim=shape[-1])
        inv = jnp.asarray(enc.inv_freq(), dtype=jnp.float32)  # type: ignore[attr-defined]
        ours = jax.jit(lambda x, p, enc=enc: enc.rotate(x, p))  # type: ignore[attr-defined]
        base = hand(inv)
        x = jnp.asarray(np.random.default_rng(0).standard_normal(shape), dtype=jnp.float32)
        pos = jnp.arange(start, start + shape[-2])
        n = reps if shape[-2] > 1 else reps * 20
        r = interleaved(lambda x=x, pos=pos, ours=ours: ours(x, pos),
                        lambda x=x, pos=pos, base=base: base(x, pos), n,
                        sync=lambda out: out.block_until_ready())
        report(f"jax.jit {shape} vs jitted hand-written (no x64)", r, 1.1)


def numpy_bench(reps: int, quick: bool) -> None:
    def hand(x: Any, pos: Any, inv: Any) -> Any:
        freqs = pos[:, None].astype(np.float64) * inv
        cos, sin = np.cos(freqs), np.sin(freqs)
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h], x[..., h:]
        return np.concatenate((x1 * cos - x2 * sin, x2 * cos + x1 * sin), axis=-1).astype(
            x.dtype)

    cases = [((4, 8, 2048, 64), 0), ((8, 32, 1, 128), 4095)]
    for shape, start in cases:
        enc = per.get_encoder("rotary", dim=shape[-1])
        inv = enc.inv_freq()  # type: ignore[attr-defined]
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        pos = np.arange(start, start + shape[-2])
        n = reps if shape[-2] > 1 else reps * 20
        r = interleaved(lambda x=x, s=start, enc=enc: enc.rotate(x, offset=s),
                        lambda x=x, pos=pos, inv=inv: hand(x, pos, inv), n)
        report(f"numpy {shape} float32 vs hand-written", r, 1.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="skip the largest shapes")
    parser.add_argument("--copy", action="store_true",
                        help="only the prefill of both layouts against a copy, wall and CPU time")
    args = parser.parse_args()
    print(f"ratios = median(ours) / median(baseline), {args.reps} interleaved repetitions")
    if args.copy:
        from peregistry.cli._bench import kernels_line

        print(kernels_line())
        copy_bench(args.reps)
        print(f"load average at the end {os.getloadavg()[0]:.2f}")
        return
    try:
        import torch

        from peregistry.cli._bench import kernels_line

        print(f"torch {torch.__version__}; {kernels_line()}")
        torch_prefill(args.reps, args.quick)
        torch_decode(args.reps)
    except ImportError:
        print("torch not installed: skipped")
    try:
        jax_bench(args.reps, args.quick)
    except ImportError:
        print("jax not installed: skipped")
    numpy_bench(args.reps, args.quick)


if __name__ == "__main__":
    main()
