"""The parser built from the commands' own declarations, and :func:`main`."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from . import _bench, _check, _list, _plot, _show, _study
from ._core import PROG, Command, Parser, UsageError, add_encoder_flags

if TYPE_CHECKING:
    from ..encoders.base import Encoder

#: The commands, in the order ``peregistry --help`` lists them.
COMMANDS: dict[str, Command] = {c.name: c for c in (_list.COMMAND, _show.COMMAND, _check.COMMAND,
                                                     _plot.COMMAND, _bench.COMMAND,
                                                     _study.COMMAND)}


def build_parser(encoder_class: type[Encoder] | None = None, *,
                 first_pass: bool = False) -> Parser:
    """The parser; with ``encoder_class``, the encoder commands also get its option flags.

    The ``first_pass`` parser only finds the command and the encoder NAME: its commands' ``--help``
    is a plain flag and no flag is required, so the help can wait until the encoder's flags are
    added."""
    from .. import __version__

    parser = Parser(
        prog=PROG,
        description="Transformer positional encoders on NumPy, PyTorch, JAX and "
                    "array-api-strict: list them, look at their values, check them.",
        epilog="Run 'peregistry COMMAND --help' for a command's options, and "
               "'peregistry show NAME --help' for an encoder's options.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--traceback", action="store_true",
                        help="show the Python traceback of an error (for bug reports)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for command in COMMANDS.values():
        p = sub.add_parser(command.name, help=command.help, description=command.description,
                           epilog=command.epilog, allow_abbrev=False, add_help=not first_pass)
        if first_pass:
            p.add_argument("-h", "--help", action="store_true", dest="help")
        command.add_arguments(p)
        if first_pass:  # a missing required flag is the second pass's error to report
            for action in p._actions:
                action.required = action.required and not action.option_strings
        if command.encoder and encoder_class is not None:
            add_encoder_flags(p, encoder_class)
    return parser


def _encoder_class(argv: list[str]) -> type[Encoder] | None:
    """The class of the encoder an encoder command names (first pass over the arguments)."""
    from ..registry import default_registry

    try:
        first, _ = build_parser(first_pass=True).parse_known_args(argv)
    except UsageError:
        return None  # the second pass reports it
    command = COMMANDS.get(first.command or "")
    if command is None or not command.encoder or first.name is None:
        return None
    return default_registry.encoder_class(first.name)


def _registry() -> Any:
    from ..registry import default_registry

    return default_registry


def _run(argv: list[str], out: TextIO) -> int:
    from ..errors import PluginError

    try:
        cls = _encoder_class(argv)
        parser = build_parser(cls)
        args, extras = parser.parse_known_args(argv)
        if args.command is None:
            parser.print_help(out)
            return 0
        command = COMMANDS[args.command]
        if command.encoder:
            if args.name is None and getattr(args, "hf_config", None) is None:
                raise UsageError(f"{command.name} needs an encoder NAME; 'peregistry list' "
                                 f"shows them")
            if args.name is not None:
                args.encoder_class = cls or _registry().encoder_class(args.name)
        elif extras:
            parser.parse_args(argv)  # reports the unrecognized arguments
        return command.run(args, extras, out)
    except (LookupError, TypeError, ValueError, PluginError) as exc:
        raise UsageError(str(exc)) from exc


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    traceback = "--traceback" in argv
    try:
        return _run(argv, sys.stdout)
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except UsageError as exc:
        if traceback:  # shown, and still a usage error: exit code 2
            import traceback as tb

            tb.print_exc(file=sys.stderr)
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except BrokenPipeError:  # `peregistry list | head`: the reader has what it wanted
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)  # so that the exit's flush cannot fail
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # as a shell reports a process ended by SIGPIPE
    except Exception as exc:
        if traceback:
            raise
        sys.stderr.write(f"{PROG}: error: {type(exc).__name__}: {exc}\n"
                         f"(run with --traceback for details)\n")
        return 1
