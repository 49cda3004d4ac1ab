"""An encoder given as a registered name with its options, or as an encoder object: how the
framework doors (``peregistry.keras``, ``peregistry.flax``) take one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .kinds.base import Encoder
from .registry import default_registry

__all__ = ["encoder_from"]


def encoder_from(owner: str, encoder: Any, options: Mapping[str, Any],
                 kind: str | None = None) -> Encoder:
    """``get_encoder(encoder, **options)`` for a name (lists become tuples: a config read back
    from JSON holds lists where the options had tuples), ``encoder`` itself for an encoder
    object (then ``options`` must be empty); of kind ``kind`` when given. Errors name
    ``owner``."""
    if isinstance(encoder, str):
        enc = default_registry.get_encoder(encoder, **{
            k: tuple(v) if isinstance(v, list) else v for k, v in options.items()})
    elif isinstance(encoder, Encoder):
        if options:
            raise TypeError(f"{owner}: options {sorted(options)} go with an encoder name, not "
                            f"an encoder object ({encoder!r})")
        enc = encoder
    else:
        raise TypeError(f"{owner}: encoder must be a registered name or a peregistry encoder, "
                        f"got {type(encoder).__name__}")
    if kind is not None and enc.kind != kind:
        raise TypeError(f"{owner}: needs an encoder of kind {kind!r}, got {enc.name!r} of kind "
                        f"{enc.kind!r}")
    return enc
