"""The extrapolation study: one tiny model per (encoder, task, seed), trained at length ``L`` and
scored at ``L, 2L, 4L, 8L``; RoPE's inference-time scalings evaluated on the RoPE-trained
weights; everything seeded (the same call gives the same numbers)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from ._tasks import TASKS, VOCAB, batch, length_of

#: The built-in encoders the default run trains (a failure of theirs is an error, not a skip).
BUILTIN_ROWS = ("sinusoidal", "learned", "rotary", "xpos", "fope", "alibi", "t5", "kerple",
                "fire", "shaw", "transformer-xl")
#: Built-ins left out of the default set, with the reason.
EXCLUDED = {"mrope": "on text (every axis at the token's position) it is rotary",
            "learned-2d": "positions on a 2-D grid, not a causal sequence",
            "dual-chunk": "an inference-time attention scheme for a RoPE model past its "
                          "context (queries in three roles), not an encoding to train with"}
#: RoPE's inference-time scalings, evaluated on the RoPE-trained model: linear position
#: interpolation (Chen et al. 2023) and YaRN (Peng et al. 2023) with factor = eval length / train
#: length; dynamic NTK (bloc97, transformers' "dynamic") with factor 1, its base growing with
#: the sequence as (length / train length)^(d/(d-2)).
SCALINGS = ("linear", "dynamic", "yarn")


@dataclass(frozen=True)
class Settings:
    """What a study trains: the length ``L`` (evaluated at ``L, 2L, 4L, 8L``), the training
    steps per model, the seeds and tasks (a model per encoder, task and seed), the batch sizes
    of training and evaluation, AdamW's learning rate and whether training positions are
    randomized. Every field is checked when the settings are made (a ``ValueError`` naming the
    field, the value and what is allowed); a list of seeds or tasks is kept as a tuple."""

    train_length: int = 16
    steps: int = 300
    seeds: tuple[int, ...] = (0, 1)
    tasks: tuple[str, ...] = TASKS
    batch: int = 32
    eval_batch: int = 64
    lr: float = 3e-3
    randomized: bool = False

    def __post_init__(self) -> None:
        """Check every field (a ``ValueError`` naming the first bad one)."""
        for name in ("train_length", "steps", "batch", "eval_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise _invalid(name, value, "a positive integer")
        self._items("seeds", "integers >= 0",
                    lambda v: not isinstance(v, bool) and isinstance(v, int) and v >= 0)
        self._items("tasks", f"task names out of {', '.join(TASKS)}", lambda v: v in TASKS)
        lr = self.lr
        if (isinstance(lr, bool) or not isinstance(lr, int | float) or not math.isfinite(lr)
                or lr <= 0):
            raise _invalid("lr", lr, "a finite number > 0")
        if not isinstance(self.randomized, bool):
            raise _invalid("randomized", self.randomized, "True or False")

    def _items(self, name: str, allowed: str, ok: Callable[[Any], bool]) -> None:
        """Field ``name`` is a non-empty tuple (or list, kept as a tuple) of distinct values
        ``ok`` accepts."""
        value = getattr(self, name)
        what = f"a non-empty tuple of distinct {allowed}"
        if not isinstance(value, tuple | list) or not value:
            raise _invalid(name, value, what)
        bad = [v for v in value if not ok(v)]
        if bad or len(set(value)) != len(value):
            extra = f" ({bad[0]!r} is not allowed)" if bad else " (one is repeated)"
            raise _invalid(name, value, what, extra)
        object.__setattr__(self, name, tuple(value))

    @property
    def lengths(self) -> tuple[int, ...]:
        """The evaluated lengths ``L, 2L, 4L, 8L``."""
        return tuple(self.train_length * m for m in (1, 2, 4, 8))


def _invalid(name: str, value: Any, allowed: str, extra: str = "") -> ValueError:
    """The error of field ``name``: its value and what is allowed."""
    return ValueError(f"Settings: {name} must be {allowed}, got {value!r}{extra}")


QUICK = Settings(train_length=8, steps=60, seeds=(0,), eval_batch=32)


@dataclass
class Row:
    """One encoder (or scaling) on one task: accuracy per evaluated length, one per seed."""

    encoder: str
    task: str
    accuracy: dict[int, list[float]] = field(default_factory=dict)

    def mean(self, n: int) -> float:
        """Mean accuracy over the seeds at length ``n``."""
        return statistics.fmean(self.accuracy[n])

    def spread(self, n: int) -> float:
        """Population standard deviation over the seeds at length ``n`` (0 for one seed)."""
        values = self.accuracy[n]
        return statistics.pstdev(values) if len(values) > 1 else 0.0


@dataclass
class ExtrapolationResult:
    """What :func:`run` returns: its settings, one :class:`Row` per encoder (or scaling) and
    task, and the encoders skipped with the reason."""

    settings: Settings
    rows: list[Row]
    skipped: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (``--format json``): the settings, each row's accuracies per
        length with their mean and spread, and the skipped encoders."""
        s = self.settings
        return {"train_length": s.train_length, "lengths": list(s.lengths), "tasks": list(s.tasks),
                "seeds": list(s.seeds), "steps": s.steps, "randomized": s.randomized,
                "batch": s.batch, "eval_batch": s.eval_batch, "lr": s.lr,
                "skipped": self.skipped,
                "rows": [{"encoder": r.encoder, "task": r.task,
                          "accuracy": {str(n): r.accuracy[n] for n in s.lengths},
                          "mean": {str(n): r.mean(n) for n in s.lengths},
                          "spread": {str(n): r.spread(n) for n in s.lengths}}
                         for r in self.rows]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExtrapolationResult:
        """The result :meth:`as_dict` wrote (e.g. read back from ``--format json``)."""
        defaults = Settings()
        settings = Settings(train_length=data["train_length"], steps=data["steps"],
                            seeds=tuple(data["seeds"]), tasks=tuple(data["tasks"]),
                            randomized=data["randomized"],
                            batch=data.get("batch", defaults.batch),
                            eval_batch=data.get("eval_batch", defaults.eval_batch),
                            lr=data.get("lr", defaults.lr))
        rows = [Row(r["encoder"], r["task"], {int(n): list(v) for n, v in r["accuracy"].items()})
                for r in data["rows"]]
        return cls(settings, rows, dict(data["skipped"]))

    def table(self) -> str:
        """A text table per task: one line per encoder, ``mean ±spread`` at each length."""
        s = self.settings
        lines = []
        for task in s.tasks:
            rows = [r for r in self.rows if r.task == task]
            lines.append(f"task {task} (trained at length {s.train_length}; accuracy, mean ± "
                         f"spread over {len(s.seeds)} seed{'s' * (len(s.seeds) > 1)})")
            width = max(len(r.encoder) for r in rows)
            lines.append(f"{'encoder':<{width}}  " + "  ".join(f"{n:>11}" for n in s.lengths))
            for r in rows:
                lines.append(f"{r.encoder:<{width}}  " + "  ".join(
                    f"{r.mean(n):>5.3f} ±{r.spread(n):>4.2f}"[:11].rjust(11) for n in s.lengths))
            lines.append("")
        for name, why in self.skipped.items():
            lines.append(f"skipped {name}: {why}")
        return "\n".join(lines).rstrip() + "\n"


def _fit_options(cls: Any, settings: Settings) -> dict[str, Any]:
    """Options for ``cls`` in the tiny model: its examples, with the model's sizes for the
    options that name them (a plugin's too)."""
    from ._model import HEAD_DIM, HEADS, WIDTH

    specs = cls._option_specs
    options = dict(cls.example_options())
    sizes = {"dim": WIDTH if cls.kind == "absolute" else HEAD_DIM, "num_heads": HEADS,
             "num_positions": length_of("copy", max(settings.lengths)) + 1,
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


def _positions(t: int, settings: Settings, generator: Any, train: bool) -> Any:
    """Positions of a length-``t`` sequence: ``arange(t)``, or while training with
    ``randomized``, ``t`` sorted distinct positions drawn below the longest evaluated length
    (randomized positional encodings, Ruoss et al. 2023)."""
    import torch

    if train and settings.randomized:  # Ruoss et al. 2023: sorted random positions
        top = length_of("copy", max(settings.lengths))
        return torch.sort(torch.randperm(top, generator=generator)[:t]).values
    return torch.arange(t)


def _train(model: Any, task: str, settings: Settings, seed: int) -> None:
    """``settings.steps`` AdamW steps on batches of ``task`` at the training length, with the
    cross-entropy of the scored tokens; seeded by ``seed``."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.0)
    for _ in range(settings.steps):
        inputs, targets, scored = batch(task, settings.train_length, settings.batch, gen)
        logits = model(inputs, _positions(inputs.shape[1], settings, gen, train=True))
        loss = torch.nn.functional.cross_entropy(logits[scored], targets[scored])
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call,unused-ignore]
        opt.step()


def _accuracy(model: Any, task: str, n: int, settings: Settings, seed: int) -> float:
    """The fraction of scored tokens predicted exactly (greedy) on a batch of ``task`` at
    length ``n``, positions ``arange``; drawn with a seed apart from training's."""
    import torch

    gen = torch.Generator().manual_seed(10_000 + seed)
    inputs, targets, scored = batch(task, n, settings.eval_batch, gen)
    with torch.no_grad():
        logits = model(inputs, torch.arange(inputs.shape[1]))
    return float((logits.argmax(-1) == targets)[scored].float().mean())


def _scaled(kind: str, factor: float, train_tokens: int) -> Any:
    """The rotary encoder of the model's head size with scaling ``kind`` for ``factor`` =
    evaluated / trained length (plain RoPE at ``factor <= 1``); ``dynamic`` takes factor 1,
    its base growing with the sequence past ``train_tokens`` (see :data:`SCALINGS`)."""
    from ..registry import default_registry
    from ._model import HEAD_DIM

    if factor <= 1:
        return default_registry.get_encoder("rotary", dim=HEAD_DIM)
    scaling: dict[str, Any] = {"type": kind, "factor": 1.0 if kind == "dynamic" else factor}
    if kind in ("dynamic", "yarn"):
        scaling["original_max_position_embeddings"] = train_tokens
    return default_registry.get_encoder("rotary", dim=HEAD_DIM, scaling=scaling)


def run(names: Sequence[str] | None = None, *, settings: Settings = Settings(),
        progress: TextIO | None = None, redraw: bool | None = None,
        threads: int | None = 1) -> ExtrapolationResult:
    """Train and score every chosen encoder on every task and seed (see the package doc), on
    ``threads`` torch threads (None: as they are), with a :class:`~peregistry.bench.Progress` on
    ``progress``."""
    import contextlib

    from ..bench import Progress
    from ..bench._threads import threads as set_threads

    chosen, skipped = encoders(names, settings)
    rows: dict[tuple[str, str], Row] = {}
    bar = Progress(len(chosen) * len(settings.tasks) * len(settings.seeds), progress,
                   redraw=redraw)
    with contextlib.ExitStack() as stack:
        if threads is not None:
            stack.enter_context(set_threads(threads, torch=True, jax=False, interop=False))
        for label, enc in chosen:
            _encoder_rows(label, enc, settings, rows, skipped, bar)
    bar.close()
    return ExtrapolationResult(settings, list(rows.values()), skipped)


def _encoder_rows(label: str, enc: Any, settings: Settings, rows: dict[tuple[str, str], Row],
                  skipped: dict[str, str], bar: Any) -> None:
    """The rows of one encoder on every task and seed (a plugin's that fails is skipped)."""
    try:
        for task in settings.tasks:
            for seed in settings.seeds:
                bar.step(f"{label} {task} seed {seed}")
                _one(label, enc, task, seed, settings, rows)
                bar.step()
    except Exception as exc:  # a plugin's encoder that does not fit a 1-D causal model
        if label in ("nope", *BUILTIN_ROWS):
            raise
        skipped[label] = f"failed in the model: {type(exc).__name__}: {exc}"
        for key in [key for key, row in rows.items() if row.encoder == label]:
            del rows[key]


def _one(label: str, enc: Any, task: str, seed: int, settings: Settings,
         rows: dict[tuple[str, str], Row]) -> None:
    """Train one model and record its accuracy at every length (and RoPE's scalings)."""
    import torch

    from ._model import TinyDecoder

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = TinyDecoder(VOCAB, enc, seed)
        _train(model, task, settings, seed)
    model.eval()
    row = rows.setdefault((label, task), Row(label, task))
    for n in settings.lengths:
        row.accuracy.setdefault(n, []).append(_accuracy(model, task, n, settings, seed))
    if label == "rotary":
        _scalings(model, task, settings, seed, rows)


def _scalings(model: Any, task: str, settings: Settings, seed: int,
              rows: dict[tuple[str, str], Row]) -> None:
    """The RoPE-trained model scored with each scaling in place of plain RoPE."""
    trained = model.position.encoder
    train_tokens = length_of(task, settings.train_length)
    for kind in SCALINGS:
        row = rows.setdefault((f"rotary+{kind}", task), Row(f"rotary+{kind}", task))
        for n in settings.lengths:
            model.position.encoder = _scaled(kind, length_of(task, n) / train_tokens,
                                             train_tokens)
            row.accuracy.setdefault(n, []).append(_accuracy(model, task, n, settings, seed))
    model.position.encoder = trained
