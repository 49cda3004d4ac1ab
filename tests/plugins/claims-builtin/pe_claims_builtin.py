"""A plugin that claims the built-in name ``sinusoidal``."""

from __future__ import annotations

from typing import Any

import peregistry as per


class MySinusoidal(per.AbsoluteEncoder):
    """Another encoder calling itself sinusoidal."""

    name = "sinusoidal"
    dim = per.Option(int)

    def _encode(self, positions: Any, *, params: Any, ctx: Any) -> Any:
        return ctx.xp.zeros((*positions.shape, self.dim), dtype=ctx.wide, device=ctx.device)


@per.hookimpl
def peregistry_encoders() -> list[type[per.Encoder]]:
    return [MySinusoidal]
