"""Type stub of the C extension built from ``_rotary.c`` (see its ``rotate.__doc__``)."""

from collections.abc import Sequence
from typing import Any

#: Any object exporting the buffer protocol (a NumPy array, a memoryview): collections.abc.Buffer
#: from Python 3.12 on, which NumPy's stubs implement only there.
_Buffer = Any

#: The code path chosen at import: "avx512", "avx2" or "baseline".
ISA: str
#: Workers of one call at most, the caller included.
MAX_THREADS: int
#: Elements per thread below which a call uses fewer threads.
MIN_ELEMENTS_PER_THREAD: int

def rotate(x: _Buffer, out: _Buffer, cos: _Buffer, sin: _Buffer, shape: Sequence[int],
           x_strides: Sequence[int], cos_strides: Sequence[int], sin_strides: Sequence[int],
           rotary_dim: int, interleaved: bool, xdtype: int, wdtype: int, threads: int, /) -> int:
    """Rotate the rows of ``x`` into ``out`` and return how many threads were asked to work;
    every extent is checked against each buffer first (ValueError or TypeError, never a read or
    write outside them)."""

def pool_threads() -> int:
    """Threads the module's pool has created so far (reused by every call)."""

def _set_isa(name: str, /) -> str:
    """Use code path ``name`` from now on; the previous one is returned (tests only)."""
