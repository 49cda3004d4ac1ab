"""A working third-party plugin: one absolute encoder, ``good-sin``."""

from __future__ import annotations

from typing import Any

import peregistry as per
from peregistry.plugin import Ctx, Frequencies, cos_sin


class GoodSin(per.AbsoluteEncoder):
    """Sines then cosines (a working plugin encoder)."""

    name = "good-sin"
    continuous = True
    properties = frozenset({"shift-linear", "shift-invariant-dot"})
    dim = per.Option(int, allowed="a positive even integer", check=lambda d: d > 0 and d % 2 == 0)

    def _encode(self, positions: Any, *, params: Any, ctx: Ctx) -> Any:
        freqs = Frequencies.from_omega(10000.0 ** (-2 * i / self.dim) for i in range(self.dim // 2))
        cos, sin = cos_sin(positions, freqs, ctx=ctx)
        return ctx.xp.concat((sin, cos), axis=-1)


@per.hookimpl
def peregistry_encoders() -> list[type[per.Encoder]]:
    return [GoodSin]
