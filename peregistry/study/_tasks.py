"""Synthetic tasks whose answers need positions, as batches of token ids with the positions the
loss and the accuracy read (teacher forcing: the model predicts token ``t + 1`` from ``:t + 1``).

* ``copy``: ``x_1 .. x_n SEP x_1 .. x_n``; scored on the second copy.
* ``reverse``: ``x_1 .. x_n SEP x_n .. x_1``; scored on the reversed copy.
* ``addition``: ``a_1 .. a_n PLUS b_1 .. b_n SEP c_1 .. c_{n+1}``, ``c = a + b`` with every
  number's digits written least significant first (Zhou et al. 2024, "Transformers can achieve
  length generalization but not robustly", section 3: the reversed format, so that each digit
  of ``c`` depends on the digits at its own place and the carry); scored on ``c``.
* ``offset``: ``OFF_k x_1 .. x_n``: every token from the ``k``-th on is followed by the token
  ``k`` places before it (``k`` in 1..4, given by the first token); scored on those.

``n`` is the task's length (digits per operand for addition): models train at ``n <= L`` and
are evaluated at ``L, 2L, 4L, 8L``. Content tokens are ``0 .. CONTENT - 1`` (digits are
``0 .. 9``); ``SEP``, the offset markers and ``PLUS`` follow.
"""

from __future__ import annotations

from typing import Any

TASKS = ("copy", "reverse", "addition", "offset")
#: The tasks of Kazemnejad et al. 2023's setup that a default study trains.
DEFAULT_TASKS = ("copy", "reverse", "addition")
CONTENT = 16
SEP = CONTENT
OFFSETS = (1, 2, 3, 4)
PLUS = SEP + 1 + len(OFFSETS)
VOCAB = PLUS + 1


def batch(task: str, n: int, size: int, generator: Any) -> tuple[Any, Any, Any]:
    """``(inputs, targets, scored)``: ``(size, T)`` token ids, the token the model must give at
    each position, and a bool mask of the positions that count (``T`` is :func:`length_of`)."""
    import torch

    if task == "addition":
        return _addition(n, size, generator)
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


def _addition(n: int, size: int, generator: Any) -> tuple[Any, Any, Any]:
    """Two ``n``-digit numbers (leading zeros allowed) and their ``n + 1``-digit sum, every
    number least significant digit first; the sum is written by long addition, digit by digit
    with its carry, so any ``n`` works (no integer overflow)."""
    import torch

    a = torch.randint(0, 10, (size, n), generator=generator)
    b = torch.randint(0, 10, (size, n), generator=generator)
    digits, carry = [], torch.zeros(size, dtype=torch.long)
    for i in range(n):  # least significant first: place i is column i
        total = a[:, i] + b[:, i] + carry
        digits.append(total % 10)
        carry = total // 10
    c = torch.stack([*digits, carry], dim=1)
    seq = torch.cat([a, torch.full((size, 1), PLUS), b, torch.full((size, 1), SEP), c], dim=1)
    scored = torch.zeros(size, 3 * n + 2, dtype=torch.bool)
    scored[:, 2 * n + 1:] = True  # SEP, c_1 .. c_n are followed by c_1 .. c_{n+1}
    return seq[:, :-1], seq[:, 1:], scored


def length_of(task: str, n: int) -> int:
    """The number of tokens a model sees for the task's length ``n``."""
    if task == "addition":
        return 3 * n + 2
    return 2 * n if task in ("copy", "reverse") else n + 1
