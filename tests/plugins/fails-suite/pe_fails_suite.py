"""A plugin that loads, but whose encoder ignores the requested dtype (always float32)."""

from __future__ import annotations

from typing import Any

import peregistry as per


class AlwaysFloat32(per.AbsoluteEncoder):
    """Linear ramp that always returns float32."""

    name = "always-float32"
    dim = per.Option(int)

    def encode(self, positions: Any, *, params: Any = None, dtype: Any = None) -> Any:
        out = super().encode(positions, params=params, dtype=dtype)
        import numpy as np

        return np.asarray(out, dtype=np.float32)

    def _encode(self, positions: Any, *, params: Any, ctx: Any) -> Any:
        xp = ctx.xp
        p = xp.astype(positions, ctx.wide)[..., None]
        return p * xp.ones((self.dim,), dtype=ctx.wide, device=ctx.device)


@per.hookimpl
def peregistry_encoders() -> list[type[per.Encoder]]:
    return [AlwaysFloat32]
