"""``kind=`` of :func:`peregistry.get_encoder` and :func:`peregistry.from_hf_config`: the class an
encoder must be, checked when it is asked for, so that a type checker may give the result that type.

Imported only when ``kind=`` is given (not at ``import peregistry``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .kinds.base import Encoder

_ALLOWED = ("an Encoder subclass: per.RotaryEncoder, per.AbsoluteEncoder, per.BiasEncoder, "
            "per.RelativeEmbedding, or a plugin's class")


def kind_class(kind: object) -> type[Encoder]:
    """``kind`` itself if it is an :class:`~peregistry.Encoder` subclass, else a ``TypeError``
    saying what is allowed (for a kind's name, ``"rotary"``, which class to pass)."""
    from .kinds import AbsoluteEncoder, BiasEncoder, Encoder, RelativeEmbedding
    from .rope.encoder import RotaryEncoder

    if isinstance(kind, type) and issubclass(kind, Encoder):
        return kind
    bases: tuple[type[Encoder], ...] = (AbsoluteEncoder, RotaryEncoder, BiasEncoder, RelativeEmbedding)
    for base in bases:
        if kind == base.kind:
            raise TypeError(f"kind={kind!r} is a kind's name; pass its class, per.{base.__name__}")
    raise TypeError(f"kind={kind!r} (the second positional argument) is not an encoder class; "
                    f"allowed: {_ALLOWED}. Options are keyword-only (dim=64)")


def check_kind(name: str, cls: type[Encoder], kind: object) -> None:
    """Raise ``TypeError`` unless the class of encoder ``name`` is (a subclass of) ``kind``."""
    want = kind_class(kind)
    if not issubclass(cls, want):
        raise TypeError(
            f"encoder {name!r} is a {cls.__module__}.{cls.__qualname__} (kind {cls.kind!r}), "
            f"not a {want.__module__}.{want.__qualname__} as kind={want.__name__} asks"
        )
