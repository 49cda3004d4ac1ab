"""The rotation against its physical limit, a memory copy of ``x``, on every path a rotation
takes: ``rotary`` (half layout) and ``rotary-interleaved`` run as the framework's users run it
(JAX jitted, the others eager), ``rotary-compiled`` and ``rotary-interleaved-compiled`` under
``torch.compile`` with inductor (torch only). "hand-written" is the same rotation written the
plain way (half slices and a concatenation, GPT-NeoX's ``rotate_half``; GPT-J's
``rotate_every_two``), compiled the same way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._cases import Bench, BenchSkipped, Case
from ._hand import hand_rotary, hand_rotary_interleaved

SHAPE = (1, 32, 2048, 128)
QUICK_SHAPE = (1, 4, 128, 64)


def _rope(layout: str, compiled: bool) -> Callable[[Bench, bool], Case]:
    hand = hand_rotary if layout == "half" else hand_rotary_interleaved

    def bench(b: Bench, quick: bool) -> Case:
        import peregistry as per

        if compiled and b.backend.name != "torch":
            raise BenchSkipped("torch.compile is torch's (JAX's rows run jitted already)")
        shape = QUICK_SHAPE if quick else SHAPE
        enc = per.get_encoder("rotary", dim=shape[-1], layout=layout)
        x = b.randn(shape)
        def ours(v: Any) -> Any:
            return enc.rotate(v)  # type: ignore[attr-defined]

        xp = b.xp  # (outside the compiled function: a cached_property takes a lock)

        def theirs(v: Any) -> Any:
            return hand(xp, v)

        if not compiled:
            return b.case(ours, theirs, (x,), f"{'x'.join(map(str, shape))} f32")
        import torch

        ours_c = torch.compile(ours, backend="inductor", dynamic=False, fullgraph=True)
        hand_c = torch.compile(theirs, backend="inductor", dynamic=False, fullgraph=True)
        ours_c(x), hand_c(x)  # compiled before timing
        copy = b.copier(torch.zeros_like(x))
        return Case(lambda: ours_c(x), lambda: hand_c(x), copy,
                    f"{'x'.join(map(str, shape))} f32, inductor")

    return bench


BENCH_ROTATIONS: dict[str, Callable[[Bench, bool], Case]] = {
    "rotary-interleaved": _rope("interleaved", compiled=False),
    "rotary-compiled": _rope("half", compiled=True),
    "rotary-interleaved-compiled": _rope("interleaved", compiled=True),
}
