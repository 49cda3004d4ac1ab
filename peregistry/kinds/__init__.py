"""The kinds of encoders, below the engine and the families: the base classes
(:class:`Encoder`; :class:`AbsoluteEncoder`; the pair kinds :class:`BiasEncoder` and
:class:`RelativeEmbedding`; the rotary kind's declaration :class:`RotaryKind`, whose methods the
engine gives :class:`peregistry.RotaryEncoder`), the :class:`~peregistry.backends.Ctx` of a
call's inputs and its checks (:mod:`.context`), learned params (:mod:`._params`), what is
checked when a class is declared (:mod:`._declaration`) and what an encoder asks of the registry
that built it (:mod:`._services`). This package imports neither :mod:`peregistry.rope` nor
:mod:`peregistry.encoders`, nor the registry (``tests/test_architecture.py``).
"""

from __future__ import annotations

from ..backends._base import Ctx
from ._declaration import KINDS
from .base import AbsoluteEncoder, BiasEncoder, Encoder, PairEncoder, RelativeEmbedding
from .rotary import RotaryKind

__all__ = ["KINDS", "AbsoluteEncoder", "BiasEncoder", "Ctx", "Encoder", "PairEncoder",
           "RelativeEmbedding", "RotaryKind"]
