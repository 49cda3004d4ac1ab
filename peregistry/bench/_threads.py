"""The threads of long work, set on purpose: ``peregistry bench`` times ours and the hand-written
code on the same threads, ``peregistry study`` trains tiny models that gain nothing from more than
one. On a loaded machine a framework's default (a thread per core) makes every parallel operation
wait for the slowest core, and a timing measures the machine's other work instead of the code."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["load_average", "load_text", "threads", "usable_cpus"]

#: Read by OpenMP and the BLAS libraries when they start (torch's and NumPy's pools), and by
#: rotation kernels at each call (the C kernel's NumPy path reads ``OMP_NUM_THREADS``).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: XLA's CPU flags for one thread: no multi-threaded Eigen, one intra-op thread. XLA reads
#: ``XLA_FLAGS`` when its CPU backend starts; more than one thread has no flag of its own.
XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def load_average() -> float | None:
    """The 1-minute load average, where the system reports one."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system reports one, else the
    CPU count; at least 1)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def load_text(start: float | None = None) -> str:
    """``"2 CPUs, load average 4.23"``; with ``start``, ``"... 3.10 at the start, 4.23 now"``."""
    now = load_average()
    if now is None:
        return f"{os.cpu_count()} CPUs"
    at = f"{start:.2f} at the start, {now:.2f} at the end" if start is not None else f"{now:.2f}"
    return f"{os.cpu_count()} CPUs, load average {at}"


@contextlib.contextmanager
def threads(n: int, *, torch: bool = False, jax: bool = True,
            interop: bool = True) -> Iterator[list[str]]:
    """Run the body on ``n`` threads and yield what was set, one phrase per framework.

    Sets :data:`THREAD_VARIABLES` to ``n``; torch's intra-op threads (and with ``interop`` its
    inter-op threads, which torch lets a process set once, before any parallel work, and which
    are not restored: a command's choice, not a library call's) when torch is imported or
    ``torch`` asks for it; with ``jax`` and ``n == 1``, XLA's :data:`XLA_ONE_THREAD` flags if
    JAX's CPU backend can still read them (JAX not imported yet). On exit the environment and torch's
    intra-op count are restored; what a framework read while the body ran stays read.

    :raises ValueError: if ``n`` is not a positive integer.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"threads must be a positive integer, got {n!r}")
    saved = {k: os.environ.get(k) for k in (*THREAD_VARIABLES, "XLA_FLAGS")}
    said = []
    for key in THREAD_VARIABLES:
        os.environ[key] = str(n)
    said.append(f"OMP_NUM_THREADS={n} (OpenMP, BLAS, rotation kernels)")
    torch_module: Any = None
    torch_before = 0
    if "torch" in sys.modules or (torch and importlib.util.find_spec("torch") is not None):
        torch_module = importlib.import_module("torch")
        torch_before = torch_module.get_num_threads()
        torch_module.set_num_threads(n)
        if interop:
            with contextlib.suppress(RuntimeError):  # set already, or parallel work has run
                torch_module.set_num_interop_threads(n)
        said.append(f"torch {torch_module.get_num_threads()} "
                    f"(inter-op {torch_module.get_num_interop_threads()})")
    if not jax:
        pass
    elif "jax" in sys.modules:
        said.append("JAX imported before: XLA's pool as it started")
    elif n == 1 and "xla_cpu_multi_thread_eigen" not in (saved["XLA_FLAGS"] or ""):
        os.environ["XLA_FLAGS"] = f"{saved['XLA_FLAGS'] or ''} {XLA_ONE_THREAD}".strip()
        said.append("JAX (if used) 1 (XLA_FLAGS)")
    try:
        yield said
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if torch_module is not None:
            torch_module.set_num_threads(torch_before)
