"""Type stub of the optional C extension built from ``peregistry/_native/rotary.c``."""

from collections.abc import Sequence

HAVE_FLOAT16: int

def rotate(x: int, out: int, cos: int, sin: int, xdtype: int, wdtype: int, dim: int,
           rotary_dim: int, interleaved: bool, shape: Sequence[int], cos_strides: Sequence[int],
           sin_strides: Sequence[int], threads: int, /) -> None: ...
