"""Scaling parameters: a value converted through its :class:`~peregistry.Option` (with the two
rules of Hugging Face configs: ``None`` means the default, an integer may come as ``4096.0``),
and :class:`Param`, the declaration used before scalings used ``Option`` (deprecated)."""

from __future__ import annotations

import copy
import numbers
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..._options import REQUIRED, Option

__all__ = ["Param", "convert_parameter", "named"]


def named(option: Option, key: str) -> Option:
    """``option`` with ``name == key`` (its errors quote the name): the declaration itself when it
    is unnamed or already named so, else a copy (one ``Option`` shared by two keys)."""
    if option.name == "?":
        option.__set_name__(object, key)
    if option.name == key:
        return option
    out = copy.copy(option)
    out.name = key
    return out


def convert_parameter(where: str, option: Option, value: Any) -> Any:
    """``value`` in canonical form (``option.convert``), or a clear error starting with ``where``.

    ``None`` (or a missing key) gives the default, as Hugging Face reads ``rope_parameters``; a
    ``None`` default means "derived from the other parameters" and is kept. A float with an
    integral value is accepted for an ``int`` parameter (``4096.0`` from a JSON config)."""
    if value is None and not option.required:
        if option.default is None or option.nullable:
            return None
        value = option.default
    if (option.type is int and isinstance(value, numbers.Real) and not isinstance(value, bool)
            and not isinstance(value, numbers.Integral) and float(value).is_integer()):
        value = int(float(value))
    return option.convert(where, value)


# -- deprecated -------------------------------------------------------------------------------
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
