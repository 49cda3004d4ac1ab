"""A plugin whose hook returns something that is not an encoder class."""

from __future__ import annotations

from typing import Any

import peregistry as per


class NotAnEncoder:
    name = "not-an-encoder"


@per.hookimpl
def peregistry_encoders() -> list[Any]:
    return [NotAnEncoder]
