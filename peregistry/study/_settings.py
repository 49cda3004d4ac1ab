"""What an extrapolation study trains, checked when it is made: :class:`Settings` (the
protocol of Kazemnejad et al. 2023 by default: lengths up to ``L = 20``, evaluated at ``2L``
with ``4L`` and ``8L`` as extra columns, copy, reverse and addition, three seeds) and
:data:`QUICK`, a smaller run that shows the shape in about a minute."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._tasks import DEFAULT_TASKS, TASKS, length_of

#: The model's attention heads (its width is a setting; each head is ``width / HEADS`` wide).
HEADS = 4

#: The accuracy at the training length below which a row "did not learn" its task: it is
#: reported as such and left out of that task's ranking, never read as a failure to extrapolate.
LEARNED = 0.9


@dataclass(frozen=True)
class Settings:
    """What a study trains: models see lengths ``min_length..train_length`` (one length per
    step, drawn uniformly; ``min_length`` None: ``train_length`` alone) and are evaluated at
    ``L, 2L, 4L, 8L``; ``steps`` AdamW steps per model at peak
    learning rate ``lr`` (linear warm-up over the first tenth, cosine decay to zero); the seeds
    and tasks (a model per encoder, task and seed); the batch sizes of training and evaluation;
    the model's ``width`` (4 heads) and ``layers``; whether training positions are randomized.
    Every field is checked when the settings are made (a ``ValueError`` naming the field, the
    value and what is allowed); a list of seeds or tasks is kept as a tuple."""

    train_length: int = 20
    steps: int = 600
    seeds: tuple[int, ...] = (0, 1, 2)
    tasks: tuple[str, ...] = DEFAULT_TASKS
    batch: int = 32
    eval_batch: int = 32
    lr: float = 3e-3
    randomized: bool = False
    width: int = 64
    layers: int = 2
    min_length: int | None = 1

    def __post_init__(self) -> None:
        """Check every field (a ``ValueError`` naming the first bad one)."""
        for name in ("train_length", "steps", "batch", "eval_batch", "layers"):
            value = getattr(self, name)
            if not _positive_int(value):
                raise _invalid(name, value, "a positive integer")
        low = self.min_length
        if low is not None and (not _positive_int(low) or low > self.train_length):
            raise _invalid("min_length", low, f"None or an integer in 1..train_length "
                                              f"({self.train_length})")
        if not _positive_int(self.width) or self.width % (2 * HEADS):
            raise _invalid("width", self.width, f"a positive multiple of {2 * HEADS} ({HEADS} "
                                                "heads of an even width)")
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

    @property
    def shortest(self) -> int:
        """The shortest training length (``min_length``, else ``train_length``)."""
        return self.min_length if self.min_length is not None else self.train_length

    @property
    def longest(self) -> int:
        """The most tokens a model sees: the longest task's sequence at ``8L``."""
        return max(length_of(t, max(self.lengths)) for t in self.tasks)


def _positive_int(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= 1


def _invalid(name: str, value: Any, allowed: str, extra: str = "") -> ValueError:
    """The error of field ``name``: its value and what is allowed."""
    return ValueError(f"Settings: {name} must be {allowed}, got {value!r}{extra}")


QUICK = Settings(train_length=8, steps=80, seeds=(0,))
