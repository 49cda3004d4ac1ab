"""The ``peregistry`` command line: ``list``, ``show``, ``check``, ``plot`` and ``bench``.

::

    peregistry list [--format json]                      # every encoder, broken plugins included
    peregistry show sinusoidal                           # the options sinusoidal declares
    peregistry show sinusoidal --dim 8 --positions 2     # the vector of position 2
    peregistry show sinusoidal --dim 8 --positions 0:4 --backend torch --dtype float32
    peregistry check sinusoidal --backend numpy --option dim=32
    peregistry plot rotary --dim 128 --kind angles -o angles.png   # needs matplotlib
    peregistry bench rotary --backend torch --quick

Exit codes: 0 success; 1 a check failed (``check``) or the command could not finish; 2 a usage
error (unknown encoder, option or backend, a value that is not allowed), with the library's
message on stderr. No traceback is printed unless ``--traceback`` is given.

``import peregistry.cli`` and ``peregistry list`` import no array framework: NumPy and the chosen
backend are imported only by ``show`` (when it computes values) and ``check``.

The option flags of ``show`` are generated from the encoder class's declared options
(:attr:`peregistry.Encoder._option_specs`): ``--dim 8``, ``--rotary-dim 32`` (``--rotary_dim``
works too), ``--scaling '{"type": "linear", "factor": 2}'``; an option whose name collides with
one of ``show``'s own flags is reachable as ``--option NAME=VALUE``. Values are parsed by the
option's type: see :func:`parse_option_value`.

``show`` computes values by the encoder's *kind*, one small function per kind in
:data:`SHOW_BY_KIND`; a family that brings a new kind adds its function there.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

if TYPE_CHECKING:
    import numpy as np

    from ._options import Option
    from .backends._base import Backend
    from .encoders.base import Encoder
    from .registry import EncoderInfo
    from .testing import ReportRow

__all__ = ["SHOW_BY_KIND", "UsageError", "main", "parse_option_value", "parse_positions"]

PROG = "peregistry"
DEFAULT_BACKEND = "numpy"
DEFAULT_SHOW_POSITIONS = "0:4"

#: Values tried, in order, to fill a *required* option when ``check`` runs an encoder without
#: ``--option``: the first that the option accepts (its type, ``choices`` and ``check``) is used.
#: An Option carrying an ``example`` attribute overrides this table. ``tuple`` and ``dict``
#: options have no generic example: pass them with ``--option``.
EXAMPLE_VALUES: dict[type, tuple[Any, ...]] = {
    int: (64, 32, 16, 8, 4, 2, 1),
    float: (1.0, 0.5, 2.0, 10000.0),
    bool: (False, True),
    str: (),  # the first of the option's choices, if it has any
    tuple: (),
    dict: (),
}


class UsageError(Exception):
    """A mistake in the command line: printed without traceback, exit code 2."""


# -- parsing values -------------------------------------------------------------------------------
_TRUE_WORDS = {"1", "true", "yes", "on"}
_FALSE_WORDS = {"0", "false", "no", "off"}
_NONE_WORDS = {"none", "null"}
_TYPE_HELP: dict[type, str] = {
    int: "int",
    float: "float",
    str: "str",
    bool: "bool",
    tuple: "ints 1,2,3",
    dict: "JSON object",
}


def parse_option_value(owner: str, spec: Option, raw: str) -> Any:
    """Turn the command-line text ``raw`` into a value for option ``spec`` of encoder ``owner``.

    ``int``: ``8``; ``float``: ``1e4``; ``str``: as given; ``bool``: ``true``/``false`` (also
    ``1/0``, ``yes/no``, ``on/off``); ``tuple`` of ints: ``1,2,3`` (brackets optional, ``""``
    is empty); ``dict``: a JSON object. ``none``/``null`` means None for a nullable option.
    Only the text is interpreted here; whether the value is *allowed* is the encoder's business.

    :raises UsageError: naming the encoder, the option, the text and what is allowed.
    """
    text = raw.strip()

    def bad(extra: str = "") -> UsageError:
        return UsageError(f"{owner}: option {spec.name!r} must be {spec.allowed}, "
                          f"got {raw!r}{extra}")

    if spec.nullable and text.lower() in _NONE_WORDS:
        return None
    t = spec.type
    if t is bool:
        if text.lower() in _TRUE_WORDS:
            return True
        if text.lower() in _FALSE_WORDS:
            return False
        raise bad(" (write true or false)")
    if t is int:
        try:
            return int(text)
        except ValueError:
            raise bad() from None
    if t is float:
        try:
            return float(text)
        except ValueError:
            raise bad() from None
    if t is str:
        return raw
    if t is tuple:
        inner = text.strip("()[] ")
        if not inner:
            return ()
        try:
            return tuple(int(p) for p in inner.split(","))
        except ValueError:
            raise bad(" (write integers separated by commas, e.g. 1,2,3)") from None
    # dict
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise bad(f" (not valid JSON: {exc})") from None
    if not isinstance(value, dict):
        raise bad(" (write a JSON object, e.g. '{\"type\": \"linear\", \"factor\": 2.0}')")
    return value


def _parse_number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def parse_positions(spec: str) -> Any:
    """Positions from their command-line text, as a NumPy array.

    ``2`` → a scalar (0-d); ``0,1,2`` → a list; ``0:4`` (or ``0:10:2``) → a range, as Python's;
    ``0,1;2,3`` → rows, a 2-D array (for encoders whose positions are ``(..., 2)``). Numbers with
    a decimal point or exponent make a float array (for encoders continuous in position).

    :raises UsageError: if the text is none of these.
    """
    import numpy as np

    text = spec.strip()
    hint = ("--positions must be a number (2), a list (0,1,2), a range (0:4 or 0:10:2) or rows "
            f"(0,1;2,3); got {spec!r}")
    try:
        if ";" in text:
            rows = [[_parse_number(v) for v in row.split(",")] for row in text.split(";")]
            if len({len(r) for r in rows}) != 1:
                raise UsageError(f"{hint} (rows of different lengths)")
            values: Any = rows
        elif ":" in text:
            parts = [int(p) if p.strip() else None for p in text.split(":")]
            if len(parts) > 3:
                raise UsageError(hint)
            start, stop, step = ([*parts, None, None])[:3]
            if stop is None:
                raise UsageError(f"{hint} (a range needs an end)")
            values = list(range(start or 0, stop, 1 if step is None else step))
            if not values:
                raise UsageError(f"{hint} (the range is empty)")
        elif "," in text:
            values = [_parse_number(v) for v in text.split(",")]
        else:
            values = _parse_number(text)
    except ValueError:
        raise UsageError(hint) from None
    arr = np.asarray(values)
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        raise UsageError(f"{hint} (not finite)")
    return arr.astype(np.int64) if arr.dtype.kind in "iu" else arr.astype(np.float64)


def _flag(option_name: str) -> str:
    return "--" + option_name.replace("_", "-")


# -- argument parser ------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors go through :class:`UsageError` (so ``main`` returns 2)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}\n{self.format_usage().rstrip()}")


_SHOW_FLAGS = {"positions", "backend", "dtype", "format", "decimals", "seed", "option", "help"}


def _build_parser(show_class: type[Encoder] | None = None, *, first_pass: bool = False) -> _Parser:
    """The parser; with ``show_class``, ``show`` also gets that encoder's option flags.

    The ``first_pass`` parser only finds ``show``'s NAME: its ``--help`` is a plain flag, so
    the help can wait until the encoder's flags are added."""
    from . import __version__

    parser = _Parser(
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
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p_list = sub.add_parser("list", help="every registered encoder, with its plugin and status",
                            description="Every registered encoder: name, kind, plugin, status "
                                        "(ok, error, conflict, disabled); plugins that failed "
                                        "to load are listed with their error.",
                            allow_abbrev=False)
    p_list.add_argument("--format", choices=("text", "json"), default="text")

    p_show = sub.add_parser(
        "show", help="an encoder's options, or its values at some positions",
        description="Without options or --positions: the options NAME declares. Otherwise: "
                    "build NAME with the options and print its values at --positions "
                    f"(default {DEFAULT_SHOW_POSITIONS}) on --backend.",
        epilog="Example: peregistry show sinusoidal --dim 8 --positions 2",
        allow_abbrev=False,
        add_help=not first_pass,
    )
    if first_pass:  # find NAME only; --help waits for the encoder's flags
        p_show.add_argument("-h", "--help", action="store_true", dest="help",
                            help="show this help message and exit")
    p_show.add_argument("name", metavar="NAME", nargs="?", help="the encoder's name")
    p_show.add_argument("--positions", metavar="SPEC",
                        help="2 | 0,1,2 | 0:4 | 0:10:2 | 0,1;2,3 (rows)")
    p_show.add_argument("--backend", metavar="B", default=DEFAULT_BACKEND,
                        help="numpy (default), torch, jax, array_api_strict, or a plugin's")
    p_show.add_argument("--dtype", metavar="D",
                        help="output dtype: float16, bfloat16, float32, float64 "
                             "(default: the backend's default float dtype)")
    p_show.add_argument("--format", choices=("text", "json"), default="text")
    p_show.add_argument("--decimals", type=_non_negative_int, default=4, metavar="N",
                        help="decimals printed in text format (default 4)")
    p_show.add_argument("--seed", type=int, default=0,
                        help="seed of enc.init for learned encoders (default 0)")
    p_show.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                        help="set an option by name (same as --NAME VALUE)")
    if show_class is not None:
        group = p_show.add_argument_group(f"options of {show_class.name}")
        for key, spec in show_class._option_specs.items():
            if key in _SHOW_FLAGS:
                continue  # reachable as --option key=value
            flags = [_flag(key)] + ([f"--{key}"] if "_" in key else [])
            group.add_argument(*flags, dest=f"opt:{key}", metavar="VALUE",
                               default=argparse.SUPPRESS, help=_option_help(spec))

    p_check = sub.add_parser(
        "check", help="run the conformance suite and print its table",
        description="Run peregistry.testing.check_encoder for each NAME (default: every "
                    "registered encoder) on each --backend (default: PEREGISTRY_BACKENDS, or "
                    "every installed backend). Required options without --option get a small "
                    "example value (dim=64 and the like). Exit code 1 if anything failed.",
        allow_abbrev=False,
    )
    p_check.add_argument("names", metavar="NAME", nargs="*")
    p_check.add_argument("--backend", action="append", default=[], metavar="B",
                         help="a backend (repeatable, or comma-separated)")
    p_check.add_argument("--option", action="append", default=[], metavar="[ENCODER:]K=V",
                         help="an option for every selected encoder that declares it, or only "
                              "for ENCODER (repeatable)")

    p_plot = sub.add_parser(
        "plot", help="draw an encoder: table heatmap, decay, angles, bias, M-RoPE ids",
        description="Build NAME with the given options (required ones get example values: "
                    "dim=64, num_heads=8, M-RoPE sections in Qwen2-VL's proportions) and write "
                    "a picture of it. Kinds: heatmap (absolute table, relative embeddings), "
                    "decay (dot product against distance: absolute, rotary), angles (rotation "
                    "angle per pair: rotary), bias (bias matrix per head), ids (M-RoPE ids of a "
                    "text-image-text-video sequence). Needs matplotlib "
                    "(pip install 'peregistry[docs]').",
        epilog="Example: peregistry plot sinusoidal --dim 64 --kind decay -o decay.png",
        allow_abbrev=False,
    )
    p_plot.add_argument("name", metavar="NAME", help="the encoder's name")
    p_plot.add_argument("-o", "--output", metavar="FILE.png", required=True)
    p_plot.add_argument("--kind", choices=("heatmap", "decay", "angles", "bias", "ids"),
                        help="the plot (default: the first that fits the encoder's kind)")
    p_plot.add_argument("--length", type=_positive_int, metavar="N",
                        help="number of positions (default: the plot's own, 64 or 512)")
    p_plot.add_argument("--seed", type=int, default=0,
                        help="seed of enc.init for learned encoders (default 0)")
    p_plot.add_argument("--convention", default="qwen2.5-vl",
                        help="peregistry.multimodal convention of --kind ids (default qwen2.5-vl)")
    p_plot.add_argument("--title", help="replace the generated title")
    p_plot.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                        help="set an encoder option (also --NAME VALUE)")

    p_bench = sub.add_parser(
        "bench", help="time encoders against hand-written code and a memory copy",
        description="For each NAME (default: every benchmarked encoder) and --backend (default: "
                    "every installed one of numpy, torch, jax, array_api_strict), time the encoder, a plain "
                    "hand-written implementation in the same framework and a copy of the "
                    "output's bytes, interleaved in one run; print medians and ratios.",
        allow_abbrev=False,
    )
    p_bench.add_argument("names", metavar="NAME", nargs="*")
    p_bench.add_argument("--backend", action="append", default=[], metavar="B",
                         help="numpy, torch, jax or array_api_strict (repeatable, or comma-separated)")
    p_bench.add_argument("--quick", action="store_true",
                         help="small shapes and few repetitions (a smoke test)")
    p_bench.add_argument("--reps", type=_positive_int, metavar="N",
                         help="timed repetitions (default 25, --quick 5)")
    p_bench.add_argument("--progress", action="store_true",
                         help="draw the progress bar on stderr even when it is not a terminal")
    return parser


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def _option_help(spec: Option) -> str:
    default = "required" if spec.required else f"default {spec.default!r}"
    doc = f"{spec.doc}; " if spec.doc else ""
    return f"{doc}{_TYPE_HELP[spec.type]}, {spec.allowed} ({default})".replace("%", "%%")


# -- output helpers -------------------------------------------------------------------------------
def _table(head: Sequence[str], rows: Iterable[Sequence[str]],
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


def _dump_json(value: Any, out: TextIO) -> None:
    out.write(json.dumps(_jsonable(value), indent=2) + "\n")


# -- list -----------------------------------------------------------------------------------------
def _info_json(info: EncoderInfo) -> dict[str, Any]:
    p = info.plugin
    return {
        "name": info.name, "kind": info.kind, "family": info.family, "summary": info.summary,
        "status": info.status, "error": info.error,
        "plugin": {"name": p.name, "distribution": p.distribution, "version": p.version,
                   "label": p.label, "status": p.status, "error": p.error},
    }


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    """``peregistry list``: every encoder and every broken plugin (exit 0 even then)."""
    from . import list_encoders

    infos = list_encoders()
    if args.format == "json":
        _dump_json([_info_json(i) for i in infos], out)
        return 0
    rows = [(i.name if i.name is not None else f"({i.plugin.name})", i.kind or "-",
             i.plugin.label, i.status) for i in infos]
    notes = [i.error if i.status != "ok" else None for i in infos]
    out.write(_table(("name", "kind", "plugin", "status"), rows, notes) + "\n")
    n_bad = sum(i.status != "ok" for i in infos)
    n_named = len({i.name for i in infos if i.name is not None})
    out.write(f"{n_named} encoder{'s' if n_named != 1 else ''}"
              + (f", {n_bad} row{'s' if n_bad != 1 else ''} not ok" if n_bad else "") + "\n")
    return 0


# -- show -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShowContext:
    """What a kind's show function gets: the positions on the backend, and the user's choices.

    :ivar backend: the adapter chosen with ``--backend``.
    :ivar positions: the positions as an array of that backend.
    :ivar dtype: the ``--dtype`` name, or None for the backend's default.
    :ivar seed: the seed for ``enc.init`` of learned encoders.
    """

    backend: Backend
    positions: Any
    dtype: str | None
    seed: int

    def params(self, enc: Encoder) -> dict[str, Any] | None:
        """Fresh params for a learned encoder (``enc.init`` on the backend), else None."""
        if not enc.learned:
            return None
        return enc.init(self.backend.native(), seed=self.seed, dtype=self.dtype)


#: A kind's show function: the encoder and context in, named result arrays (of the backend) out.
ShowFunction = Callable[["Encoder", ShowContext], dict[str, Any]]


def _show_absolute(enc: Encoder, ctx: ShowContext) -> dict[str, Any]:
    """``enc.encode(positions)``."""
    return {"encode": enc.encode(ctx.positions, params=ctx.params(enc),  # type: ignore[attr-defined]
                                 dtype=ctx.dtype)}


def _show_rotary(enc: Encoder, ctx: ShowContext) -> dict[str, Any]:
    """``enc.cos_sin(positions)`` (attention factor included). 1-D positions are text tokens:
    multi-axis encoders (M-RoPE) get them on every axis (``enc.text_positions``)."""
    positions = ctx.positions
    if len(positions.shape) == 1:
        positions = enc.text_positions(positions)  # type: ignore[attr-defined]
    cos, sin = enc.cos_sin(positions, dtype=ctx.dtype)  # type: ignore[attr-defined]
    return {"cos": cos, "sin": sin}


def _show_bias(enc: Encoder, ctx: ShowContext) -> dict[str, Any]:
    """``enc.bias(positions, positions)``: the (num_heads, Q, K) bias among the positions."""
    return {"bias": enc.bias(ctx.positions, ctx.positions,  # type: ignore[attr-defined]
                             params=ctx.params(enc), dtype=ctx.dtype)}


def _show_relative(enc: Encoder, ctx: ShowContext) -> dict[str, Any]:
    """``enc.embed(positions, positions)``: the (Q, K, dim) embeddings among the positions."""
    return {"embed": enc.embed(ctx.positions, ctx.positions,  # type: ignore[attr-defined]
                               params=ctx.params(enc), dtype=ctx.dtype)}


#: ``show`` by encoder kind: one function per kind.
SHOW_BY_KIND: dict[str, ShowFunction] = {
    "absolute": _show_absolute,
    "rotary": _show_rotary,
    "bias": _show_bias,
    "relative-embedding": _show_relative,
}


def _describe_options(cls: type[Encoder], info: EncoderInfo | None, fmt: str,
                      out: TextIO) -> int:
    from ._options import REQUIRED

    specs = cls._option_specs
    if fmt == "json":
        _dump_json({
            "name": cls.name, "kind": cls.kind, "family": cls.family, "summary": cls.summary,
            "plugin": info.plugin.label if info is not None else None,
            "options": [{"name": k, "flag": _flag(k), "type": s.type.__name__,
                         "required": s.required,
                         "default": None if s.default is REQUIRED else s.default,
                         "allowed": s.allowed, "choices": s.choices, "nullable": s.nullable,
                         "doc": s.doc} for k, s in specs.items()],
        }, out)
        return 0
    plugin = f" — {info.plugin.label}" if info is not None else ""
    out.write(f"{cls.name} ({cls.kind}){plugin}\n")
    if cls.summary:
        out.write(f"{cls.summary}\n")
    out.write("\n")
    if not specs:
        out.write("no options\n")
    else:
        rows = []
        for k, s in specs.items():
            flag = _flag(k) if k not in _SHOW_FLAGS else f"--option {k}=VALUE"
            default = "(required)" if s.required else repr(s.default)
            rows.append((flag, _TYPE_HELP[s.type], default, s.allowed, s.doc))
        out.write(_table(("option", "type", "default", "allowed", "doc"), rows) + "\n")
    example = " ".join(f"{_flag(k)} {_example_text(s)}" for k, s in specs.items() if s.required)
    out.write(f"\nvalues: peregistry show {cls.name}{' ' + example if example else ''} "
              f"--positions 0:4\n")
    return 0


def _example_text(spec: Option) -> str:
    value = _example_value(spec)
    if value is _NO_EXAMPLE:
        return "VALUE"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return "'" + json.dumps(value) + "'"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _collect_show_options(cls: type[Encoder], args: argparse.Namespace,
                          extras: list[str]) -> dict[str, Any]:
    """Options from the generated flags, ``--option``, and unknown ``--flags`` (left for the
    encoder to reject, so the message is the library's)."""
    specs = cls._option_specs
    options: dict[str, Any] = {}
    for key in specs:
        raw = getattr(args, f"opt:{key}", None)
        if raw is not None:
            options[key] = parse_option_value(cls.name, specs[key], raw)
    for item in args.option:
        key, raw = _split_assignment(item, "--option")
        key = key.replace("-", "_")
        options[key] = parse_option_value(cls.name, specs[key], raw) if key in specs else raw
    i = 0
    while i < len(extras):
        token = extras[i]
        if not token.startswith("--") or len(token) == 2:
            raise UsageError(f"unrecognized argument {token!r} for 'show {cls.name}'; "
                             f"see 'peregistry show {cls.name} --help'")
        key, sep, raw = token[2:].partition("=")
        if not sep:
            raw = extras[i + 1] if i + 1 < len(extras) else ""
            i += 1
        options[key.replace("-", "_")] = raw
        i += 1
    return options


def _split_assignment(item: str, what: str) -> tuple[str, str]:
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"{what} expects NAME=VALUE, got {item!r}")
    return key.strip(), raw


def _backend(name: str) -> Backend:
    from .registry import default_registry

    backend = default_registry.backend(name)  # ValueError naming the known backends
    if not backend.is_installed():
        extra = {"array_api_strict": "strict"}.get(name, name)
        raise UsageError(f"backend {name!r} is not installed (pip install 'peregistry[{extra}]')")
    return backend


def _format_vector(values: np.ndarray[Any, Any], decimals: int) -> str:
    def one(v: float) -> str:
        s = f"{v:.{decimals}f}"
        return s[1:] if s.startswith("-") and float(s) == 0 else s  # no "-0.0000"

    if values.ndim == 1:
        return "[" + ", ".join(one(float(v)) for v in values) + "]"
    return "[" + ",\n ".join(_format_vector(v, decimals) for v in values) + "]"


def _format_result(values: np.ndarray[Any, Any], positions: np.ndarray[Any, Any],
                   decimals: int) -> list[str]:
    """One line per position (labelled by it when the shapes line up), or the vector alone."""
    import numpy as np

    if values.ndim <= 1:
        return [_format_vector(np.atleast_1d(values), decimals)]
    lead = values.shape[:-1]
    lines = []
    for idx in np.ndindex(*lead):
        if positions.shape == lead:
            p = positions[idx]
            label = str(int(p)) if positions.dtype.kind in "iu" else repr(float(p))
        elif positions.ndim == len(lead) + 1 and positions.shape[:-1] == lead:
            label = "(" + ", ".join(str(v) for v in positions[idx].tolist()) + ")"
        else:
            label = str(idx[0] if len(idx) == 1 else idx)
        lines.append(f"{label}: {_format_vector(values[idx], decimals)}")
    return lines


def cmd_show(args: argparse.Namespace, extras: list[str], cls: type[Encoder],
             info: EncoderInfo | None, out: TextIO) -> int:
    """``peregistry show NAME ...``: the options of NAME, or its values at ``--positions``."""
    from .registry import default_registry

    options = _collect_show_options(cls, args, extras)
    if not options and args.positions is None:
        return _describe_options(cls, info, args.format, out)
    enc = default_registry.get_encoder(cls.name, **options)  # the library validates
    show = SHOW_BY_KIND.get(enc.kind)
    if show is None:
        sys.stderr.write(
            f"{PROG}: 'show' for {enc.kind} encoders arrives with the {enc.kind} family; "
            f"it shows these kinds so far: {', '.join(SHOW_BY_KIND)}. "
            f"'peregistry show {enc.name}' lists {enc.name}'s options.\n"
        )
        return 1
    backend = _backend(args.backend)
    positions_np = parse_positions(args.positions or DEFAULT_SHOW_POSITIONS)
    ctx = ShowContext(backend=backend, positions=backend.from_numpy(positions_np),
                      dtype=args.dtype, seed=args.seed)
    results = show(enc, ctx)
    first = next(iter(results.values()))
    dtype = backend.dtype_name(first.dtype)
    arrays = {k: backend.to_numpy(v) for k, v in results.items()}
    if args.format == "json":
        _dump_json({
            "encoder": enc.name, "kind": enc.kind, "options": enc.options, "repr": repr(enc),
            "backend": backend.name, "dtype": dtype, "positions": positions_np.tolist(),
            "learned": enc.learned, "seed": args.seed if enc.learned else None,
            "results": {k: {"shape": list(v.shape), "values": v.astype(float).tolist()}
                        for k, v in arrays.items()},
        }, out)
        return 0
    seed = f"  params=init(seed={args.seed})" if enc.learned else ""
    out.write(f"{enc!r}  backend={backend.name}  dtype={dtype}{seed}\n")
    for key, arr in arrays.items():
        if len(arrays) > 1:
            out.write(f"{key}: shape {tuple(arr.shape)}\n")
        for line in _format_result(arr, positions_np, args.decimals):
            out.write(line + "\n")
    return 0


# -- check ----------------------------------------------------------------------------------------
class _NoExample:
    def __repr__(self) -> str:
        return "<no example>"


_NO_EXAMPLE: Any = _NoExample()


def _example_value(spec: Option) -> Any:
    """A value ``spec`` accepts, for filling a required option; ``_NO_EXAMPLE`` if none."""
    explicit = getattr(spec, "example", None)
    candidates: Iterable[Any] = (explicit,) if explicit is not None else ()
    if spec.type is str and spec.choices:
        candidates = (*candidates, spec.choices[0])
    for value in (*candidates, *EXAMPLE_VALUES[spec.type]):
        try:
            spec.convert("?", value)
        except (TypeError, ValueError):
            continue
        return value
    return _NO_EXAMPLE


def _check_options(cls: type[Encoder], given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` plus example values for the required options it lacks.

    :raises UsageError: if a required option has no example (a tuple or dict option, or one
        whose ``check`` rejects every candidate).
    """
    options = dict(given)
    lacking = []
    for key, spec in cls._option_specs.items():
        if spec.required and key not in options:
            value = _example_value(spec)
            if value is _NO_EXAMPLE:
                lacking.append(f"{key!r} ({spec.allowed})")
            else:
                options[key] = value
    if lacking:
        raise UsageError(f"cannot fill required option{'s' if len(lacking) > 1 else ''} "
                         f"{', '.join(lacking)} with an example value; pass "
                         f"--option {cls.name}:NAME=VALUE")
    return options


def cmd_check(args: argparse.Namespace, out: TextIO) -> int:
    """``peregistry check``: the conformance suite as a table; exit 1 if anything failed."""
    from . import list_encoders
    from .registry import default_registry
    from .testing import ReportRow, check_encoder, format_table

    names: list[str] = list(dict.fromkeys(args.names))
    if not names:
        names = list(dict.fromkeys(i.name for i in list_encoders() if i.name is not None))
    classes: dict[str, type[Encoder] | Exception] = {}
    for name in names:
        try:
            classes[name] = default_registry.encoder_class(name)
        except LookupError as exc:
            if args.names:  # a name the user typed: a usage error
                raise
            classes[name] = exc
        except Exception as exc:  # a conflict or broken plugin: a row of the table
            classes[name] = exc

    per_encoder: dict[str, dict[str, Any]] = {n: {} for n in names}
    for item in args.option:
        key, raw = _split_assignment(item, "--option")
        target, colon, key = key.rpartition(":") if ":" in key else ("", "", key)
        key = key.replace("-", "_")
        targets = [target] if colon else names
        if colon and target not in per_encoder:
            raise UsageError(f"--option {item!r} names encoder {target!r}, which is not being "
                             f"checked ({', '.join(names)})")
        used = False
        for n in targets:
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

    chosen = [b.strip() for item in args.backend for b in item.split(",") if b.strip()]
    for b in chosen:
        _backend(b)  # unknown or not installed: a usage error naming the known ones
    backends = ",".join(dict.fromkeys(chosen)) or None
    rows: list[ReportRow] = []
    for name in names:
        cls = classes[name]
        if isinstance(cls, Exception):
            rows.append(ReportRow(name, "-", "(load)", "error", str(cls)))
            continue
        try:
            options = _check_options(cls, per_encoder[name])
            enc = default_registry.get_encoder(name, **options)
        except (UsageError, TypeError, ValueError) as exc:
            if per_encoder[name]:  # the user's --option values: a usage error
                raise UsageError(str(exc)) from exc
            rows.append(ReportRow(name, "-", "(build)", "error", str(exc)))
            continue
        rows.extend(check_encoder(enc, backends=backends).rows)
    out.write(format_table(rows) + "\n")
    return 0 if all(r.status in ("passed", "xfail") for r in rows) else 1


# -- plot -----------------------------------------------------------------------------------------
#: Values ``plot`` gives required options before :data:`EXAMPLE_VALUES` (readable pictures).
PLOT_EXAMPLES: dict[str, Any] = {"num_heads": 8, "dim": 64, "num_positions": 64,
                                 "height": 8, "width": 8, "max_distance": 16}


def _plot_options(cls: type[Encoder], given: dict[str, Any]) -> dict[str, Any]:
    """``given`` with the required options it lacks filled for a picture; M-RoPE ``sections``
    in Qwen2-VL's proportions (16, 24, 24 of 64 pairs) for ``dim`` (default 128)."""
    specs = cls._option_specs
    options = dict(given)
    if "sections" in specs and specs["sections"].required and "sections" not in options:
        dim = int(options.setdefault("dim", 128))
        half = dim // 2
        t = half // 4
        h = (half - t) // 2
        options["sections"] = (t, h, half - t - h)
    for key, value in PLOT_EXAMPLES.items():
        if key in specs and specs[key].required and key not in options:
            options[key] = value
    return _check_options(cls, options)


def cmd_plot(args: argparse.Namespace, extras: list[str], out: TextIO) -> int:
    """``peregistry plot NAME ... -o FILE.png``: a picture of the encoder."""
    from .registry import default_registry

    cls = default_registry.encoder_class(args.name)
    specs = cls._option_specs
    options = _collect_show_options(cls, args, extras)
    for key, value in list(options.items()):
        if isinstance(value, str) and key in specs and specs[key].type is not str:
            options[key] = parse_option_value(cls.name, specs[key], value)
    enc = default_registry.get_encoder(cls.name, **_plot_options(cls, options))
    from .plot import PlotSettings, PlotUnavailable, plot_to_file

    settings = PlotSettings(length=args.length, seed=args.seed, convention=args.convention,
                            title=args.title)
    try:
        path = plot_to_file(enc, args.output, args.kind, settings)
    except PlotUnavailable as exc:
        raise UsageError(str(exc)) from None
    out.write(f"wrote {path} ({args.kind or 'default'} plot of {enc!r})\n")
    return 0


# -- bench ----------------------------------------------------------------------------------------
def cmd_bench(args: argparse.Namespace, out: TextIO) -> int:
    """``peregistry bench [NAME...] [--backend B] [--quick]``: the table of medians and ratios."""
    from .bench import format_bench_table, run_bench, stderr_if_tty

    backends = [b.strip() for item in args.backend for b in item.split(",") if b.strip()]
    try:
        rows = run_bench(args.names or None, backends or None, quick=args.quick, reps=args.reps,
                         progress=stderr_if_tty(args.progress))
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    out.write(format_bench_table(rows) + "\n")
    out.write("ours / hand-written and ours / copy are ratios of medians measured interleaved "
              "in this run (lower is faster).\n")
    from .backends._kernel import kernel_isa, kernel_status

    out.write(f"native rotation kernel (torch CPU eager): {kernel_status()}"
              f"{'' if kernel_isa() == '-' else ', ' + kernel_isa()}\n")
    return 0


# -- main -----------------------------------------------------------------------------------------
def _show_class(parser: _Parser, argv: list[str]) -> tuple[type[Encoder] | None,
                                                           EncoderInfo | None]:
    """The encoder class ``show`` is about (first pass over the arguments), or None."""
    from . import list_encoders
    from .registry import default_registry

    first, _ = parser.parse_known_args(argv)
    if first.command != "show" or first.name is None:
        return None, None
    cls = default_registry.encoder_class(first.name)
    info = next((i for i in list_encoders() if i.name == cls.name), None)
    return cls, info


def _run(argv: list[str], out: TextIO) -> int:
    from .errors import PluginError

    try:
        cls, info = _show_class(_build_parser(first_pass=True), argv)
        parser = _build_parser(cls)
        args, extras = parser.parse_known_args(argv)
        if args.command is None:
            parser.print_help(out)
            return 0
        if args.command == "show":
            if args.name is None:
                raise UsageError("show needs an encoder NAME; 'peregistry list' shows them")
            assert cls is not None
            return cmd_show(args, extras, cls, info, out)
        if args.command == "plot":
            return cmd_plot(args, extras, out)
        if extras:
            parser.parse_args(argv)  # reports the unrecognized arguments
        if args.command == "bench":
            return cmd_bench(args, out)
        if args.command == "list":
            return cmd_list(args, out)
        return cmd_check(args, out)
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
        if traceback:
            raise
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except Exception as exc:
        if traceback:
            raise
        sys.stderr.write(f"{PROG}: error: {type(exc).__name__}: {exc}\n"
                         f"(run with --traceback for details)\n")
        return 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
