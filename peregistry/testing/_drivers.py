"""How the suite calls an encoder of each kind: sample inputs, the call, the expected shape.

A :class:`Probe` is one concrete call in NumPy data. :func:`invoke` runs it on the case's
backend (inputs converted to that backend, float inputs cast to the dtype under test), and
:func:`reference` runs it on NumPy in float64: the result every backend must agree with.
Encoders describe their own positions (``example_positions``), so no encoder is special-cased.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from ..kinds.base import Encoder
    from ._core import Case


@dataclass
class Probe:
    """NumPy inputs for one call. ``float_args`` follow the dtype under test (rotary ``x``);
    the others keep their own dtype (positions)."""

    args: dict[str, np.ndarray[Any, Any]]
    float_args: frozenset[str] = frozenset()
    #: For the absolute, bias and relative kinds the dtype under test is the ``dtype=`` argument.
    dtype_arg: bool = True
    expected_shape: tuple[int, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


Sampler = Callable[["Case", "Encoder", tuple[int, ...]], Probe]
Caller = Callable[["Encoder", dict[str, Any], Any, Any], Any]

#: kind -> (sampler, caller); other kinds register here as they arrive.
DRIVERS: dict[str, tuple[Sampler, Caller]] = {}


def register_driver(kind: str, sampler: Sampler, caller: Caller) -> None:
    """Teach the suite a kind: how to sample a probe and how to call the encoder."""
    DRIVERS[kind] = (sampler, caller)


def sample(case: Case, encoder: Encoder | None = None, shape: tuple[int, ...] = (2, 5)) -> Probe:
    enc = case.encoder if encoder is None else encoder
    if enc.kind not in DRIVERS:
        raise NotImplementedError(f"the suite has no driver for kind {enc.kind!r}")
    return DRIVERS[enc.kind][0](case, enc, shape)


def to_backend(case: Case, probe: Probe, dtype: str | None, device: Any = None) -> dict[str, Any]:
    out = {}
    for k, v in probe.args.items():
        if k in probe.float_args:
            out[k] = case.asarray(v, dtype=dtype or _default_name(case, device), device=device)
        else:
            out[k] = case.asarray(v, device=device)
    return out


def _default_name(case: Case, device: Any) -> str:
    return case.dtype_name(case.backend.default_float_dtype(device))


def invoke(
    case: Case,
    probe: Probe,
    *,
    dtype: str | None = None,
    device: Any = None,
    params: Any = None,
    encoder: Encoder | None = None,
    arrays: dict[str, Any] | None = None,
) -> Any:
    """Run the probe on the case's backend. ``dtype`` is a standard name or None (default)."""
    enc = case.encoder if encoder is None else encoder
    if arrays is None:
        arrays = to_backend(case, probe, dtype, device)
    dt = None
    if dtype is not None and probe.dtype_arg:
        dt = case.float_dtypes[dtype]
    if params is None and enc.learned:
        # dtype=None: params of the default float dtype, which learned encoders then return
        params = case_params(case, enc, dtype or _default_name(case, device), device)
    out = DRIVERS[enc.kind][1](enc, arrays, params, dt)
    _check_namespace(case, out)
    return out


def _check_namespace(case: Case, out: Any) -> None:
    """The output's framework is the input's: checked before any value, so that a NumPy array
    returned for torch input is reported as such, not as whatever its values break."""
    from ..registry import default_registry
    from ._core import CheckFailure

    owner = default_registry.backend_of(out)
    if owner is None or owner.name != case.backend.name:
        got = owner.name if owner is not None else f"{type(out).__module__}.{type(out).__name__}"
        raise CheckFailure(f"output is a {got} array, but should be {case.backend.name} (the "
                           f"input's framework)")


def case_params(case: Case, enc: Encoder, dtype: str | None, device: Any) -> Any:
    """Parameters for ``enc`` on the case's backend (seed 0, float32 unless ``dtype``)."""
    name = dtype or "float32"
    return enc.init(case.backend.native(), seed=0, dtype=case.float_dtypes[name], device=device)


def reference(case: Case, probe: Probe, *, encoder: Encoder | None = None) -> np.ndarray[Any, Any]:
    """The probe computed by the same encoder on NumPy in float64."""
    import numpy as np

    from ..registry import default_registry

    enc = case.encoder if encoder is None else encoder
    np_backend = default_registry.backend("numpy")
    args, params = numpy_inputs(probe, enc)
    out = DRIVERS[enc.kind][1](enc, args, params, np.float64 if probe.dtype_arg else None)
    return np_backend.to_numpy(out).astype(np.float64)


def numpy_inputs(probe: Probe, enc: Encoder) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The probe's arrays as NumPy (float ones in float64) and, for a learned encoder, its
    params in float64: its own init, as every case draws it (seed 0). One seed gives the same
    values on every backend, so a backend's float64 params are these, and narrower ones round
    them."""
    import numpy as np

    args = {k: (np.asarray(v, dtype=np.float64) if k in probe.float_args else np.asarray(v))
            for k, v in probe.args.items()}
    if not enc.learned:
        return args, None
    p = enc.init(np, seed=0, dtype=np.float64)
    return args, {k: np.asarray(v, dtype=np.float64) for k, v in p.items()}


# -- absolute ------------------------------------------------------------------------------------
def _absolute_sample(case: Case, enc: Encoder, shape: tuple[int, ...]) -> Probe:
    pos = enc.example_positions(case.rng, shape)
    out_dim: int = enc.out_dim  # type: ignore[attr-defined]
    return Probe({"positions": pos}, expected_shape=(*pos.shape, out_dim))


def _absolute_call(enc: Encoder, a: dict[str, Any], params: Any, dtype: Any) -> Any:
    return enc.encode(a["positions"], params=params, dtype=dtype)  # type: ignore[attr-defined]


register_driver("absolute", _absolute_sample, _absolute_call)


# -- rotary --------------------------------------------------------------------------------------
def _rotary_sample(case: Case, enc: Encoder, shape: tuple[int, ...]) -> Probe:
    """``x`` of shape ``(*batch, dim)`` rotated at positions of ``shape``, where ``batch`` is
    ``shape`` with its 1-axes widened (so positions broadcast) and a batch axis before a lone
    sequence axis."""
    import numpy as np

    pos = enc.example_positions(case.rng, shape)
    pshape = tuple(enc._position_batch_shape(pos))  # type: ignore[attr-defined]
    batch = tuple(3 if n == 1 else n for n in pshape)
    if len(batch) == 1:
        batch = (2, *batch)
    dim: int = enc._head_dim()  # type: ignore[attr-defined]
    x = np.asarray(case.rng.standard_normal((*batch, dim)), dtype=np.float64)
    return Probe({"x": x, "positions": pos}, float_args=frozenset({"x"}), dtype_arg=False,
                 expected_shape=x.shape)


def _rotary_call(enc: Encoder, a: dict[str, Any], params: Any, dtype: Any) -> Any:
    return enc.rotate(a["x"], a["positions"], params=params)  # type: ignore[attr-defined]


register_driver("rotary", _rotary_sample, _rotary_call)


# -- absolute encoders whose positions carry a trailing coordinate axis --------------------------
def _absolute_sample_axes(case: Case, enc: Encoder, shape: tuple[int, ...]) -> Probe:
    """As the absolute sampler, but an encoder whose positions end in a coordinate axis
    (``learned-2d``'s ``(..., 2)``) says which axes reach the output through
    ``_position_batch_shape``, as rotary encoders do."""
    pos = enc.example_positions(case.rng, shape)
    batch_of = getattr(enc, "_position_batch_shape", None)
    batch = tuple(batch_of(pos)) if batch_of is not None else tuple(pos.shape)
    out_dim: int = enc.out_dim  # type: ignore[attr-defined]
    return Probe({"positions": pos}, expected_shape=(*batch, out_dim))


register_driver("absolute", _absolute_sample_axes, _absolute_call)


# -- pair kinds: bias and relative-embedding -----------------------------------------------------
def _pair_shapes(shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Query and key position shapes for a requested ``shape``: ``q`` is ``shape`` (a lone
    query for ``()``), ``k`` has one more key than queries (so Q and K cannot be confused), and
    where ``shape`` has a 1-axis among its leading axes, ``k`` is wider there and 1 elsewhere
    (so the leading axes must broadcast)."""
    if not shape:
        return (1,), (2,)
    *lead, n = shape
    klead = tuple(3 if a == 1 else 1 for a in lead) if 1 in lead else tuple(lead)
    return tuple(shape), (*klead, n + 1)


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    return tuple(x if y == 1 else y for x, y in zip(a, b, strict=True))


def _pair_sample(case: Case, enc: Encoder, shape: tuple[int, ...]) -> Probe:
    qs, ks = _pair_shapes(shape)
    q = enc.example_positions(case.rng, qs)
    k = enc.example_positions(case.rng, ks)
    batch = _broadcast(qs[:-1], ks[:-1])
    if enc.kind == "bias":
        heads: int = enc.heads  # type: ignore[attr-defined]
        expected = (*batch, heads, qs[-1], ks[-1])
    else:
        dim: int = enc.out_dim  # type: ignore[attr-defined]
        expected = (*batch, qs[-1], ks[-1], dim)
    return Probe({"q_positions": q, "k_positions": k}, expected_shape=expected)


def _bias_call(enc: Encoder, a: dict[str, Any], params: Any, dtype: Any) -> Any:
    return enc.bias(a["q_positions"], a["k_positions"],  # type: ignore[attr-defined]
                    params=params, dtype=dtype)


def _embed_call(enc: Encoder, a: dict[str, Any], params: Any, dtype: Any) -> Any:
    return enc.embed(a["q_positions"], a["k_positions"],  # type: ignore[attr-defined]
                     params=params, dtype=dtype)


register_driver("bias", _pair_sample, _bias_call)
register_driver("relative-embedding", _pair_sample, _embed_call)
