"""``peregistry list``: every registered encoder, with its plugin, status and summary, broken
plugins included (with their error); imports no array framework."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, TextIO

from ._core import Command, dump_json, table

if TYPE_CHECKING:
    from ..registry import EncoderInfo


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--kernels", action="store_true",
                        help="list the rotation kernels (fast paths from plugins) instead: each "
                             "with its plugin and whether it is active, or why not")


def _info_json(info: EncoderInfo) -> dict[str, Any]:
    p = info.plugin
    return {
        "name": info.name, "kind": info.kind, "family": info.family, "summary": info.summary,
        "status": info.status, "error": info.error,
        "plugin": {"name": p.name, "distribution": p.distribution, "version": p.version,
                   "label": p.label, "status": p.status, "error": p.error},
    }


def run(args: argparse.Namespace, extras: list[str], out: TextIO) -> int:
    """``peregistry list``: every encoder (with its summary) and every broken plugin (exit 0
    even then)."""
    from .. import list_encoders

    if args.kernels:
        return _kernels(args, out)
    infos = list_encoders()
    if args.format == "json":
        dump_json([_info_json(i) for i in infos], out)
        return 0
    rows = [(i.name if i.name is not None else f"({i.plugin.name})", i.kind or "-",
             i.plugin.label, i.status, i.summary or "") for i in infos]
    notes = [i.error if i.status != "ok" else None for i in infos]
    out.write(table(("name", "kind", "plugin", "status", "summary"), rows, notes) + "\n")
    n_bad = sum(i.status != "ok" for i in infos)
    n_named = len({i.name for i in infos if i.name is not None})
    out.write(f"{n_named} encoder{'s' if n_named != 1 else ''}"
              + (f", {n_bad} row{'s' if n_bad != 1 else ''} not ok" if n_bad else "") + "\n")
    return 0


def _kernels(args: argparse.Namespace, out: TextIO) -> int:
    """``peregistry list --kernels``: every rotation kernel, in the order the core tries them."""
    from ..rope import kernels

    rows = kernels()
    if args.format == "json":
        dump_json([{"name": k.name, "status": k.status, "active": k.active, "error": k.error,
                    "priority": k.priority, "ulps": k.ulps,
                    "plugin": {"name": k.plugin.name, "distribution": k.plugin.distribution,
                               "version": k.plugin.version, "label": k.plugin.label}}
                   for k in rows], out)
        return 0
    out.write(table(("kernel", "plugin", "status"),
                    [(k.name, k.plugin.label, k.status) for k in rows],
                    [k.error for k in rows]) + "\n")
    n_on = sum(k.active for k in rows)
    out.write(f"{len(rows)} rotation kernel{'s' if len(rows) != 1 else ''}, {n_on} active"
              + ("" if rows else " (install one, e.g. pip install ./plugins/peregistry-rotary-c)")
              + "\n")
    return 0


COMMAND = Command(
    name="list",
    help="every registered encoder (or, with --kernels, rotation kernel), with its plugin and "
         "status",
    description="Every registered encoder: name, kind, plugin, status (ok, error, conflict, "
                "disabled) and summary (the encoder's summary attribute, by default the first "
                "line of its class docstring); plugins that failed to load are listed with "
                "their error.",
    add_arguments=_add_arguments,
    run=run,
)
