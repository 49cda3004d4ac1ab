"""The study's models side by side: each in a process of its own (spawned, so that no thread
pool of the parent is inherited half-initialised) on one thread, as many processes as asked.
Each model is seeded and single-threaded wherever it runs, so its numbers are the same bits as
one after another in one process; the results are put back in the jobs' order."""

from __future__ import annotations

from typing import Any

from ._settings import Settings
from ._train import BUILTIN_ROWS, Job, Outcome, job


def _one_thread() -> None:
    """A worker's start: torch on one thread (``OMP_NUM_THREADS=1`` is inherited too)."""
    import torch

    torch.set_num_threads(1)


def side_by_side(jobs: list[Job], settings: Settings, processes: int, bar: Any) -> list[Outcome]:
    """Each job's accuracies (or a plugin's exception), ``processes`` at a time; the progress
    names each model as it ends. A built-in's failure cancels the rest and is raised."""
    import concurrent.futures
    import multiprocessing

    from ..bench._threads import threads

    results: list[Outcome | None] = [None] * len(jobs)
    context = multiprocessing.get_context("spawn")
    with threads(1, torch=True, jax=False, interop=False), \
            concurrent.futures.ProcessPoolExecutor(min(processes, len(jobs)), mp_context=context,
                                                   initializer=_one_thread) as pool:
        futures = {pool.submit(job, label, enc, task, seed, settings): i
                   for i, (label, enc, task, seed) in enumerate(jobs)}
        for done in concurrent.futures.as_completed(futures):
            i = futures[done]
            label, _, task, seed = jobs[i]
            try:
                results[i] = done.result()
            except Exception as exc:  # a plugin's encoder that does not fit a causal model
                if label in ("nope", *BUILTIN_ROWS):
                    pool.shutdown(cancel_futures=True)
                    raise
                results[i] = exc
            bar.step(f"{label} {task} seed {seed}")
            bar.step()
    return [r for r in results if r is not None]
