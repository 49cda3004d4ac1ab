"""The deprecated :class:`Param`, the declaration of scaling parameters before scalings used
:class:`~peregistry.Option`; imported from :mod:`peregistry.encoders.rope_scaling` on first use
(a dataclass costs ~0.5 ms to create: not at every start)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..._options import REQUIRED, Option
from ._params import convert_parameter, named

__all__ = ["Param"]

_KINDS: dict[str, tuple[type, type]] = {
    "float": (float, int),
    "int": (int, int),
    "bool": (bool, int),
    "floats": (tuple, float),
}


@dataclass(frozen=True)
class Param:
    """One parameter of a scaling type, as declared before :class:`~peregistry.Option` served
    scalings too. Deprecated: ``Param("float", 1.0, "a number > 0", check)`` is
    ``Option(float, 1.0, allowed="a number > 0", check=check)``; ``Param("floats", ...)`` is
    ``Option(tuple, ..., item=float)``; a ``None`` default is ``Option(..., None, nullable=True)``.

    :param kind: ``"float"``, ``"int"``, ``"bool"`` or ``"floats"`` (a list of real numbers).
    :param default: omit for a required parameter; ``None`` means "derived" (e.g. yarn's
        ``attention_factor``), and an explicit ``None`` in the dict then also means derived.
    :param allowed: phrase for error messages ("a number >= 1").
    :param check: predicate on the converted value (not called for ``None``).
    :param doc: one line for the docs.
    """

    kind: str
    default: Any = REQUIRED
    allowed: str = ""
    check: Callable[[Any], bool] | None = None
    doc: str = ""

    def __post_init__(self) -> None:
        warnings.warn(
            "peregistry.encoders.rope_scaling.Param is deprecated: declare scaling parameters "
            "with peregistry.Option (Param('float', ...) is Option(float, ...), Param('floats', "
            "...) is Option(tuple, ..., item=float)); see docs/rotary.md, 'Writing a scaling type'",
            DeprecationWarning, stacklevel=3,  # the caller of the dataclass's __init__
        )
        if self.kind not in _KINDS:
            raise TypeError(f"Param kind must be one of {', '.join(_KINDS)}, got {self.kind!r}")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def as_option(self, key: str) -> Option:
        """The equivalent :class:`~peregistry.Option`, named ``key``."""
        type_, item = _KINDS[self.kind]
        option = Option(type_, self.default, allowed=self.allowed or None, check=self.check,
                        nullable=self.default is None, doc=self.doc, item=item)
        return named(option, key)

    def describe(self) -> str:
        return self.as_option("?").allowed

    def convert(self, where: str, key: str, value: Any) -> Any:
        """The value in canonical form (floats as float, lists as tuples), or a clear error."""
        return convert_parameter(where, self.as_option(key), value)
