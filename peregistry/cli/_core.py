"""What every command of the command line shares: the :class:`Command` record each command module
declares, usage errors, the encoder's option flags and their values, and plain-text output.

A command module (``_list``, ``_show``, ...) registers its own arguments and runs itself; this
module knows no command and no encoder. Option values are parsed by the encoder's own
:class:`~peregistry.Option` declarations (:meth:`Option.parse`), so a plugin's encoder gets
exactly the treatment of a built-in one.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

if TYPE_CHECKING:
    from .._options import Option
    from ..backends._base import Backend
    from ..encoders.base import Encoder

PROG = "peregistry"
DEFAULT_BACKEND = "numpy"


class UsageError(Exception):
    """A mistake in the command line: printed without traceback, exit code 2."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors go through :class:`UsageError` (so ``main`` returns 2)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}\n{self.format_usage().rstrip()}")


@dataclass(frozen=True)
class Command:
    """One ``peregistry`` command, declared by the module that implements it.

    :ivar name: the command word.
    :ivar help: one line for ``peregistry --help``.
    :ivar description: the paragraph of ``peregistry NAME --help``.
    :ivar add_arguments: registers the command's own arguments on its parser.
    :ivar run: ``run(args, extras, out) -> exit code``; ``extras`` are the arguments the parser
        did not know (only for an ``encoder`` command, whose unknown ``--flags`` are options
        the encoder will reject by name).
    :ivar encoder: the command takes an encoder NAME (``args.name``) and gets that encoder's
        option flags (``--dim 8``); ``args.encoder_class`` is then the encoder's class.
    :ivar epilog: an example, printed after the help.
    """

    name: str
    help: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, list[str], TextIO], int]
    encoder: bool = False
    epilog: str | None = None


# -- argument types -------------------------------------------------------------------------------
def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def positive_int(text: str) -> int:
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def split_assignment(item: str, what: str) -> tuple[str, str]:
    """``NAME=VALUE`` → ``(NAME, VALUE)``."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"{what} expects NAME=VALUE, got {item!r}")
    return key.strip(), raw


def comma_list(items: Iterable[str]) -> list[str]:
    """Repeated and comma-separated values (``--backend a,b --backend c``), in order, once each."""
    return list(dict.fromkeys(v.strip() for item in items for v in item.split(",") if v.strip()))


# -- encoder options ------------------------------------------------------------------------------
def flag(option_name: str) -> str:
    """The flag of an encoder option: ``rotary_dim`` → ``--rotary-dim``."""
    return "--" + option_name.replace("_", "-")


def parse_option_value(owner: str, spec: Option, raw: str) -> Any:
    """The value of option ``spec`` of encoder ``owner`` written as ``raw`` (see
    :meth:`peregistry.Option.parse`); whether it is *allowed* is the encoder's business.

    :raises UsageError: naming the encoder, the option, the text and what is allowed.
    """
    try:
        return spec.parse(owner, raw)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def option_help(spec: Option) -> str:
    default = "required" if spec.required else f"default {spec.default!r}"
    doc = f"{spec.doc}; " if spec.doc else ""
    return f"{doc}{spec.syntax}, {spec.allowed} ({default})".replace("%", "%%")


def add_encoder_flags(parser: argparse.ArgumentParser, cls: type[Encoder]) -> None:
    """A flag per option of ``cls`` (``--rotary-dim``, and ``--rotary_dim``); an option whose
    name collides with one of the command's own flags stays reachable as ``--option NAME=V``
    (``args.option_only`` lists those)."""
    own = {s.lstrip("-").replace("-", "_") for s in parser._option_string_actions}
    group = parser.add_argument_group(f"options of {cls.name}")
    colliding = []
    for key, spec in cls._option_specs.items():
        if key in own:
            colliding.append(key)
            continue
        flags = [flag(key)] + ([f"--{key}"] if "_" in key else [])
        group.add_argument(*flags, dest=f"opt:{key}", metavar="VALUE",
                           default=argparse.SUPPRESS, help=option_help(spec))
    parser.set_defaults(option_only=tuple(colliding))


def collect_options(cls: type[Encoder], args: argparse.Namespace,
                    extras: list[str], command: str) -> dict[str, Any]:
    """The options given as flags, as ``--option NAME=VALUE`` and as unknown ``--flags`` (left
    for the encoder to reject, so the message is the library's), parsed by their declarations."""
    specs = cls._option_specs
    given: list[tuple[str, str]] = [(key, getattr(args, f"opt:{key}")) for key in specs
                                    if hasattr(args, f"opt:{key}")]
    for item in args.option:
        given.append(split_assignment(item, "--option"))
    i = 0
    while i < len(extras):
        token = extras[i]
        if not token.startswith("--") or len(token) == 2:
            raise UsageError(f"unrecognized argument {token!r} for '{command} {cls.name}'; "
                             f"see 'peregistry {command} {cls.name} --help'")
        key, sep, raw = token[2:].partition("=")
        if not sep:
            raw = extras[i + 1] if i + 1 < len(extras) else ""
            i += 1
        given.append((key, raw))
        i += 1
    options: dict[str, Any] = {}
    for key, raw in given:
        key = key.replace("-", "_")
        options[key] = parse_option_value(cls.name, specs[key], raw) if key in specs else raw
    return options


def fill_required(cls: type[Encoder], given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` plus the encoder's :meth:`~peregistry.Encoder.example_options` for the required
    options it lacks.

    :raises UsageError: if a required option has no example (a tuple or dict option, or one
        whose ``check`` rejects every generic candidate).
    """
    options = {**cls.example_options(), **given}
    lacking = [f"{key!r} ({spec.allowed})" for key, spec in cls._option_specs.items()
               if spec.required and key not in options]
    if lacking:
        raise UsageError(f"cannot fill required option{'s' if len(lacking) > 1 else ''} "
                         f"{', '.join(lacking)} with an example value; pass "
                         f"--option {cls.name}:NAME=VALUE")
    return options


def backend(name: str) -> Backend:
    """The adapter named ``name``, installed: else a usage error naming the known ones."""
    from ..registry import default_registry

    adapter = default_registry.backend(name)  # ValueError naming the known backends
    if not adapter.is_installed():
        extra = {"array_api_strict": "strict"}.get(name, name)
        raise UsageError(f"backend {name!r} is not installed (pip install 'peregistry[{extra}]')")
    return adapter


# -- output ---------------------------------------------------------------------------------------
def table(head: Sequence[str], rows: Iterable[Sequence[str]],
          notes: Sequence[str | None] | None = None) -> str:
    """A plain text table; ``notes[i]``, if any, is printed indented under row ``i``."""
    body = [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=False)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    for i, cells in enumerate(body):
        lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
        if notes is not None and notes[i]:
            lines.append(f"    {notes[i]}")
    return "\n".join(lines)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def dump_json(value: Any, out: TextIO) -> None:
    out.write(json.dumps(_jsonable(value), indent=2) + "\n")
