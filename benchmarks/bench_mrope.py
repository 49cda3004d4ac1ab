"""Benchmark of ``mrope`` against ``rotary`` on the same shape, as ratios measured in one run.

Both rotate q of shape (batch, heads, seq, dim) at explicit positions: ``rotary`` at ``(seq,)``,
``mrope`` (Qwen2-VL sections 16, 24, 24) at ``(3, seq)`` ids of an image grid after text. The
extra work of M-RoPE is choosing each pair's axis; the goal is mrope <= 1.2x rotary, on
torch (eager float32), ``jax.jit`` and NumPy. Timings interleave the two (median of ``--reps``).

Run: ``python benchmarks/bench_mrope.py [--reps N] [--quick]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

import peregistry as per

sys.path.insert(0, str(Path(__file__).parent))
from bench_rotary import interleaved, report

GOAL = 1.2


def _ids(seq: int) -> np.ndarray[Any, Any]:
    """(3, seq) ids: 16 text tokens, then an image grid of rows of 32 patches, then text."""
    t = np.arange(seq)
    ids = np.stack([t, t, t])
    n_img = min(seq - 32, 32 * ((seq - 32) // 32))
    grid = np.arange(n_img)
    ids[0, 16:16 + n_img] = 16
    ids[1, 16:16 + n_img] = 16 + grid // 32
    ids[2, 16:16 + n_img] = 16 + grid % 32
    tail = ids[:, :16 + n_img].max() + 1
    ids[:, 16 + n_img:] = tail + np.arange(seq - 16 - n_img)
    return ids


def bench_shape(shape: tuple[int, ...], reps: int) -> None:
    import jax
    import jax.numpy as jnp
    import torch

    rope = per.get_encoder("rotary", dim=128, theta=1e6)
    mrope = per.get_encoder("mrope", dim=128, theta=1e6, sections=(16, 24, 24))
    ids = _ids(shape[-2])
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)

    xt, it, pt = torch.from_numpy(x), torch.from_numpy(ids), torch.from_numpy(ids[0])
    r = interleaved(lambda: mrope.rotate(xt, it), lambda: rope.rotate(xt, pt), reps)
    report(f"torch {shape} float32 mrope vs rotary", r, GOAL)

    xj, ij, pj = jnp.asarray(x), jnp.asarray(ids), jnp.asarray(ids[0])
    fm = jax.jit(lambda a, p: mrope.rotate(a, p))
    fr = jax.jit(lambda a, p: rope.rotate(a, p))
    r = interleaved(lambda: fm(xj, ij), lambda: fr(xj, pj), reps,
                    sync=lambda o: o.block_until_ready())
    report(f"jax.jit {shape} float32 mrope vs rotary", r, GOAL)

    r = interleaved(lambda: mrope.rotate(x, ids), lambda: rope.rotate(x, ids[0]), reps)
    report(f"numpy {shape} float32 mrope vs rotary", r, GOAL)


def run(reps: int, quick: bool) -> None:
    shapes = [(1, 16, 1024, 128)] if quick else [(1, 16, 1024, 128), (1, 28, 4096, 128)]
    for shape in shapes:
        bench_shape(shape, reps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="only the smaller shape")
    args = parser.parse_args()
    print(f"ratios = median(mrope) / median(rotary), {args.reps} interleaved repetitions")
    run(args.reps, args.quick)


if __name__ == "__main__":
    main()
