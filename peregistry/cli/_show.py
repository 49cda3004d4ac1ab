"""``peregistry show NAME``: the options an encoder declares, or its values at some positions.

Values are computed by the encoder's *kind*, one small function per kind in
:data:`SHOW_BY_KIND`; a family that brings a new kind adds its function there. NumPy and the
chosen backend are imported only when values are computed.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from ._core import (
    DEFAULT_BACKEND,
    PROG,
    Command,
    UsageError,
    backend,
    collect_options,
    dump_json,
    flag,
    int_at_most,
    one_line,
    table,
)

if TYPE_CHECKING:
    import numpy as np

    from ..backends._base import Backend
    from ..encoders.base import Encoder
    from ..registry import EncoderInfo

__all__ = ["SHOW_BY_KIND", "ShowContext", "parse_positions"]

DEFAULT_SHOW_POSITIONS = "0:4"


# -- positions ------------------------------------------------------------------------------------
#: The most positions ``--positions`` may name: 10**7 int64 positions are 80 MB, and the values
#: of a small encoder at them a few hundred MB more; beyond that a typo (``0:1000000000``)
#: would take the machine down instead of printing something.
MAX_POSITIONS = 10_000_000
#: The most values ``show`` computes and prints (the values at one position, found by computing
#: them, times the number of positions, or its square for :data:`PAIRWISE_KINDS`): 10**7
#: values are 80 MB in float64 and some 100 MB of text.
MAX_VALUES = 10_000_000
#: The most ``--decimals``: float64 has 17 significant digits; more would only print zeros (and
#: ``--decimals 1000000000`` a gigabyte per value).
MAX_DECIMALS = 30
#: Kinds whose values are among every pair of positions (``bias(q, k)``, ``embed(q, k)``).
PAIRWISE_KINDS = frozenset({"bias", "relative-embedding"})

_INT64 = (-(2**63), 2**63 - 1)


def _too_many(spec: str, n: int, limit: int, why: str = "") -> UsageError:
    return UsageError(f"--positions {spec!r} names {n:,} positions; at most {limit:,} are "
                      f"allowed{why}")


def _parse_number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def _range(text: str, spec: str, hint: str) -> np.ndarray[Any, Any]:
    """``start:stop[:step]`` as an int64 array, built by NumPy (never a Python list) once its
    length is known to be at most :data:`MAX_POSITIONS`."""
    import numpy as np

    parts = [int(p) if p.strip() else None for p in text.split(":")]
    if len(parts) > 3:
        raise UsageError(hint)
    start, stop, step = ([*parts, None, None])[:3]
    if stop is None:
        raise UsageError(f"{hint} (a range needs an end)")
    try:
        r = range(start or 0, stop, 1 if step is None else step)
    except ValueError:
        raise UsageError(f"{hint} (the step is 0)") from None
    if not r:
        raise UsageError(f"{hint} (the range is empty)")
    if len(r) > MAX_POSITIONS:
        raise _too_many(spec, len(r), MAX_POSITIONS)
    if not (_INT64[0] <= min(r[0], r[-1]) and max(r[0], r[-1]) <= _INT64[1]):
        raise UsageError(f"{hint} (positions beyond the int64 range)")
    return np.arange(r.start, r.stop, r.step, dtype=np.int64)


def _position_values(text: str, spec: str, hint: str) -> Any:
    # Lists are bounded by the length of a command line, but counted anyway (cheaply, before
    # anything is parsed): ``--positions`` is also reachable from scripts.
    n = text.count(",") + text.count(";") + 1
    if n > MAX_POSITIONS:
        raise _too_many(spec, n, MAX_POSITIONS)
    if ";" in text:
        rows = [[_parse_number(v) for v in row.split(",")] for row in text.split(";")]
        if len({len(r) for r in rows}) != 1:
            raise UsageError(f"{hint} (rows of different lengths)")
        return rows
    if ":" in text:
        return _range(text, spec, hint)
    if "," in text:
        return [_parse_number(v) for v in text.split(",")]
    return _parse_number(text)


def parse_positions(spec: str) -> Any:
    """Positions from their command-line text, as a NumPy array.

    ``2`` → a scalar (0-d); ``0,1,2`` → a list; ``0:4`` (or ``0:10:2``) → a range, as Python's;
    ``0,1;2,3`` → rows, a 2-D array (for encoders whose positions are ``(..., 2)``). Numbers with
    a decimal point or exponent make a float array (for encoders continuous in position). At
    most :data:`MAX_POSITIONS` positions, in the int64 range.

    :raises UsageError: if the text is none of these, or names too many positions.
    """
    import numpy as np

    hint = ("--positions must be a number (2), a list (0,1,2), a range (0:4 or 0:10:2) or rows "
            f"(0,1;2,3); got {spec!r}")
    try:
        arr = np.asarray(_position_values(spec.strip(), spec, hint))
    except (ValueError, OverflowError):
        raise UsageError(hint) from None
    if arr.dtype.kind == "O":  # Python ints beyond int64
        raise UsageError(f"{hint} (positions beyond the int64 range)")
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        raise UsageError(f"{hint} (not finite)")
    return arr.astype(np.int64) if arr.dtype.kind in "iu" else arr.astype(np.float64)


# -- values by kind -------------------------------------------------------------------------------
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
    multi-axis encoders (M-RoPE) get them on every axis (``enc.text_positions``). A rotary
    encoder with learned params (the vision plugin's ``rope-mixed``) gets the params shown in
    the header (``cos_sin(..., params=)``)."""
    positions = ctx.positions
    if len(positions.shape) == 1:
        positions = enc.text_positions(positions)  # type: ignore[attr-defined]
    extra = {"params": ctx.params(enc)} if enc.learned else {}
    cos, sin = enc.cos_sin(positions, dtype=ctx.dtype, **extra)  # type: ignore[attr-defined]
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


def _check_size(show: ShowFunction, enc: Encoder, ctx: ShowContext, positions: Any,
                spec: str) -> None:
    """Refuse ``--positions`` whose values would pass :data:`MAX_VALUES`, before computing them:
    the values at the first position are computed and counted, then scaled up.

    Only 1-D positions (lists, ranges) are checked: rows (``0,1;2,3``) are typed by hand, and
    what their first row means depends on the encoder (one position, or one axis of M-RoPE).
    """
    if positions.ndim != 1 or positions.shape[0] < 2:
        return
    n = positions.shape[0]
    probe = ShowContext(backend=ctx.backend, positions=ctx.backend.from_numpy(positions[:1]),
                        dtype=ctx.dtype, seed=ctx.seed)
    per = sum(math.prod(v.shape) for v in show(enc, probe).values())
    pairwise = enc.kind in PAIRWISE_KINDS
    total = per * n * (n if pairwise else 1)
    if total > MAX_VALUES:
        each = f"{per:,} per pair of positions" if pairwise else f"{per:,} per position"
        raise UsageError(f"--positions {spec!r} names {n:,} positions, which give {total:,} "
                         f"values of {enc.name} ({each}); at most {MAX_VALUES:,} values are "
                         f"shown: name fewer positions")


# -- text -----------------------------------------------------------------------------------------
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


def _example_text(value: Any) -> str:
    import json

    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return "'" + json.dumps(value) + "'"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _describe_options(cls: type[Encoder], info: EncoderInfo | None, args: argparse.Namespace,
                      out: TextIO) -> int:
    from .._options import REQUIRED

    specs = cls._option_specs
    if args.format == "json":
        dump_json({
            "name": cls.name, "kind": cls.kind, "family": cls.family, "summary": cls.summary,
            "plugin": info.plugin.label if info is not None else None,
            "options": [{"name": k, "flag": flag(k), "type": s.type.__name__,
                         "required": s.required,
                         "default": None if s.default is REQUIRED else s.default,
                         "allowed": s.allowed, "choices": s.choices, "nullable": s.nullable,
                         "doc": s.doc} for k, s in specs.items()],
        }, out)
        return 0
    plugin = f" — {info.plugin.label}" if info is not None else ""
    out.write(one_line(f"{cls.name} ({cls.kind}){plugin}") + "\n")
    if cls.summary:
        out.write(one_line(cls.summary) + "\n")
    out.write("\n")
    if not specs:
        out.write("no options\n")
    else:
        rows = []
        for k, s in specs.items():
            name = flag(k) if k not in args.option_only else f"--option {k}=VALUE"
            default = "(required)" if s.required else repr(s.default)
            rows.append((name, s.syntax, default, s.allowed, s.doc))
        out.write(table(("option", "type", "default", "allowed", "doc"), rows) + "\n")
    examples = cls.example_options()
    example = " ".join(f"{flag(k)} {_example_text(examples[k]) if k in examples else 'VALUE'}"
                       for k, s in specs.items() if s.required)
    out.write(f"\nvalues: peregistry show {cls.name}{' ' + example if example else ''} "
              f"--positions 0:4\n")
    return 0


# -- the command ----------------------------------------------------------------------------------
def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", nargs="?", help="the encoder's name")
    parser.add_argument("--positions", metavar="SPEC",
                        help="2 | 0,1,2 | 0:4 | 0:10:2 | 0,1;2,3 (rows); at most "
                             f"{MAX_POSITIONS:,} positions and {MAX_VALUES:,} values shown "
                             "(bias and relative-embedding values grow with positions "
                             "squared)")
    parser.add_argument("--backend", metavar="B", default=DEFAULT_BACKEND,
                        help="numpy (default), torch, jax, array_api_strict, or a plugin's")
    parser.add_argument("--dtype", metavar="D",
                        help="output dtype: float16, bfloat16, float32, float64 "
                             "(default: the backend's default float dtype)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--decimals", type=int_at_most(MAX_DECIMALS, positive=False),
                        default=4, metavar="N",
                        help=f"decimals printed in text format (default 4, at most "
                             f"{MAX_DECIMALS})")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of enc.init for learned encoders (default 0)")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                        help="set an option by name (same as --NAME VALUE)")
    parser.add_argument("--hf-config", metavar="PATH",
                        help="instead of NAME and options: the encoder of a Hugging Face "
                             "model, from its config.json (peregistry.from_hf_config)")
    parser.add_argument("--layer-type", metavar="T",
                        help="with --hf-config: the layer type (sliding_attention, T5's "
                             "encoder/decoder, ...) or a layer index, when the layers differ")


def _write_values(enc: Encoder, arrays: dict[str, Any], positions: Any, where: tuple[str, str],
                  args: argparse.Namespace, out: TextIO) -> None:
    backend_name, dtype = where
    if args.format == "json":
        dump_json({
            "encoder": enc.name, "kind": enc.kind, "options": enc.options, "repr": repr(enc),
            "backend": backend_name, "dtype": dtype, "positions": positions.tolist(),
            "learned": enc.learned, "seed": args.seed if enc.learned else None,
            "results": {k: {"shape": list(v.shape), "values": v.astype(float).tolist()}
                        for k, v in arrays.items()},
        }, out)
        return
    seed = f"  params=init(seed={args.seed})" if enc.learned else ""
    out.write(f"{enc!r}  backend={backend_name}  dtype={dtype}{seed}\n")
    for key, arr in arrays.items():
        if len(arrays) > 1:
            out.write(f"{key}: shape {tuple(arr.shape)}\n")
        for line in _format_result(arr, positions, args.decimals):
            out.write(line + "\n")


def _from_hf_config(args: argparse.Namespace, extras: list[str]) -> Encoder:
    """The encoder of ``--hf-config PATH`` (a config.json) and ``--layer-type``."""
    import json

    from ..hf_config import ConfigError, from_hf_config

    if args.name is not None or extras or args.option:
        given = args.name or " ".join([*extras, *(f"--option {o}" for o in args.option)])
        raise UsageError(f"--hf-config gives the encoder and its options; got also {given!r}")
    try:
        with open(args.hf_config, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--hf-config {args.hf_config!r}: cannot read a JSON config: "
                         f"{exc}") from None
    if not isinstance(config, dict):
        raise UsageError(f"--hf-config {args.hf_config!r}: expected a JSON object, got "
                         f"{type(config).__name__}")
    layer: str | int | None = args.layer_type
    if isinstance(layer, str) and layer.lstrip("-").isdigit():
        layer = int(layer)
    try:
        return from_hf_config(config, layer_type=layer)
    except ConfigError as exc:  # its advice as this command spells it: --layer-type
        raise type(exc)(_cli_spelling(str(exc))) from exc


def _cli_spelling(message: str) -> str:
    """A ``from_hf_config`` message with its keyword ``layer_type=`` spelled as the option
    ``--layer-type`` (``pass layer_type='encoder' or 'decoder'``: ``pass --layer-type encoder
    or decoder``)."""
    message = re.sub(r"\blayer_type='([\w.-]+)' or '([\w.-]+)'", r"--layer-type \1 or \2",
                     message)
    message = re.sub(r"\blayer_type='([\w.-]+)'", r"--layer-type \1", message)
    return re.sub(r"\blayer_type(?:= ?| )", "--layer-type ", message)


def run(args: argparse.Namespace, extras: list[str], out: TextIO) -> int:
    """``peregistry show NAME ...``: the options of NAME, or its values at ``--positions``."""
    from .. import list_encoders
    from ..registry import default_registry

    if args.hf_config is not None:
        enc = _from_hf_config(args, extras)
    else:
        if args.layer_type is not None:
            raise UsageError("--layer-type goes with --hf-config")
        cls: type[Encoder] = args.encoder_class
        options = collect_options(cls, args, extras, "show")
        if not options and args.positions is None:
            info = next((i for i in list_encoders() if i.name == cls.name), None)
            return _describe_options(cls, info, args, out)
        enc = default_registry.get_encoder(cls.name, **options)  # the library validates
    show = SHOW_BY_KIND.get(enc.kind)
    if show is None:
        sys.stderr.write(
            f"{PROG}: 'show' for {enc.kind} encoders arrives with the {enc.kind} family; "
            f"it shows these kinds so far: {', '.join(SHOW_BY_KIND)}. "
            f"'peregistry show {enc.name}' lists {enc.name}'s options.\n"
        )
        return 1
    adapter = backend(args.backend)
    spec = args.positions or DEFAULT_SHOW_POSITIONS
    positions = parse_positions(spec)
    ctx = ShowContext(backend=adapter, positions=adapter.from_numpy(positions),
                      dtype=args.dtype, seed=args.seed)
    _check_size(show, enc, ctx, positions, spec)
    results = show(enc, ctx)
    dtype = adapter.dtype_name(next(iter(results.values())).dtype)
    arrays = {k: adapter.to_numpy(v) for k, v in results.items()}
    _write_values(enc, arrays, positions, (adapter.name, dtype), args, out)
    return 0


COMMAND = Command(
    name="show",
    help="an encoder's options, or its values at some positions",
    description="Without options or --positions: the options NAME declares. Otherwise: build "
                "NAME with the options and print its values at --positions (default "
                f"{DEFAULT_SHOW_POSITIONS}) on --backend.",
    epilog="Examples: peregistry show sinusoidal --dim 8 --positions 2; "
           "peregistry show --hf-config config.json --positions 0:4",
    add_arguments=_add_arguments,
    run=run,
    encoder=True,
)
