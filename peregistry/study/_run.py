"""The extrapolation study's run: the encoders chosen and built for the tiny model, one job per
(encoder, task, seed) (:mod:`._train`), run one after another in this process or side by side
in processes (:mod:`._pool`), and the rows put together in the jobs' order, so the same
settings give the same result whichever way they ran."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

from ._result import ExtrapolationResult, Row
from ._settings import HEADS, Settings
from ._tasks import length_of
from ._train import BUILTIN_ROWS, Job, Outcome, job

#: Built-ins left out of the default set, with the reason.
EXCLUDED = {"mrope": "on text (every axis at the token's position) it is rotary",
            "learned-2d": "positions on a 2-D grid, not a causal sequence",
            "dual-chunk": "an inference-time attention scheme for a RoPE model past its "
                          "context (queries in three roles), not an encoding to train with"}
def _fit_options(cls: Any, settings: Settings) -> dict[str, Any]:
    """Options for ``cls`` in the tiny model: its examples, with the model's sizes for the
    options that name them (a plugin's too)."""
    specs = cls._option_specs
    options = dict(cls.example_options())
    sizes = {"dim": settings.width if cls.kind == "absolute" else settings.width // HEADS,
             "num_heads": HEADS, "num_positions": settings.longest + 1,
             "bidirectional": False,
             # FoPE's training length: its slowest frequencies are clipped by it
             "max_position_embeddings": max(length_of(t, settings.train_length)
                                            for t in settings.tasks)}
    options.update({k: v for k, v in sizes.items() if k in specs})
    if "max_distance" in specs and specs["max_distance"].required:  # Shaw's clipping k
        options["max_distance"] = settings.train_length
    return options


def encoders(names: Sequence[str] | None, settings: Settings) -> tuple[list[tuple[str, Any]],
                                                                        dict[str, str]]:
    """``[(label, encoder or None for NoPE)]`` and the skipped names with reasons."""
    from ..registry import default_registry

    skipped: dict[str, str] = {}
    if names is None:
        infos = [i for i in default_registry.list_encoders() if i.name not in EXCLUDED]
        chosen = ["nope", *(str(i.name) for i in infos)]
        skipped.update(EXCLUDED)
    else:
        chosen = list(dict.fromkeys(names))
    out: list[tuple[str, Any]] = []
    for name in chosen:
        if name == "nope":
            out.append(("nope", None))
            continue
        cls = default_registry.encoder_class(name)  # unknown: EncoderNotFoundError
        if cls.kind not in ("absolute", "rotary", "bias", "relative-embedding"):
            skipped[name] = f"kind {cls.kind!r} has no place in the model"
            continue
        try:
            out.append((name, default_registry.get_encoder(name, **_fit_options(cls, settings))))
        except (TypeError, ValueError) as exc:
            skipped[name] = f"cannot be built for the model: {exc}"
    return out, skipped


def run(names: Sequence[str] | None = None, *, settings: Settings | None = None,
        progress: TextIO | None = None, redraw: bool | None = None,
        threads: int | None = 1) -> ExtrapolationResult:
    """Train and score every chosen encoder on every task and seed (see the package doc):
    ``threads`` models side by side, each in a process of its own on one thread (1: one after
    another in this process on one thread; None: in this process on torch's threads as they
    are), with a :class:`~peregistry.bench.Progress` on ``progress``. ``settings``: default
    :class:`Settings`."""
    import contextlib

    from ..bench import Progress
    from ..bench._threads import threads as set_threads

    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
    settings = settings if settings is not None else Settings()
    chosen, skipped = encoders(names, settings)
    jobs = [(label, enc, task, seed) for label, enc in chosen for task in settings.tasks
            for seed in settings.seeds]
    bar = Progress(len(jobs), progress, redraw=redraw)
    if threads is not None and threads > 1 and len(jobs) > 1:
        from ._pool import side_by_side

        results = side_by_side(jobs, settings, threads, bar)
    else:
        with contextlib.ExitStack() as stack:
            if threads is not None:
                stack.enter_context(set_threads(threads, torch=True, jax=False, interop=False))
            results = _one_after_another(jobs, settings, bar)
    bar.close()
    return ExtrapolationResult(settings, _rows(jobs, results, skipped), skipped)


def _one_after_another(jobs: list[Job], settings: Settings, bar: Any) -> list[Outcome]:
    """Each job's accuracies (or a plugin's exception), in this process; a plugin's encoder
    that failed once is not trained again."""
    results: list[Outcome] = []
    failed: dict[str, BaseException] = {}
    for label, enc, task, seed in jobs:
        bar.step(f"{label} {task} seed {seed}")
        if label in failed:
            results.append(failed[label])
        else:
            try:
                results.append(job(label, enc, task, seed, settings))
            except Exception as exc:  # a plugin's encoder that does not fit a causal model
                if label in ("nope", *BUILTIN_ROWS):
                    raise
                failed[label] = exc
                results.append(exc)
        bar.step()
    return results


def _rows(jobs: list[Job], results: list[Outcome], skipped: dict[str, str]) -> list[Row]:
    """The rows, in the jobs' order (each encoder's, then its scalings', task by task): the
    same whatever order the jobs ended in. An encoder with a failed job is skipped."""
    rows: dict[tuple[str, str], Row] = {}
    failed: dict[str, BaseException] = {}
    for (label, _, task, _), result in zip(jobs, results, strict=True):
        if isinstance(result, BaseException):
            failed.setdefault(label, result)
            continue
        for name, accuracies in result.items():
            row = rows.setdefault((name, task), Row(name, task))
            for n, value in accuracies:
                row.accuracy.setdefault(n, []).append(value)
    for label, exc in failed.items():
        skipped[label] = f"failed in the model: {type(exc).__name__}: {exc}"
    return [row for (name, _), row in rows.items()
            if name.split("+")[0] not in failed and name not in failed]


