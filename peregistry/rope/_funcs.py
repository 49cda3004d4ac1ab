"""The rotary mathematics as pure functions on Array API arrays: the reference of the engine.

RoFormer (Su et al. 2021, arXiv:2104.09864, eq. 34) rotates each feature pair ``(a_i, b_i)`` of
a query or key at position ``p`` by the angle ``p·ω_i``::

    a_i' = a_i·cos(p·ω_i) - b_i·sin(p·ω_i),    b_i' = b_i·cos(p·ω_i) + a_i·sin(p·ω_i)

Tables here are *half-width*: one ``cos``/``sin`` per pair, ``(..., rotary_dim/2)``, as
:func:`peregistry.rope.cos_sin` computes them; :func:`full_width` spreads them over the
features of a layout (the shape Hugging Face's ``cos``/``sin`` have). Every function takes arrays
of any Array API namespace, never mutates them, and rounds each product and sum once (no fused
multiply-add): the framework fast paths of :mod:`._delegation` must equal these bit for bit.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "LAYOUTS",
    "Layout",
    "apply_rotation",
    "broadcasts_into",
    "full_width",
    "half_width",
    "inv_freq",
    "rotate_every_two",
    "rotate_half",
    "rotate_half_layout",
    "rotate_interleaved_layout",
]

#: Which features pair up: ``"half"`` pairs ``(i, i + d/2)`` (GPT-NeoX, Llama, Qwen),
#: ``"interleaved"`` pairs ``(2i, 2i+1)`` (RoFormer, GPT-J, FLUX).
Layout = Literal["half", "interleaved"]
LAYOUTS: tuple[Layout, ...] = ("half", "interleaved")


def _namespace(xp: Any, *arrays: Any) -> Any:
    """``xp`` if given, else the namespace of ``arrays`` (array-api-compat's lookup)."""
    if xp is not None:
        return xp
    from array_api_compat import array_namespace

    return array_namespace(*arrays)


def check_arrays(owner: str, **arrays: Any) -> None:
    """A ``TypeError`` naming the first of ``arrays`` (argument name → value) that is not an
    array (``None``, a list, ...): called where using one failed, so that the error names the
    argument instead of an attribute missing deep inside."""
    for name, a in arrays.items():
        if not (hasattr(a, "shape") and hasattr(a, "dtype")):
            got = "None" if a is None else f"{type(a).__module__}.{type(a).__qualname__}"
            raise TypeError(f"{owner}: {name} must be an array (of any Array API namespace), "
                            f"got {got}")


def check_layout(layout: str) -> bool:
    """``True`` for ``"interleaved"``, ``False`` for ``"half"``; anything else is an error."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")
    return layout == "interleaved"


def inv_freq(rotary_dim: int, theta: float = 10000.0) -> np.ndarray[Any, Any]:
    """RoFormer's inverse frequencies ``ω_i = θ^(-2i/d)``, ``i = 0 … d/2 - 1``, ``d =
    rotary_dim`` (Su et al. 2021, eq. 15; Hugging Face's ``inv_freq``), as a float64 NumPy array:
    host constants, correct to an ulp, that :class:`peregistry.rope.Frequencies` turns into
    accurate angles on every backend."""
    import numpy as np

    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, int) or rotary_dim <= 0 \
            or rotary_dim % 2:
        raise ValueError(f"rotary_dim must be a positive even integer, got {rotary_dim!r}")
    if not (isinstance(theta, int | float) and math.isfinite(theta) and theta > 0
            and theta != 1):
        raise ValueError(f"theta must be a finite number > 0 (and != 1), got {theta!r}")
    # The platform C library's scalar pow, once per frequency, not NumPy's vectorized power:
    # that one is CPU-dispatched (SVML on AVX-512, with errors up to an ulp), and an ulp of
    # ``ω_i`` moves the angle ``p·ω_i`` by ``p·ulp(ω_i)``, growing with the position (6e-9 in
    # the output at ``p = 2**31``). The same formula as before: NumPy's bits wherever it has
    # no SIMD power (without AVX-512, and on aarch64).
    base = float(theta)
    return np.array([1.0 / base ** (i / rotary_dim) for i in range(0, rotary_dim, 2)],
                    dtype=np.float64)


def full_width(half: Any, *, layout: Layout = "half", xp: Any = None) -> Any:
    """A half-width table ``(..., h)`` spread over the ``2h`` features of ``layout``: the shape
    of :meth:`RotaryEncoder.cos_sin <peregistry.RotaryEncoder.cos_sin>` and of Hugging Face's
    ``cos``/``sin``."""
    check_arrays("full_width", half=half)
    xp = _namespace(xp, half)
    if check_layout(layout):
        # [c0 c1] -> [c0 c0 c1 c1]
        return xp.reshape(xp.stack((half, half), axis=-1), (*half.shape[:-1], 2 * half.shape[-1]))
    # [c0 c1] -> [c0 c1 c0 c1]
    return xp.concat((half, half), axis=-1)


def half_width(full: Any, *, layout: Layout = "half") -> Any:
    """The inverse of :func:`full_width`: one entry per pair of a full-width table ``(..., 2h)``
    (a view where the namespace gives one)."""
    check_arrays("half_width", full=full)
    h = full.shape[-1] // 2
    if check_layout(layout):
        # [c0 c0 c1 c1] -> [c0 c1]
        return full[..., 0::2]
    # [c0 c1 c0 c1] -> [c0 c1]
    return full[..., :h]


def rotate_half(x: Any, *, xp: Any = None) -> Any:
    """Hugging Face's ``rotate_half`` (GPT-NeoX, Llama): each pair ``(i, i + d/2)`` turned by a
    quarter, so that ``x·cos + rotate_half(x)·sin`` is the rotation with full-width tables."""
    check_arrays("rotate_half", x=x)
    xp = _namespace(xp, x)
    h = x.shape[-1] // 2
    # x: [x0 x1 | x2 x3] -> [-x2 -x3 | x0 x1]
    return xp.concat((-x[..., h:], x[..., :h]), axis=-1)


def rotate_every_two(x: Any, *, xp: Any = None) -> Any:
    """GPT-J's ``rotate_every_two`` (RoFormer, FLUX): each pair ``(2i, 2i+1)`` turned by a
    quarter, the interleaved counterpart of :func:`rotate_half`."""
    check_arrays("rotate_every_two", x=x)
    xp = _namespace(xp, x)
    # x: [x0 x1 x2 x3] -> [-x1 x0 -x3 x2]
    return xp.reshape(xp.stack((-x[..., 1::2], x[..., 0::2]), axis=-1), x.shape)


def rotate_half_layout(x: Any, cos: Any, sin: Any, *, xp: Any) -> Any:
    """Rotate pairs ``(i, i + h)`` of ``x`` ``(..., 2h)`` by half-width ``cos``/``sin``.

    The pair's members on their own axis, ``(..., 2, h)``, and the two results stacked back on
    it: one fused pass under XLA, close to a copy of ``x`` jitted (the flip form of
    :func:`rotate_interleaved_layout` and half slices with a concatenation fuse worse;
    docs/benchmarks.md, "Figures moved from docstrings")."""
    try:
        h = x.shape[-1] // 2
        # x: [x0 x1 | x2 x3] as (..., 2, h) -> [x0·c0 - x2·s0, x1·c1 - x3·s1 | x2·c0 + x0·s0, ..]
        pairs = xp.reshape(x, (*x.shape[:-1], 2, h))
        a, b = pairs[..., 0, :], pairs[..., 1, :]
        out = xp.stack((a * cos - b * sin, b * cos + a * sin), axis=-2)
    except (AttributeError, TypeError):  # (checked only then: this is the hot path)
        check_arrays("rotate_half_layout", x=x, cos=cos, sin=sin)
        raise
    return xp.reshape(out, (*out.shape[:-2], 2 * h))  # (tables may enlarge x's leading axes)


def rotate_interleaved_layout(x: Any, cos: Any, sin: Any, *, xp: Any) -> Any:
    """Rotate pairs ``(2i, 2i+1)`` of ``x`` ``(..., 2h)`` by half-width ``cos``/``sin``.

    The pair's members on their own axis, ``(..., h, 2)``, and ``x·C + flip(x)·S`` with ``C =
    (cos, cos)``, ``S = (-sin, sin)`` stacked there: one pass that XLA fuses, close to a copy
    of ``x`` jitted (stacking the two results fuses worse; docs/benchmarks.md, "Figures moved
    from docstrings"). The products and sums are those of ``(a·c - b·s, b·c + a·s)`` (``a +
    (-t) = a - t`` exactly), so are the bits (but the sign of a NaN, which tables from one
    angle never hold)."""
    # x: [x0 x1 x2 x3] as (..., h, 2) -> [x0·c0 - x1·s0, x1·c0 + x0·s0, x2·c1 - x3·s1, ...]
    try:
        pairs = xp.reshape(x, (*x.shape[:-1], x.shape[-1] // 2, 2))
        c, s = xp.expand_dims(cos, axis=-1), xp.expand_dims(sin, axis=-1)
        out = (pairs * xp.concat((c, c), axis=-1)
               + xp.flip(pairs, axis=-1) * xp.concat((-s, s), axis=-1))
    except (AttributeError, TypeError):  # (checked only then: this is the hot path)
        check_arrays("rotate_interleaved_layout", x=x, cos=cos, sin=sin)
        raise
    return xp.reshape(out, (*out.shape[:-2], x.shape[-1]))


def apply_rotation(x: Any, cos: Any, sin: Any, *, layout: Layout | None = None,
                   rotary_dim: int | None = None, interleaved: bool | None = None,
                   cdt: Any = None, xp: Any = None) -> Any:
    """The generic (Array API) rotation, the reference for the framework fast paths and the
    rotation kernels of plugins: RoFormer's ``a' = a·cos - b·sin``, ``b' = b·cos + a·sin`` for
    each pair ``(a, b)`` (Su et al. 2021, eq. 34), each product and sum rounded once.

    :param x: ``(..., seq, dim)`` queries or keys, any real floating dtype.
    :param cos: ``(..., seq, rotary_dim/2)``, one entry per pair, broadcasting against
        ``x.shape[:-1]``.
    :param sin: the same shape and dtype as ``cos``.
    :param layout: ``"half"`` (the default) pairs ``(i, i + rotary_dim/2)``,
        ``"interleaved"`` pairs ``(2i, 2i+1)``; ``interleaved=True/False`` says the same.
    :param rotary_dim: the features that rotate (default ``2 * cos.shape[-1]``); those from
        ``rotary_dim`` on pass through unchanged (partial rotary: GPT-NeoX, GPT-J, Phi).
    :param cdt: the dtype the rotation runs in (default the tables' dtype); the result is cast
        to ``x.dtype`` once.
    :param xp: the namespace (default: the arrays').

    >>> import numpy as np
    >>> from peregistry.rope import apply_rotation
    >>> x = np.array([[1.0, 0.0, 0.0, 1.0]])           # one position, pairs (x0, x2), (x1, x3)
    >>> c, s = np.array([[0.0, 1.0]]), np.array([[1.0, 0.0]])   # turn pair 0 by 90 degrees
    >>> apply_rotation(x, c, s)
    array([[0., 0., 1., 1.]])
    """
    if interleaved is None:
        interleaved = check_layout("half" if layout is None else layout)
    elif layout is not None and check_layout(layout) != interleaved:
        raise ValueError(f"apply_rotation: layout={layout!r} and interleaved={interleaved!r} "
                         f"disagree; pass one of them")
    if cdt is None or xp is None or rotary_dim is None:
        check_arrays("apply_rotation", x=x, cos=cos, sin=sin)
        xp = _namespace(xp, x, cos, sin)
        cdt = cos.dtype if cdt is None else cdt
        rotary_dim = 2 * cos.shape[-1] if rotary_dim is None else rotary_dim
        if not 0 < rotary_dim <= x.shape[-1] or rotary_dim % 2 or cos.shape[-1] != rotary_dim // 2:
            raise ValueError(f"apply_rotation: x.shape={tuple(x.shape)} and cos.shape="
                             f"{tuple(cos.shape)} with rotary_dim={rotary_dim}: expected an even "
                             f"rotary_dim <= x.shape[-1] and tables of rotary_dim/2 entries")
    try:
        dim = x.shape[-1]
    except AttributeError:  # (all given: checked only then)
        check_arrays("apply_rotation", x=x, cos=cos, sin=sin)
        raise
    xc = x if x.dtype == cdt else xp.astype(x, cdt)
    xr = xc[..., :rotary_dim] if rotary_dim < dim else xc
    rotate = rotate_interleaved_layout if interleaved else rotate_half_layout
    out = rotate(xr, cos, sin, xp=xp)
    if rotary_dim < dim:
        # x: [r0 r1 r2 r3 | p0 p1] -> [rotated r | p0 p1]
        out = xp.concat((out, xc[..., rotary_dim:]), axis=-1)
    return out if out.dtype == x.dtype else xp.astype(out, x.dtype)


def broadcasts_into(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """True if ``shape`` broadcasts to exactly ``target`` (never enlarging it)."""
    if len(shape) > len(target):
        return False
    # (s == 1 or s == t, not s in (1, t): TorchDynamo decides that one wrongly for two sizes
    # of distinct symbols under torch.compile(dynamic=True))
    return all(s == 1 or s == t for s, t in zip(reversed(shape), reversed(target), strict=False))
