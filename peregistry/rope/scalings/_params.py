"""Scaling parameters: a value converted through its :class:`~peregistry.Option` (with the two
rules of Hugging Face configs: ``None`` means the default, an integer may come as ``4096.0``)."""

from __future__ import annotations

import copy
import numbers
from typing import Any

from ..._options import Option

__all__ = ["convert_parameter", "named"]


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
