"""Type stub of the optional C extension built from ``peregistry/_native/rotary.c``."""

from collections.abc import Sequence
from typing import Any

ISA: str

def rotate(x: int | Any, out: int | Any, cos: int | Any, sin: int | Any, xdtype: int,
           wdtype: int, dim: int, rotary_dim: int, interleaved: bool, shape: Sequence[int],
           cos_strides: Sequence[int], sin_strides: Sequence[int], threads: int,
           gomp_parallel: int = ..., /) -> None: ...
