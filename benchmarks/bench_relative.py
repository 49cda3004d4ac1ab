"""Benchmark of the relative biases against plain hand-written torch, as ratios in one run.

Each ratio is median(time of ours) / median(time of the baseline), timed in interleaved
repetitions (ours, baseline, ours, baseline, ...) so drifts of the machine hit both alike.

* ``t5.bias`` for 1024 x 1024 positions, 16 heads, float32, vs the hand-written torch T5 bias
  (Hugging Face ``T5Attention.compute_bias``: ``k - q``, the bucket formula with its log,
  ``nn.Embedding`` lookup, permute) — goal <= 1.2x. Also shown, for information: vs a torch
  lookup that precomputes the buckets (the same algorithm as ours, without the Array API layer).
* ``alibi.bias`` for 2048 x 2048, 16 heads, float32, vs ``-slopes[:, None, None] *
  (k[None, :] - q[:, None]).abs()`` — goal <= 1.2x.

Run: ``python benchmarks/bench_relative.py [--reps N] [--threads N]``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import peregistry as per

GOAL = 1.2


def interleaved(ours: Callable[[], Any], base: Callable[[], Any], reps: int) -> tuple[float, ...]:
    for _ in range(3):  # warm-up (allocator, caches)
        ours()
        base()
    t_ours, t_base = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        ours()
        t1 = time.perf_counter()
        base()
        t2 = time.perf_counter()
        t_ours.append(t1 - t0)
        t_base.append(t2 - t1)
    mo, mb = statistics.median(t_ours), statistics.median(t_base)
    return mo / mb, mo, mb


def report(name: str, result: tuple[float, ...], goal: float | None) -> bool:
    ratio, mo, mb = result
    verdict = "(for information)"
    if goal is not None:
        verdict = f"(goal <= {goal}x: {'ok' if ratio <= goal else 'MISSED'})"
    print(f"{name:<56} {ratio:5.2f}x  ours {mo * 1e3:7.2f} ms, base {mb * 1e3:7.2f} ms  {verdict}",
          flush=True)
    return goal is None or ratio <= goal


def hf_t5_bias(q: Any, k: Any, weight: Any, *, bidirectional: bool = True,
               num_buckets: int = 32, max_distance: int = 128) -> Any:
    """Hugging Face ``T5Attention.compute_bias`` / ``_relative_position_bucket``, verbatim."""
    import torch

    relative_position = k[None, :] - q[:, None]
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
    )
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    values = torch.nn.functional.embedding(relative_buckets, weight)  # (Q, K, H)
    return values.permute([2, 0, 1])


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.reps} reps, "
          f"medians")
    ok = True

    # -- t5 ----------------------------------------------------------------------------------
    t5: Any = per.get_encoder("t5", num_heads=16)
    params = t5.init(torch, seed=0, dtype=torch.float32)
    weight = params["table"]
    q = torch.arange(1024)
    k = torch.arange(1024)
    assert torch.equal(t5.bias(q, k, params=params), hf_t5_bias(q, k, weight))
    ok &= report("t5.bias 1024x1024, 16 heads vs HF compute_bias",
                 interleaved(lambda: t5.bias(q, k, params=params),
                             lambda: hf_t5_bias(q, k, weight), args.reps), GOAL)
    lut = torch.tensor(t5._cache["lut"])

    def torch_lookup() -> Any:
        idx = (k[None, :] - q[:, None]).clamp(-128, 128) + 128
        return weight.T[:, lut][:, idx]

    assert torch.equal(torch_lookup(), hf_t5_bias(q, k, weight))
    report("t5.bias 1024x1024, 16 heads vs torch bucket-table lookup",
           interleaved(lambda: t5.bias(q, k, params=params), torch_lookup, args.reps), None)

    # -- alibi -------------------------------------------------------------------------------
    alibi: Any = per.get_encoder("alibi", num_heads=16)
    slopes = torch.tensor(alibi.slopes, dtype=torch.float32)
    q2 = torch.arange(2048)
    k2 = torch.arange(2048)

    def torch_alibi() -> Any:
        return -slopes[:, None, None] * (k2[None, :] - q2[:, None]).abs()

    torch.testing.assert_close(alibi.bias(q2, k2), torch_alibi())
    ok &= report("alibi.bias 2048x2048, 16 heads vs hand-written torch",
                 interleaved(lambda: alibi.bias(q2, k2), torch_alibi, args.reps), GOAL)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
