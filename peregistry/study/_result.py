"""What an extrapolation study returns: one :class:`Row` per encoder (or RoPE scaling) and task,
with each cell a mean over seeds and its 95% t-interval, the rows that did not learn their task
at the training length, and the ranking at ``2L`` with overlapping intervals marked as ties;
as a text table or plain JSON data (read back by :meth:`ExtrapolationResult.from_dict`)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from ._settings import LEARNED, Settings
from ._stats import half_width, ranking


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

    def interval(self, n: int) -> float | None:
        """Half-width of the 95% t-interval of the mean at length ``n`` (None for one seed)."""
        return half_width(self.accuracy[n])

    def learned(self, train_length: int) -> bool:
        """Whether the mean accuracy at the training length reaches :data:`LEARNED`."""
        return self.mean(train_length) >= LEARNED


@dataclass
class ExtrapolationResult:
    """What :func:`~peregistry.study.extrapolation` returns: its settings, one :class:`Row`
    per encoder (or scaling) and task, and the encoders skipped with the reason."""

    settings: Settings
    rows: list[Row]
    skipped: dict[str, str]

    def ranking(self, task: str) -> list[tuple[Row, list[str]]]:
        """The rows of ``task`` that learned it, best first by mean accuracy at ``2L``, each
        with the encoders whose 95% intervals overlap its own (ties, not an order)."""
        n = 2 * self.settings.train_length
        rows = {r.encoder: r for r in self.rows
                if r.task == task and r.learned(self.settings.train_length)}
        order = ranking({name: (r.mean(n), r.interval(n)) for name, r in rows.items()})
        return [(rows[name], ties) for name, ties in order]

    def did_not_learn(self, task: str) -> list[str]:
        """The encoders under :data:`LEARNED` accuracy on ``task`` at the training length."""
        return [r.encoder for r in self.rows
                if r.task == task and not r.learned(self.settings.train_length)]

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (``--format json``): the settings, each row's accuracies per
        length (one per seed) with their mean, spread and 95% half-width (null for one seed) and
        whether it learned the task, each task's ranking at 2L and the skipped encoders."""
        s = self.settings
        two = 2 * s.train_length
        return {"train_length": s.train_length, "lengths": list(s.lengths), "tasks": list(s.tasks),
                "seeds": list(s.seeds), "steps": s.steps, "randomized": s.randomized,
                "batch": s.batch, "eval_batch": s.eval_batch, "lr": s.lr, "width": s.width,
                "layers": s.layers, "min_length": s.min_length, "learned_at": LEARNED, "skipped": self.skipped,
                "rows": [{"encoder": r.encoder, "task": r.task,
                          "learned": r.learned(s.train_length),
                          "accuracy": {str(n): r.accuracy[n] for n in s.lengths},
                          "mean": {str(n): r.mean(n) for n in s.lengths},
                          "interval": {str(n): r.interval(n) for n in s.lengths},
                          "spread": {str(n): r.spread(n) for n in s.lengths}}
                         for r in self.rows],
                "ranking": {task: [{"encoder": r.encoder, "mean": r.mean(two),
                                    "interval": r.interval(two), "ties": ties}
                                   for r, ties in self.ranking(task)]
                            for task in s.tasks},
                "did_not_learn": {task: self.did_not_learn(task) for task in s.tasks}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExtrapolationResult:
        """The result :meth:`as_dict` wrote (e.g. read back from ``--format json``); a record
        written before a field existed gets the value the study had then."""
        settings = Settings(train_length=data["train_length"], steps=data["steps"],
                            seeds=tuple(data["seeds"]), tasks=tuple(data["tasks"]),
                            randomized=data["randomized"], batch=data.get("batch", 32),
                            eval_batch=data.get("eval_batch", 64), lr=data.get("lr", 3e-3),
                            width=data.get("width", 64), layers=data.get("layers", 2),
                            min_length=data.get("min_length"))
        rows = [Row(r["encoder"], r["task"], {int(n): list(v) for n, v in r["accuracy"].items()})
                for r in data["rows"]]
        return cls(settings, rows, dict(data["skipped"]))

    def table(self) -> str:
        """A text table per task (one line per encoder, ``mean ±half-width`` of the 95%
        interval at each length), its ranking at 2L and the rows that did not learn it."""
        lines = []
        for task in self.settings.tasks:
            lines += self._task_table(task)
        for name, why in self.skipped.items():
            lines.append(f"skipped {name}: {why}")
        return "\n".join(lines).rstrip() + "\n"

    def _task_table(self, task: str) -> list[str]:
        """The lines of one task: its table, its ranking, what did not learn, a blank line."""
        s = self.settings
        seeds = len(s.seeds)
        rows = [r for r in self.rows if r.task == task]
        what = f"mean ±95% interval over {seeds} seeds" if seeds > 1 else "one seed"
        trained = (f"at length {s.train_length}" if s.shortest == s.train_length
                   else f"at lengths {s.shortest}..{s.train_length}")
        lines = [f"task {task} (trained {trained}; accuracy, {what})"]
        width = max(len(r.encoder) for r in rows)
        lines.append(f"{'encoder':<{width}}  " + "  ".join(f"{n:>11}" for n in s.lengths))
        for r in rows:
            cells = "  ".join(_cell(r.mean(n), r.interval(n)) for n in s.lengths)
            mark = "" if r.learned(s.train_length) else "  did not learn"
            lines.append(f"{r.encoder:<{width}}  {cells}{mark}")
        lines.append(f"ranking at {2 * s.train_length} (2L) of the rows that learned {task} "
                     f"(>= {LEARNED} at {s.train_length}); '=': 95% intervals overlap, a tie")
        ranked = self.ranking(task)
        if not ranked:
            lines.append("  (none)")
        for place, (r, ties) in enumerate(ranked, 1):
            tied = f"  = {', '.join(ties)}" if ties else ""
            lines.append(f"{place:>3}. {r.encoder:<{width}}  "
                         f"{_cell(r.mean(2 * s.train_length), r.interval(2 * s.train_length))}"
                         f"{tied}")
        failed = self.did_not_learn(task)
        if failed:
            lines.append(f"did not learn {task} (< {LEARNED} at {s.train_length}), so not "
                         f"ranked: {', '.join(failed)}")
        return [*lines, ""]


def _cell(mean: float, half: float | None) -> str:
    """``"0.912 ±0.03"`` (11 characters), or the mean alone for one seed."""
    return f"{mean:5.3f} ±{half:4.2f}"[:11] if half is not None else f"{mean:5.3f}".ljust(11)
