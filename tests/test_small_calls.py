"""The shortcuts that cut the fixed cost of small calls (issue 17) give the same bits as the
computation they replace, on every backend (``PEREGISTRY_BACKENDS``).

* ``transformer-xl`` at integer positions computes one angle per distance and gathers; the
  same positions as floats take the direct path (one angle per pair), and ``q - k`` is exact in
  either, so the two must agree bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import peregistry as per


def _as_numpy(backend: Any, a: Any) -> Any:
    return backend.to_numpy(a).astype(np.float64)


@pytest.mark.parametrize("dim", [2, 6, 128])
@pytest.mark.parametrize(("q", "k"), [
    (np.arange(37), np.arange(50)),                      # a table of 86 distances, 1850 pairs
    (np.arange(64) + 1000, np.arange(64) + 990),         # shifted
    (np.array([[3, 9, 4, 4, 0, 7, 1, 2]]), np.arange(40)),  # batched, repeated positions
    (np.array([0, 500]), np.array([0, 400])),            # far apart: no table (direct path)
])
def test_transformer_xl_by_distance_bit_for_bit(backend: Any, dim: int, q: Any, k: Any) -> None:
    enc: Any = per.get_encoder("transformer-xl", dim=dim)
    floats = backend.float_dtypes()
    wide = floats.get("float64", floats["float32"])
    for name in [n for n in ("float32", "bfloat16", "float16") if n in floats]:
        dt = floats[name]
        ints = enc.embed(backend.from_numpy(q), backend.from_numpy(k), dtype=dt)
        direct = enc.embed(backend.from_numpy(q, dtype=wide), backend.from_numpy(k, dtype=wide),
                           dtype=dt)
        assert ints.dtype == dt
        assert tuple(ints.shape) == (*q.shape, k.shape[-1], dim)
        np.testing.assert_array_equal(_as_numpy(backend, ints), _as_numpy(backend, direct),
                                      err_msg=f"{name}, q={q.tolist()}, k={k.tolist()}")
