"""A plugin whose hook raises."""

from __future__ import annotations

import peregistry as per


@per.hookimpl
def peregistry_encoders() -> list[type[per.Encoder]]:
    raise RuntimeError("pe-hook-raises is broken on purpose")
