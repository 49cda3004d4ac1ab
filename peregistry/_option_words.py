"""How option values are written on a command line: the words of ``peregistry show``,
``check`` and ``plot`` options (``true``/``false``, ``1,2,3``, a JSON object), turned into values
that :meth:`peregistry.Option.convert` then checks. Kept apart from the declarations, which
every encoder class uses, because only the command line parses text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
_FALSE_WORDS = frozenset({"0", "false", "no", "off"})
#: The words that mean None for a nullable option.
NONE_WORDS = frozenset({"none", "null"})


def _parse_bool(word: str) -> bool:
    """A command-line word as a bool (``true``/``false`` and their synonyms, any case)."""
    if word.lower() in _TRUE_WORDS:
        return True
    if word.lower() in _FALSE_WORDS:
        return False
    raise ValueError("write true or false")


def _parse_number(kind: type) -> Callable[[str], Any]:
    """A parser of command-line words as ``kind`` (int or float)."""

    def parse(word: str) -> Any:
        try:
            return kind(word)
        except ValueError:
            raise ValueError("") from None

    return parse


def _parse_sequence(item: type, example: str) -> Callable[[str], tuple[Any, ...]]:
    """A parser of comma-separated command-line words (brackets optional) as a tuple of
    ``item``; its error shows ``example``."""

    def parse(word: str) -> tuple[Any, ...]:
        inner = word.strip("()[] ").removesuffix(",")  # "(4,)" is Python's one-tuple
        if not inner:
            return ()
        try:
            return tuple(item(p) for p in inner.split(","))
        except ValueError:
            raise ValueError(f"write {example}") from None

    return parse


def _parse_json_object(word: str) -> Any:
    """A command-line word as a JSON object (a ``scaling`` dict, say)."""
    import json  # the command line only, not at every start

    try:
        value = json.loads(word)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("write a JSON object, e.g. '{\"type\": \"linear\", \"factor\": 2.0}'")
    return value


#: Command-line text to value, by option type (``str`` is taken as given).
PARSERS: dict[type, Callable[[str], Any]] = {
    bool: _parse_bool,
    int: _parse_number(int),
    float: _parse_number(float),
    tuple: _parse_sequence(int, "integers separated by commas, e.g. 1,2,3"),
    dict: _parse_json_object,
}
#: ``Option(tuple, item=float)``: numbers separated by commas.
parse_floats = _parse_sequence(float, "numbers separated by commas, e.g. 1.0,0.5")
