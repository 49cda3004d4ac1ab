"""One job of the extrapolation study: a tiny model trained on one task with one seed at lengths
up to ``L`` (a warm-up and cosine learning-rate schedule) and scored at ``L, 2L, 4L, 8L``, with
RoPE's inference-time scalings on the RoPE-trained weights. Seeded and meant for one thread, so
its numbers are the same bits in this process or in another."""

from __future__ import annotations

import math
from typing import Any

from ._settings import Settings
from ._tasks import VOCAB, batch, length_of

#: The built-in encoders the default run trains (a failure of theirs is an error, not a skip).
BUILTIN_ROWS = ("sinusoidal", "learned", "rotary", "xpos", "fope", "alibi", "t5", "kerple",
                "fire", "shaw", "transformer-xl")
#: RoPE's inference-time scalings, evaluated on the RoPE-trained model: linear position
#: interpolation (Chen et al. 2023) and YaRN (Peng et al. 2023) with factor = eval length / train
#: length; dynamic NTK (bloc97, transformers' "dynamic") with factor 1, its base growing with
#: the sequence as (length / train length)^(d/(d-2)).
SCALINGS = ("linear", "dynamic", "yarn")


#: One model to train: its row's label, its encoder (None: NoPE), the task and the seed.
Job = tuple[str, Any, str, int]


#: What a job gives: ``{row label: [(length, accuracy)]}``, or the exception it raised.
Outcome = dict[str, list[tuple[int, float]]] | BaseException


def _positions(t: int, settings: Settings, generator: Any, train: bool) -> Any:
    """Positions of a length-``t`` sequence: ``arange(t)``, or while training with
    ``randomized``, ``t`` sorted distinct positions drawn below the longest evaluated sequence
    (randomized positional encodings, Ruoss et al. 2023)."""
    import torch

    if train and settings.randomized:  # Ruoss et al. 2023: sorted random positions
        return torch.sort(torch.randperm(settings.longest, generator=generator)[:t]).values
    return torch.arange(t)


def schedule(step: int, steps: int) -> float:
    """The learning rate's factor at ``step`` of ``steps``: a linear warm-up over the first
    tenth (at least one step), then a cosine decay to zero (Loshchilov and Hutter 2017, SGDR,
    eq. 5, one cycle without restart)."""
    warm = max(1, steps // 10)
    if step < warm:
        return (step + 1) / warm
    return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))


def _train(model: Any, task: str, settings: Settings, seed: int) -> None:
    """``settings.steps`` AdamW steps, each on a batch of ``task`` at a length drawn uniformly
    from ``min_length..L`` (Kazemnejad et al. 2023 train on lengths up to 20; ``L`` alone
    by default), with the cross-entropy of the scored tokens and the learning rate of
    :func:`schedule`; seeded by ``seed``."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.0)
    for step in range(settings.steps):
        for group in opt.param_groups:
            group["lr"] = settings.lr * schedule(step, settings.steps)
        low = settings.shortest
        n = low + int(torch.randint(settings.train_length - low + 1, (1,), generator=gen))
        inputs, targets, scored = batch(task, n, settings.batch, gen)
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


def _scaled(kind: str, factor: float, train_tokens: int, head_dim: int) -> Any:
    """The rotary encoder of the model's head size with scaling ``kind`` for ``factor`` =
    evaluated / trained length (plain RoPE at ``factor <= 1``); ``dynamic`` takes factor 1,
    its base growing with the sequence past ``train_tokens`` (see :data:`SCALINGS`)."""
    from ..registry import default_registry

    if factor <= 1:
        return default_registry.get_encoder("rotary", dim=head_dim)
    scaling: dict[str, Any] = {"type": kind, "factor": 1.0 if kind == "dynamic" else factor}
    if kind in ("dynamic", "yarn"):
        scaling["original_max_position_embeddings"] = train_tokens
    return default_registry.get_encoder("rotary", dim=head_dim, scaling=scaling)


def job(label: str, enc: Any, task: str, seed: int,
        settings: Settings) -> dict[str, list[tuple[int, float]]]:
    """Train one model and return ``{row label: [(length, accuracy)]}`` for it (and, for
    ``rotary``, for each of RoPE's scalings on the same weights)."""
    import torch

    from ._model import TinyDecoder

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = TinyDecoder(VOCAB, enc, seed, width=settings.width, layers=settings.layers)
        _train(model, task, settings, seed)
    model.eval()
    out = {label: [(n, _accuracy(model, task, n, settings, seed)) for n in settings.lengths]}
    if label == "rotary":
        out.update(_scalings(model, task, settings, seed))
    return out


def _scalings(model: Any, task: str, settings: Settings,
              seed: int) -> dict[str, list[tuple[int, float]]]:
    """The RoPE-trained model scored with each scaling in place of plain RoPE."""
    trained = model.position.encoder
    train_tokens = length_of(task, settings.train_length)
    out = {}
    for kind in SCALINGS:
        scores = []
        for n in settings.lengths:
            model.position.encoder = _scaled(kind, length_of(task, n) / train_tokens,
                                             train_tokens, model.position.head_dim)
            scores.append((n, _accuracy(model, task, n, settings, seed)))
        out[f"rotary+{kind}"] = scores
    model.position.encoder = trained
    return out
