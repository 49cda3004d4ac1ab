"""Gloo ranks on 127.0.0.1 for the distributed torch tests: ``run_ranks`` starts one process per
rank of a worker script (``python WORKER RANK WORLD PORT``) and returns their stdouts; the
workers call ``join`` and ``finish`` around their work. Workers run as scripts, with ``tests/``
first on ``sys.path``, so they import this module by its bare name."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any


def run_ranks(worker: Path, world: int, timeout: float = 120.0) -> list[str]:
    """Run ``world`` ranks of ``worker``; every one must exit 0 (its stderr tail otherwise)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, str(worker), str(r), str(world), str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    outs = []
    try:
        for proc in procs:
            outs.append(proc.communicate(timeout=timeout))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    for proc, (_, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err[-4000:]
    return [out for out, _ in outs]


def last_json(stdout: str) -> Any:
    """The JSON line a rank printed last."""
    return json.loads(stdout.strip().splitlines()[-1])


def join(rank: int, world: int, port: int) -> None:
    """Join the gloo process group of ``run_ranks``."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=60))


def finish(result: object | None) -> None:
    """Wait for every rank, print ``result`` as one JSON line (if given), leave the group, exit.

    Exits with ``os._exit`` to skip the interpreter's teardown, where torch's C++ threads may
    still be joinable: one rank aborted once on a loaded machine ("terminate called without an
    active exception", exit -6, no Python error), not reproduced in 12 runs since."""
    import torch.distributed as dist

    dist.barrier()
    if result is not None:
        print(json.dumps(result), flush=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
