"""Run by ``test_stateless.py``: ``python _torch_stale_worker.py RANK WORLD PORT``. Gloo on
127.0.0.1, two ranks: a tensor-parallel decode loop. At each step rank 0 broadcasts new
positions into rank 1's positions tensor (the same object at every step, written by the
collective in place) and rank 1 rotates with it. After the loop, with the caches cleared, each
step's result must be bit for bit the rotation of a fresh tensor of the positions received then,
and within float64 rounding of RoPE's formula. Rank 1 prints one JSON line: the wrong steps."""

from __future__ import annotations

import sys

import numpy as np
import torch
import torch.distributed as dist
from _ranks import finish, join

import peregistry as per
from peregistry.rope import clear_caches

DIM, SEQ, STEPS = 8, 4, 6


def formula(x: np.ndarray, pos: np.ndarray, theta: float = 10000.0) -> np.ndarray:
    """RoPE in float64: pairs ``(i, i + d/2)`` rotated by ``p·θ^(-2i/d)``."""
    half = x.shape[-1] // 2
    ang = pos[:, None].astype(np.float64) * theta ** (-2.0 * np.arange(half) / x.shape[-1])
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * np.cos(ang) - b * np.sin(ang), a * np.sin(ang) + b * np.cos(ang)],
                          axis=-1)


def main(rank: int, world: int, port: int) -> None:
    join(rank, world, port)
    enc = per.get_encoder("rotary", dim=DIM)
    x = torch.randn(2, SEQ, DIM, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    positions = torch.zeros(SEQ, dtype=torch.int64)  # rank 1's receive buffer, one object
    received = []
    for step in range(STEPS):
        if rank == 0:
            positions = torch.arange(SEQ, dtype=torch.int64) + 7 * step + 3
        dist.broadcast(positions, 0)
        if rank == 1:
            received.append((positions.tolist(), enc.rotate(x, positions)))
    # Expected values only now: nothing kept by the calls of the loop may serve them.
    clear_caches()
    wrong: list[dict[str, object]] = []
    for step, (values, got) in enumerate(received):
        fresh = enc.rotate(x, torch.tensor(values, dtype=torch.int64))
        near = np.allclose(got.numpy(), formula(x.numpy(), np.array(values)), rtol=0, atol=1e-12)
        if not (torch.equal(got, fresh) and near):
            wrong.append({"step": step, "positions": values,
                          "equal_to_fresh": bool(torch.equal(got, fresh)), "near_formula": bool(near)})
    finish({"steps": STEPS, "wrong": wrong} if rank == 1 else None)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
