"""``peregistry check [NAME...]``: the conformance suite (:func:`peregistry.testing.check_encoder`)
as a table; exit code 1 if anything failed.

Required options the user does not give come from the encoder's own
:meth:`~peregistry.Encoder.example_options`; ``--option [ENCODER:]NAME=VALUE`` values are parsed
by the encoder's option declarations.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from ._core import (
    Command,
    UsageError,
    backend,
    comma_list,
    fill_required,
    parse_option_value,
    split_assignment,
)

if TYPE_CHECKING:
    from ..encoders.base import Encoder
    from ..testing import ReportRow


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", metavar="NAME", nargs="*")
    parser.add_argument("--backend", action="append", default=[], metavar="B",
                        help="a backend (repeatable, or comma-separated)")
    parser.add_argument("--option", action="append", default=[], metavar="[ENCODER:]K=V",
                        help="an option for every selected encoder that declares it, or only "
                             "for ENCODER (repeatable)")


def _classes(names: list[str], typed: bool) -> dict[str, type[Encoder] | Exception]:
    """Each name's class, or the exception that stands for it in the table (a name the user
    ``typed`` that is unknown is a usage error instead)."""
    from ..registry import default_registry

    classes: dict[str, type[Encoder] | Exception] = {}
    for name in names:
        try:
            classes[name] = default_registry.encoder_class(name)
        except LookupError as exc:
            if typed:
                raise
            classes[name] = exc
        except Exception as exc:  # a conflict or broken plugin: a row of the table
            classes[name] = exc
    return classes


def _options(items: list[str], classes: dict[str, type[Encoder] | Exception]
             ) -> dict[str, dict[str, Any]]:
    """The ``--option`` values by encoder, parsed by each encoder's declaration."""
    per_encoder: dict[str, dict[str, Any]] = {n: {} for n in classes}
    for item in items:
        key, raw = split_assignment(item, "--option")
        target, colon, key = key.rpartition(":") if ":" in key else ("", "", key)
        key = key.replace("-", "_")
        if colon and target not in per_encoder:
            raise UsageError(f"--option {item!r} names encoder {target!r}, which is not being "
                             f"checked ({', '.join(classes)})")
        used = False
        for n in [target] if colon else list(classes):
            cls = classes[n]
            if isinstance(cls, Exception):
                continue
            if key in cls._option_specs:
                per_encoder[n][key] = parse_option_value(n, cls._option_specs[key], raw)
                used = True
            elif colon:
                per_encoder[n][key] = raw  # the encoder rejects it, naming its options
                used = True
        if not used:
            raise UsageError(f"--option {item!r}: no checked encoder has an option {key!r}")
    return per_encoder


def _rows(name: str, cls: type[Encoder] | Exception, given: dict[str, Any],
          backends: str | None) -> list[ReportRow]:
    """The suite's rows for one encoder, or one error row if it cannot be built."""
    from ..registry import default_registry
    from ..testing import ReportRow, check_encoder

    if isinstance(cls, Exception):
        return [ReportRow(name, "-", "(load)", "error", str(cls))]
    try:
        enc = default_registry.get_encoder(name, **fill_required(cls, given))
    except (UsageError, TypeError, ValueError) as exc:
        if given:  # the user's --option values: a usage error
            raise UsageError(str(exc)) from exc
        return [ReportRow(name, "-", "(build)", "error", str(exc))]
    return list(check_encoder(enc, backends=backends).rows)


def run(args: argparse.Namespace, extras: list[str], out: TextIO) -> int:
    """``peregistry check``: the conformance suite as a table; exit 1 if anything failed."""
    from .. import list_encoders
    from ..testing import format_table

    names: list[str] = list(dict.fromkeys(args.names))
    if not names:
        names = list(dict.fromkeys(i.name for i in list_encoders() if i.name is not None))
    classes = _classes(names, typed=bool(args.names))
    per_encoder = _options(args.option, classes)
    chosen = comma_list(args.backend)
    for b in chosen:
        backend(b)  # unknown or not installed: a usage error naming the known ones
    backends = ",".join(chosen) or None
    rows: list[ReportRow] = []
    for i, name in enumerate(names, 1):
        start = time.perf_counter()
        got = _rows(name, classes[name], per_encoder[name], backends)
        rows += got
        bad = sum(r.status not in _OK for r in got)
        # Progress on stderr, so the table on stdout stays the whole of the output.
        print(f"[{i}/{len(names)}] {name}: {len(got) - bad} ok, {bad} failed "
              f"({time.perf_counter() - start:.1f} s)", file=sys.stderr, flush=True)
    out.write(format_table(rows) + "\n")
    return 0 if all(r.status in _OK for r in rows) else 1


_OK = ("passed", "xfail", "exempt")


COMMAND = Command(
    name="check",
    help="run the conformance suite and print its table",
    description="Run peregistry.testing.check_encoder for each NAME (default: every registered "
                "encoder) on each --backend (default: PEREGISTRY_BACKENDS, or every installed "
                "backend). Required options without --option get the encoder's example values "
                "(Encoder.example_options: dim=64 and the like). Exit code 1 if anything failed.",
    add_arguments=_add_arguments,
    run=run,
)
