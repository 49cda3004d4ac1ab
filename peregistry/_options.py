"""Declared encoder options: one declaration gives validation, defaults, hashing and repr.

An encoder class lists its options as class attributes::

    class Sinusoidal(AbsoluteEncoder):
        name = "sinusoidal"
        dim = Option(int, allowed="a positive even integer", check=lambda d: d > 0 and d % 2 == 0)
        base = Option(float, default=10000.0, allowed="a finite number > 0", check=lambda b: b > 0)

and :class:`~peregistry.Encoder` collects them (in declaration order, inherited ones first).
Declared defaults are checked when the class is defined: a bad one is an error naming the class,
the option and the value (a plugin module declaring one fails to load, and ``peregistry list``
shows why). Given values are validated once, at construction; a bad value raises ``TypeError``
(wrong type, unknown or missing option) or ``ValueError`` (right type, value not allowed), and
every message names the encoder, the option, the value and what is allowed.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, TypeVar, overload

from ._option_words import NONE_WORDS, PARSERS, parse_floats

__all__ = ["EXAMPLE_CANDIDATES", "MAX_DIM", "NO_EXAMPLE", "REQUIRED", "Option", "freeze", "thaw"]

#: The largest feature dimension the built-in encoders accept (``dim`` of ``rotary``, ``mrope``,
#: ``transformer-xl``): 65536 features, far above any real head or model dimension. They
#: compute their frequencies when constructed, so an absurd ``dim`` (``2**40``) would otherwise
#: try to allocate terabytes there.
MAX_DIM: Final = 1 << 16


class _Required:
    """Sentinel: the option has no default and must be given."""

    _instance: _Required | None = None

    def __new__(cls) -> _Required:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Final = _Required()


class _NoExample:
    """Sentinel: an option has no example value (see :meth:`Option.example_value`)."""

    def __repr__(self) -> str:
        return "NO_EXAMPLE"


NO_EXAMPLE: Final = _NoExample()

#: The type of an option's value as an encoder's attribute gives it. ``Any`` by default (PEP 696)
#: so that a bare ``Option`` annotation, as plugins wrote before it was generic, stays valid under
#: ``mypy --strict``; Python 3.11's ``TypeVar`` has no ``default``, and type checkers know
#: ``typing_extensions`` without it being installed.
if TYPE_CHECKING:
    from typing_extensions import TypeVar as _TypeVar

    T = _TypeVar("T", default=Any)
else:
    T = TypeVar("T")
_V = TypeVar("_V")  # the value type an overload of ``Option.__init__`` binds

#: Values tried, in order, when a required option without an ``example`` needs one: the first
#: the option accepts (its type, ``choices`` and ``check``) is used. ``str`` options try their
#: first choice; ``tuple`` and ``dict`` options have no generic example.
EXAMPLE_CANDIDATES: dict[type, tuple[Any, ...]] = {
    int: (64, 32, 16, 8, 4, 2, 1),
    float: (1.0, 0.5, 2.0, 10000.0),
    bool: (False, True),
    str: (),
    tuple: (),
    dict: (),
}

#: How each type is written on a command line (for ``--help`` and error messages).
_TYPE_SYNTAX: dict[type, str] = {
    int: "int",
    float: "float",
    str: "str",
    bool: "bool",
    tuple: "ints 1,2,3",
    dict: "JSON object",
}

_TYPE_WORDS: dict[Any, str] = {
    int: "an integer",
    float: "a real number",
    str: "a string",
    bool: "a bool (True or False)",
    dict: "a dict",
    tuple: "a sequence of integers",
}

#: The entries a ``tuple`` option may hold (``Option(tuple, item=float)``).
_ITEM_WORDS: dict[Any, str] = {int: "a sequence of integers", float: "a sequence of real numbers"}


def _type_name(value: object) -> str:
    """The type name of ``value``, for messages."""
    return type(value).__name__


class Option(Generic[T]):
    """One option of an encoder: its type, default and the values it allows.

    Generic in the value its attribute gives, for type checkers: ``Option(int, 8)`` is an
    ``Option[int]`` and ``self.dim`` an ``int``; a ``nullable`` option's value may be ``None``;
    a ``dict`` option's is ``Any`` (it is stored frozen, read with :func:`thaw`).

    :param type: ``int``, ``float``, ``str``, ``bool``, ``dict`` (a mapping of str keys, stored
        frozen) or ``tuple`` (a sequence of integers, stored as a tuple).
    :param item: for ``tuple`` options, the type of the entries: ``int`` (the default) or
        ``float`` (finite real numbers, stored as floats; e.g. LongRoPE's ``short_factor``).
    :param default: the default value; omit it for a required option.
    :param allowed: the phrase that describes allowed values in error messages
        ("a positive even integer").
    :param check: a predicate on the converted value; ``False`` means not allowed.
    :param choices: for ``str`` options, the allowed strings.
    :param nullable: ``None`` is allowed (and means "derive from the other options").
    :param doc: one line for ``--help``, the docs and ``peregistry show``.
    :param example: a typical value for a required option (``peregistry check`` and ``plot``
        use it when the user gives none; it must be valid together with the other options'
        examples). See :meth:`example_value` and :meth:`Encoder.example_options`.
    """

    __slots__ = ("allowed", "check", "choices", "default", "doc", "example", "item", "name",
                 "nullable", "type")

    @overload
    def __init__(
        self: Option[Any],
        type: type[dict[Any, Any]],
        default: Any = ...,
        *,
        allowed: str | None = ...,
        check: Callable[[Any], bool] | None = ...,
        choices: Sequence[str] | None = ...,
        nullable: bool = ...,
        doc: str = ...,
        example: Any = ...,
        item: type = ...,
    ) -> None: ...

    @overload
    def __init__(
        self: Option[_V | None],
        type: type[_V],
        default: Any = ...,
        *,
        allowed: str | None = ...,
        check: Callable[[Any], bool] | None = ...,
        choices: Sequence[str] | None = ...,
        nullable: Literal[True],
        doc: str = ...,
        example: Any = ...,
        item: type = ...,
    ) -> None: ...

    @overload
    def __init__(
        self: Option[_V],
        type: type[_V],
        default: Any = ...,
        *,
        allowed: str | None = ...,
        check: Callable[[Any], bool] | None = ...,
        choices: Sequence[str] | None = ...,
        nullable: Literal[False] = ...,
        doc: str = ...,
        example: Any = ...,
        item: type = ...,
    ) -> None: ...

    def __init__(
        self,
        type: type[Any],
        default: Any = REQUIRED,
        *,
        allowed: str | None = None,
        check: Callable[[Any], bool] | None = None,
        choices: Sequence[str] | None = None,
        nullable: bool = False,
        doc: str = "",
        example: Any = None,
        item: type = int,
    ) -> None:
        if type not in _TYPE_WORDS:
            raise TypeError(f"Option type must be one of {sorted(t.__name__ for t in _TYPE_WORDS)}")
        if item not in _ITEM_WORDS:
            raise TypeError("Option item (the type of a tuple's entries) must be int or float")
        self.type = type
        self.item = item
        self.default = default
        self.choices = tuple(choices) if choices is not None else None
        self.allowed = allowed or (
            "one of " + ", ".join(repr(c) for c in self.choices)
            if self.choices is not None
            else _ITEM_WORDS[item] if type is tuple
            else _TYPE_WORDS[type]
        )
        self.check = check
        self.nullable = nullable
        self.doc = doc
        self.example = example
        self.name = "?"

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> Option[T]: ...

    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> T: ...

    def __get__(self, obj: object, objtype: type | None = None) -> Option[T] | T:
        if obj is None:
            return self
        value: T = obj._values[self.name]  # type: ignore[attr-defined]
        return value

    @property
    def required(self) -> bool:
        """True when the option has no default (the user must pass it)."""
        return self.default is REQUIRED

    def __repr__(self) -> str:
        default = "" if self.required else f", default={self.default!r}"
        return f"Option({self.type.__name__}{default})"

    # -- examples and text ----------------------------------------------------------------------
    @property
    def syntax(self) -> str:
        """How a value is written on a command line: ``int``, ``ints 1,2,3``, ``JSON object``..."""
        return "numbers 1.0,0.5" if self.type is tuple and self.item is float else _TYPE_SYNTAX[self.type]

    def example_value(self) -> Any:
        """A value this option accepts, for filling it when the user gives none: its
        ``example``, else its first choice, else the first of :data:`EXAMPLE_CANDIDATES` for its
        type that passes :meth:`convert`; :data:`NO_EXAMPLE` if none does."""
        candidates: tuple[Any, ...] = () if self.example is None else (self.example,)
        if self.type is str and self.choices:
            candidates += (self.choices[0],)
        for value in (*candidates, *EXAMPLE_CANDIDATES[self.type]):
            try:
                self.convert("?", value)
            except (TypeError, ValueError):
                continue
            return value
        return NO_EXAMPLE

    def parse(self, owner: str, text: str) -> Any:
        """The value written as ``text`` on a command line (not yet checked: see :meth:`convert`).

        ``int``: ``8``; ``float``: ``1e4``; ``str``: as given; ``bool``: ``true``/``false`` (also
        ``1/0``, ``yes/no``, ``on/off``); ``tuple`` of ints: ``1,2,3`` (brackets optional, ``""``
        is empty); ``dict``: a JSON object. ``none``/``null`` means None for a nullable option.

        :raises ValueError: naming the encoder ``owner``, the option, the text and what is allowed.
        """
        word = text.strip()
        if self.nullable and word.lower() in NONE_WORDS:
            return None
        parse = parse_floats if self.type is tuple and self.item is float else PARSERS.get(self.type)
        if parse is None:  # str
            return text
        try:
            return parse(word)
        except ValueError as exc:
            hint = f" ({exc})" if str(exc) else ""
            raise ValueError(f"{owner}: option {self.name!r} must be {self.allowed}, "
                             f"got {text!r}{hint}") from None

    # -- conversion -----------------------------------------------------------------------------
    def check_default(self, owner: str) -> None:
        """Raise if the declared default is not a value this option accepts (its type,
        ``choices`` and ``check``): the same ``TypeError``/``ValueError`` as :meth:`convert`,
        naming ``owner`` (the encoder class), the option and the value. Required options have
        no default to check."""
        if self.required:
            return
        try:
            self.convert(owner, self.default)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{exc} (the declared default)") from None

    def convert(self, owner: str, value: Any) -> Any:
        """Check ``value`` and return its canonical (immutable) form, or raise."""
        if value is None:
            if self.nullable:
                return None
            raise TypeError(
                f"{owner}: option {self.name!r} must be {self.allowed}, got None"
            )
        t = type(value)  # (an int or a str is canonical already: the usual case)
        converted = value if t is self.type and (t is int or t is str) else self._convert_type(
            owner, value)
        if self.choices is not None and converted not in self.choices:
            raise ValueError(
                f"{owner}: option {self.name!r} must be {self.allowed}, got {value!r}"
            )
        if self.check is not None and not self.check(converted):
            raise ValueError(
                f"{owner}: option {self.name!r} must be {self.allowed}, got {value!r}"
            )
        return converted

    def _wrong_type(self, owner: str, value: Any) -> TypeError:
        """The error of a value of the wrong type: option, what is allowed, value and type."""
        return TypeError(
            f"{owner}: option {self.name!r} must be {self.allowed}, "
            f"got {value!r} of type {_type_name(value)}"
        )

    def _float_tuple(self, owner: str, value: Sequence[Any]) -> tuple[float, ...]:
        """A sequence of real numbers as a tuple of finite floats (bools refused)."""
        if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value):
            raise self._wrong_type(owner, value)
        out = tuple(_finite_or_inf(v) for v in value)
        if not all(math.isfinite(v) for v in out):
            raise ValueError(
                f"{owner}: option {self.name!r} must be {self.allowed}, got {value!r}"
            )
        return out

    def _convert_type(self, owner: str, value: Any) -> Any:
        """``value`` as the option's type: an exact bool, an int by ``operator.index``, a
        finite float, a str, a tuple of ints or finite floats, or a frozen str-keyed dict; no
        bool passes as a number."""
        t = self.type
        if t is bool:
            if isinstance(value, bool) or type(value).__name__ == "bool_":
                return bool(value)
            raise self._wrong_type(owner, value)
        if isinstance(value, bool) or type(value).__name__ == "bool_":
            # bool is an int subclass; True as a dimension is always a mistake.
            raise self._wrong_type(owner, value)
        if t is int:
            try:
                return operator.index(value)
            except TypeError:
                raise self._wrong_type(owner, value) from None
        if t is float:
            if not isinstance(value, numbers.Real):
                raise self._wrong_type(owner, value)
            out = _finite_or_inf(value)
            if not math.isfinite(out):
                raise ValueError(
                    f"{owner}: option {self.name!r} must be {self.allowed}, got {value!r}"
                )
            return out
        if t is str:
            if not isinstance(value, str):
                raise self._wrong_type(owner, value)
            return value
        if t is tuple:
            if isinstance(value, str | bytes) or not isinstance(value, Sequence):
                raise self._wrong_type(owner, value)
            if self.item is float:
                return self._float_tuple(owner, value)
            try:
                return tuple(operator.index(v) for v in value)
            except TypeError:
                raise self._wrong_type(owner, value) from None
        # dict
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise self._wrong_type(owner, value)
        return freeze(value)


def _finite_or_inf(value: Any) -> float:
    """``float(value)``, or ``inf`` where that overflows (an int beyond float64's range, such as
    ``10**400``), so that the caller's finiteness check reports it as a ``ValueError`` naming the
    option rather than letting an ``OverflowError`` escape."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


class _FrozenDict(tuple):  # type: ignore[type-arg]
    """A mapping stored as a sorted tuple of items: hashable, immutable, comparable."""

    __slots__ = ()


def freeze(value: Any) -> Any:
    """Turn dicts and lists (recursively) into hashable, immutable equivalents."""
    if isinstance(value, Mapping):
        return _FrozenDict(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Inverse of :func:`freeze`: a fresh dict/list the caller may modify freely."""
    if isinstance(value, _FrozenDict):
        return {k: thaw(v) for k, v in value}
    if isinstance(value, tuple):
        return tuple(thaw(v) for v in value)
    return value
