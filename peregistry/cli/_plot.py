"""``peregistry plot NAME ... -o FILE.png``: a picture of an encoder (:mod:`peregistry.plot`).

Required options the user does not give come from the encoder's own
:meth:`~peregistry.Encoder.example_options`; matplotlib is imported only here, when drawing.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from ._core import Command, UsageError, collect_options, fill_required, positive_int

#: The plot kinds, as in :data:`peregistry.plot.PLOTS` (listed here so that ``--help`` does not
#: import the plotting module).
PLOT_KINDS = ("heatmap", "decay", "angles", "bias", "ids")


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="the encoder's name")
    parser.add_argument("-o", "--output", metavar="FILE.png", required=True)
    parser.add_argument("--kind", choices=PLOT_KINDS,
                        help="the plot (default: the first that fits the encoder's kind)")
    parser.add_argument("--length", type=positive_int, metavar="N",
                        help="number of positions (default: the plot's own, 64 or 512)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of enc.init for learned encoders (default 0)")
    parser.add_argument("--convention", default="qwen2.5-vl",
                        help="peregistry.multimodal convention of --kind ids (default qwen2.5-vl)")
    parser.add_argument("--title", help="replace the generated title")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                        help="set an encoder option (also --NAME VALUE)")


def run(args: argparse.Namespace, extras: list[str], out: TextIO) -> int:
    """``peregistry plot NAME ... -o FILE.png``: a picture of the encoder."""
    from ..plot import PlotSettings, PlotUnavailable, plot_to_file
    from ..registry import default_registry

    cls = args.encoder_class
    options = fill_required(cls, collect_options(cls, args, extras, "plot"))
    enc = default_registry.get_encoder(cls.name, **options)
    settings = PlotSettings(length=args.length, seed=args.seed, convention=args.convention,
                            title=args.title)
    try:
        path = plot_to_file(enc, args.output, args.kind, settings)
    except PlotUnavailable as exc:
        raise UsageError(str(exc)) from None
    out.write(f"wrote {path} ({args.kind or 'default'} plot of {enc!r})\n")
    return 0


COMMAND = Command(
    name="plot",
    help="draw an encoder: table heatmap, decay, angles, bias, multi-axis ids",
    description="Build NAME with the given options (required ones get the encoder's example "
                "values, Encoder.example_options) and write a picture of it. Kinds: heatmap "
                "(absolute table, relative embeddings), decay (dot product against distance: "
                "absolute, rotary), angles (rotation angle per pair: rotary), bias (bias matrix "
                "per head), ids (M-RoPE ids of a text-image-text-video sequence: multi-axis "
                "rotary). Needs matplotlib (pip install 'peregistry[docs]').",
    epilog="Example: peregistry plot sinusoidal --dim 64 --kind decay -o decay.png",
    add_arguments=_add_arguments,
    run=run,
    encoder=True,
)
