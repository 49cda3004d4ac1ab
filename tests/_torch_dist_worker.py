"""Run by ``test_distributed_torch.py``: ``python _torch_dist_worker.py RANK WORLD PORT``. Gloo on
127.0.0.1. Each rank rotates its sequence block with its own offset; rank 0 compares the
all-gathered blocks with the unsharded result. Then a DTensor sharded on the sequence dimension
goes through ``enc.rotate``. Rank 0 prints one JSON line."""

from __future__ import annotations

import json
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Shard, distribute_tensor, init_device_mesh

import peregistry as per
from peregistry.parallel import shard_bounds, shard_ids, shard_offset


def main(rank: int, world: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=60))
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
    mesh = init_device_mesh("cpu", (world,))
    dx = distribute_tensor(x, mesh, [Shard(2)])
    out = rot.rotate(dx)
    result["dtensor_type"] = isinstance(out, DTensor)
    result["dtensor_placements"] = str(out.placements) if isinstance(out, DTensor) else ""
    result["dtensor_local_equal"] = bool(torch.equal(out.to_local(),
                                                     rot.rotate(x)[..., start:stop, :]))
    result["dtensor_full_equal"] = bool(torch.equal(out.full_tensor(), rot.rotate(x)))
    dist.barrier()
    if rank == 0:
        print(json.dumps(result), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
