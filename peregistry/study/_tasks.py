"""Synthetic tasks whose answers need positions, as batches of token ids with the positions the
loss and the accuracy read (teacher forcing: the model predicts token ``t + 1`` from ``:t + 1``).

* ``copy``: ``x_1 .. x_n SEP x_1 .. x_n``; scored on the second copy.
* ``reverse``: ``x_1 .. x_n SEP x_n .. x_1``; scored on the reversed copy.
* ``offset``: ``OFF_k x_1 .. x_n``: every token from the ``k``-th on is followed by the token
  ``k`` places before it (``k`` in 1..4, given by the first token); scored on those.

``n`` is the task's length: models train at ``n = L`` and are evaluated at ``L, 2L, 4L, 8L``.
Content tokens are ``0 .. CONTENT - 1``; ``SEP`` and the offset markers follow.
"""

from __future__ import annotations

from typing import Any

TASKS = ("copy", "reverse", "offset")
CONTENT = 16
SEP = CONTENT
OFFSETS = (1, 2, 3, 4)
VOCAB = CONTENT + 1 + len(OFFSETS)


def batch(task: str, n: int, size: int, generator: Any) -> tuple[Any, Any, Any]:
    """``(inputs, targets, scored)``: ``(size, T)`` token ids, the token the model must give at
    each position, and a bool mask of the positions that count (``T`` is ``2n`` for copy and
    reverse, ``n + 1`` for offset)."""
    import torch

    x = torch.randint(0, CONTENT, (size, n), generator=generator)
    if task in ("copy", "reverse"):
        answer = x if task == "copy" else torch.flip(x, dims=(1,))
        seq = torch.cat([x, torch.full((size, 1), SEP), answer], dim=1)
        scored = torch.zeros(size, 2 * n, dtype=torch.bool)
        scored[:, n:] = True  # SEP, y_1 .. y_{n-1} are followed by y_1 .. y_n
        return seq[:, :-1], seq[:, 1:], scored
    if task == "offset":
        k = torch.tensor(OFFSETS)[torch.randint(0, len(OFFSETS), (size,), generator=generator)]
        inputs = torch.cat([(SEP + k)[:, None], x], dim=1)  # position i >= 1 holds x_i
        i = torch.arange(n + 1)
        back = i[None, :] - k[:, None]  # the position k places before
        targets = torch.gather(inputs, 1, back.clamp(min=0))
        return inputs, targets, back >= 1
    raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")


def length_of(task: str, n: int) -> int:
    """The number of tokens a model sees for the task's length ``n``."""
    return 2 * n if task in ("copy", "reverse") else n + 1
