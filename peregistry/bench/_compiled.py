"""The rotation under ``torch.compile`` with inductor against its physical limit, a memory copy
of ``x`` (torch only): ``rotary-compiled`` (half layout) and ``rotary-interleaved-compiled``,
compiled cold (no eager call first). "hand-written" is the same rotation written the plain way
(GPT-NeoX's ``rotate_half``; GPT-J's ``rotate_every_two``), compiled the same way. The eager and
jitted rows of both layouts are ``rotary`` and ``rotary-interleaved`` (:mod:`._cases`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._cases import Bench, BenchSkipped, Case
from ._hand import hand_rotary, hand_rotary_interleaved

SHAPE = (1, 32, 2048, 128)
QUICK_SHAPE = (1, 4, 128, 64)


def _compiled_rope(layout: str) -> Callable[[Bench, bool], Case]:
    hand = hand_rotary if layout == "half" else hand_rotary_interleaved

    def bench(b: Bench, quick: bool) -> Case:
        import peregistry as per

        if b.backend.name != "torch":
            raise BenchSkipped("torch.compile is torch's (JAX's rows run jitted already)")
        import torch

        shape = QUICK_SHAPE if quick else SHAPE
        enc = per.get_encoder("rotary", dim=shape[-1], layout=layout)
        x = b.randn(shape)
        xp = b.xp  # (outside the compiled function: a cached_property takes a lock)

        def ours(v: Any) -> Any:
            return enc.rotate(v)

        def theirs(v: Any) -> Any:
            return hand(xp, v)

        ours_c = torch.compile(ours, backend="inductor", dynamic=False, fullgraph=True)
        hand_c = torch.compile(theirs, backend="inductor", dynamic=False, fullgraph=True)
        ours_c(x), hand_c(x)  # compiled before timing
        copy = b.copier(torch.zeros_like(x))
        return Case(lambda: ours_c(x), lambda: hand_c(x), copy,
                    f"{'x'.join(map(str, shape))} f32, inductor")

    return bench


BENCH_ROTATIONS: dict[str, Callable[[Bench, bool], Case]] = {
    "rotary-compiled": _compiled_rope("half"),
    "rotary-interleaved-compiled": _compiled_rope("interleaved"),
}
