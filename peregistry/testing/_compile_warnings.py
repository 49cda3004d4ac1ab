"""Which warnings a compiled call must not emit. A compiler's own notice about how it traced a
function (Dynamo's "traces through a ``functools.lru_cache``-wrapped function", which
``array_api_compat.array_namespace`` triggers) is not a fault of the encoder; a notice that the
graph broke, that the function will be compiled again, or any warning from elsewhere (a dtype
silently narrowed, an encoder's own) is.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Words of a compiler notice that mean the compiled program is not one graph compiled once.
_FAULT = re.compile(r"graph.?break|recompil|fall(s|ing)? back to eager|skipping frame|"
                    r"cache_size_limit|recompile_limit|not traceable|unsupported", re.IGNORECASE)
#: Where the compilers' notices come from (torch.compile's Dynamo).
_COMPILER_DIR = "/torch/_dynamo/"


def is_fault(w: warnings.WarningMessage) -> bool:
    """Whether ``w`` fails a "compiles without warnings" check (see the module docstring)."""
    from_compiler = _COMPILER_DIR in Path(w.filename).as_posix()
    return not from_compiler or bool(_FAULT.search(str(w.message)))


def describe(faults: list[warnings.WarningMessage]) -> str:
    """The faults as ``Category: message (file:line)``, the first three."""
    return "; ".join(f"{w.category.__name__}: {str(w.message)[:300]} "
                     f"({Path(w.filename).name}:{w.lineno})" for w in faults[:3])


def run_compiled(call: Callable[[], Any]) -> tuple[Any, list[warnings.WarningMessage]]:
    """``call()`` with every warning recorded (none raised, whatever the caller's filters, so
    that a compiler's notice cannot abort a trace), and the faults among them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    return result, [w for w in caught if is_fault(w)]


def reissue(faults: list[warnings.WarningMessage]) -> None:
    """Warn the faults again, for the caller's filters to judge (compiler notices dropped)."""
    for w in faults:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
