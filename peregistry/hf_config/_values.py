"""Reading one value of a Hugging Face config: its type and range checked, a :class:`ConfigError`
naming the key, the value and the model type otherwise (``where`` carries the model type).

A config.json is hand-edited JSON: a size may arrive as ``128.5`` or ``"128"``, a section list
as ``5``. Nothing is truncated or replaced: an integral float (``128.0``) is read as the integer
it equals, anything else that is not the documented type is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ConfigError(ValueError):
    """A config that lacks what its positional encoding needs, or asks for what peregistry
    does not have: the message names the key, the value and the model type."""


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({type(value).__name__})"


def integer(value: Any, key: str, where: str, *, minimum: int = 1) -> int:
    """``value`` as an int ``>= minimum`` (an integral float counts; bools and strings do not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: {key}={_shown(value)} must be an integer >= {minimum}")
    if isinstance(value, float) and not value.is_integer():
        raise ConfigError(f"{where}: {key}={value!r} must be an integer >= {minimum} "
                          f"(it is not truncated)")
    if value < minimum:
        raise ConfigError(f"{where}: {key}={value!r} must be an integer >= {minimum}")
    return int(value)


def number(value: Any, key: str, where: str, *, positive: bool = True) -> float:
    """``value`` as a finite float (``> 0`` when ``positive``); bools and strings refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value \
            or value in (float("inf"), float("-inf")):
        raise ConfigError(f"{where}: {key}={_shown(value)} must be a finite number"
                          + (" > 0" if positive else ""))
    if positive and value <= 0:
        raise ConfigError(f"{where}: {key}={value!r} must be a number > 0")
    return float(value)


def flag(value: Any, key: str, where: str) -> bool:
    """``value`` as the truth a model's ``if config.key:`` reads: ``true``/``false`` or an
    integer (Llama 4's released configs carry ``"attn_temperature_tuning": 4``, a transformers
    4.x default); strings, floats and the rest are refused."""
    if not isinstance(value, int):  # bool is an int
        raise ConfigError(f"{where}: {key}={_shown(value)} must be true, false or an integer")
    return bool(value)


def mapping(value: Any, key: str, where: str) -> Mapping[str, Any]:
    """``value`` as a mapping (``None`` is an empty one)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: {key}={_shown(value)} must be a dict (a JSON object)")
    return value


def integers(value: Any, key: str, where: str, *, minimum: int = 0) -> tuple[int, ...]:
    """``value`` as a tuple of ints ``>= minimum`` (a list or tuple of them)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ConfigError(f"{where}: {key}={_shown(value)} must be a list of integers "
                          f">= {minimum}")
    return tuple(integer(v, f"{key}[{i}]", where, minimum=minimum) for i, v in enumerate(value))


def summary(values: list[int], limit: int = 12) -> str:
    """``[a, b, ..., z]`` with at most ``limit`` numbers shown, and the count when cut."""
    if len(values) <= limit:
        return str(values)
    head = ", ".join(map(str, values[:limit - 3]))
    return f"[{head}, ..., {', '.join(map(str, values[-3:]))}] ({len(values):,} layers)"
