"""Run by ``test_distributed_torch.py``: ``python _torch_dist_worker.py RANK WORLD PORT``. Gloo on
127.0.0.1. Each rank rotates its sequence block with its own offset; rank 0 compares the
all-gathered blocks with the unsharded result, for the contiguous and the zigzag layout (plain,
M-RoPE, and a packed row of uneven sequences). Then a DTensor sharded on the sequence dimension
goes through ``enc.rotate``. Rank 0 prints one JSON line."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from _ranks import finish, join
from torch.distributed.tensor import DTensor, Shard, distribute_tensor, init_device_mesh

import peregistry as per
from peregistry.parallel import (
    packed_positions,
    shard_bounds,
    shard_ids,
    shard_offset,
    shard_positions,
    shard_tokens,
    zigzag_shard,
)


def gathered(mine: torch.Tensor, index: torch.Tensor, world: int) -> torch.Tensor:
    """Every rank's rows put back at their global indices (all_gather of rows and indices)."""
    rows = [torch.empty_like(mine) for _ in range(world)]
    idx = [torch.empty_like(index) for _ in range(world)]
    dist.all_gather(rows, mine)
    dist.all_gather(idx, index)
    out = torch.empty(*mine.shape[:-2], mine.shape[-2] * world, mine.shape[-1], dtype=mine.dtype)
    out[..., torch.cat(idx).long(), :] = torch.cat(rows, dim=-2)
    return out


def zigzag(rank: int, world: int, x: torch.Tensor, ids: torch.Tensor,
           rot: per.Encoder, mrope: per.Encoder) -> dict[str, bool]:
    """Zigzag layout: plain (offset 5), M-RoPE, and a packed row of uneven sequences."""
    seq = x.shape[-2]
    idx = shard_tokens(seq, world, rank, layout="zigzag", like=x)
    pos = shard_positions(seq, world, rank, layout="zigzag", offset=5, like=x)
    local = zigzag_shard(x, world, rank, axis=-2)
    got_r = gathered(rot.rotate(local, pos), idx, world)
    got_m = gathered(mrope.rotate(local, zigzag_shard(ids, world, rank)), idx, world)
    cu = torch.tensor([0, 8, 32, 40, 40, 64], dtype=torch.int32)  # each a multiple of 2*world
    total = int(cu[-1])
    xp_ = torch.randn(2, 4, total, 64, generator=torch.Generator().manual_seed(1))
    pidx = shard_tokens(total, world, rank, layout="zigzag", cu_seqlens=cu)
    ppos = shard_positions(total, world, rank, layout="zigzag", cu_seqlens=cu)
    got_p = gathered(rot.rotate(xp_[..., pidx.long(), :], ppos), pidx, world)
    return {"zigzag_rotary_equal": bool(torch.equal(got_r, rot.rotate(x, offset=5))),
            "zigzag_mrope_equal": bool(torch.equal(got_m, mrope.rotate(x, ids))),
            "zigzag_packed_equal": bool(torch.equal(
                got_p, rot.rotate(xp_, packed_positions(cu))))}


def main(rank: int, world: int, port: int) -> None:
    join(rank, world, port)
    seq = 8 * world
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, seq, 64, generator=gen)  # identical on every rank
    ids = torch.randint(0, 50, (3, seq), generator=gen)
    rot = per.get_encoder("rotary", dim=64)
    mrope = per.get_encoder("mrope", dim=64, sections=(8, 12, 12))
    start, stop = shard_bounds(seq, world, rank)
    local = x[..., start:stop, :].contiguous()
    mine_r = rot.rotate(local, offset=shard_offset(stop - start, rank, offset=5))
    mine_m = mrope.rotate(local, shard_ids(ids, world, rank))
    got_r = [torch.empty_like(mine_r) for _ in range(world)]
    got_m = [torch.empty_like(mine_m) for _ in range(world)]
    dist.all_gather(got_r, mine_r)
    dist.all_gather(got_m, mine_m)
    result = {
        "cp_rotary_equal": bool(torch.equal(torch.cat(got_r, dim=-2), rot.rotate(x, offset=5))),
        "cp_mrope_equal": bool(torch.equal(torch.cat(got_m, dim=-2), mrope.rotate(x, ids))),
    }
    result.update(zigzag(rank, world, x, ids, rot, mrope))
    mesh = init_device_mesh("cpu", (world,))
    dx = distribute_tensor(x, mesh, [Shard(2)])
    out = rot.rotate(dx)
    result["dtensor_type"] = isinstance(out, DTensor)
    result["dtensor_placements"] = str(out.placements) if isinstance(out, DTensor) else ""
    result["dtensor_local_equal"] = bool(torch.equal(out.to_local(),
                                                     rot.rotate(x)[..., start:stop, :]))
    result["dtensor_full_equal"] = bool(torch.equal(out.full_tensor(), rot.rotate(x)))
    finish(result if rank == 0 else None)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
