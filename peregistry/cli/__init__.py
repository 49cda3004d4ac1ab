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
message on stderr. No traceback is printed unless ``--traceback`` is given (which changes no exit
code).

One module per command (``_list``, ``_show``, ``_check``, ``_plot``, ``_bench``) declares a
:class:`~peregistry.cli._core.Command` and registers its own arguments; ``_main`` builds the
parser from them. The encoder commands (``show``, ``plot``) get a flag per option the encoder
declares (:attr:`peregistry.Encoder._option_specs`): ``--dim 8``, ``--rotary-dim 32``
(``--rotary_dim`` works too), ``--scaling '{"type": "linear", "factor": 2}'``; an option whose name
collides with one of the command's own flags is reachable as ``--option NAME=VALUE``. Values are
parsed by the option's own declaration (:meth:`peregistry.Option.parse`), and required options
left out get the encoder's :meth:`~peregistry.Encoder.example_options`: no encoder is special.

``import peregistry.cli`` and ``peregistry list`` import no array framework: NumPy and the chosen
backend are imported only by ``show`` (when it computes values), ``check``, ``plot`` and ``bench``.
"""

from __future__ import annotations

from .._options import EXAMPLE_CANDIDATES as EXAMPLE_VALUES
from ._core import UsageError, parse_option_value
from ._main import COMMANDS, build_parser, main
from ._show import SHOW_BY_KIND, ShowContext, parse_positions

__all__ = ["COMMANDS", "EXAMPLE_VALUES", "SHOW_BY_KIND", "ShowContext", "UsageError",
           "build_parser", "main", "parse_option_value", "parse_positions"]
