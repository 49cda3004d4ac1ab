"""The kinds' public methods and their one front: :class:`Encoder` (the base of every encoder,
its options and identity declared by :class:`~._declaration.Declared`), the kind ``absolute``
(:class:`AbsoluteEncoder`, ``encode``) and the pair kinds ``bias`` (:class:`BiasEncoder`,
``(..., num_heads, Q, K)``) and ``relative-embedding`` (:class:`RelativeEmbedding`,
``(..., Q, K, dim)``); ``rotary``'s declaration is :mod:`.rotary`, its methods the engine's
(:mod:`peregistry.rope.encoder`).

A public method makes one record of its call in this file: it asks the backend adapter of its
inputs once for the :class:`Ctx` (namespace, device, wide dtype, indexing dtype), validates
positions, params and the dtype asked for without asking the adapter again (float32 and
float64 are known floating; the adapter of the result is the registry's by-type map), hands the
:class:`Ctx` to the family's private hook (``_encode``, ``_bias``, ``_embed``), which computes in
``ctx.wide`` with Array API calls only, and casts the result to the requested dtype once. Inputs
that mix Python values with arrays, and every error message, take the slower path of
:mod:`.context`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from .._namespaces import JAX_NAMES
from ..backends._base import Backend
from ._declaration import KINDS, Declared
from ._examples import Examples
from ._params import Params, check_param_arrays
from .context import (
    Ctx,
    check_positions,
    devices_differ,
    hook_arguments,
    make_context,
    pair_batch_shape,
    params_dtype,
    resolve_dtype,
)

__all__ = ["KINDS", "AbsoluteEncoder", "BiasEncoder", "Ctx", "Encoder", "PairEncoder",
           "RelativeEmbedding"]

_NO_DTYPE: Any = object()  # Encoder._run: the hook takes no dtype (``_encode``)
#: dtype -> (integral, real floating): facts of the dtype, asked of every positions array
#: (``isdtype`` costs more than the rest of a small call's checks on NumPy).
_DTYPE_KINDS: dict[tuple[Any, type, Any], tuple[bool, bool]] = {}


class Encoder(Examples, Params, Declared):
    """Base of all encoders. Subclass one of the four kind classes, not this one.

    Class attributes a subclass sets:

    ``name``
        the registry name (``"sinusoidal"``); unique across all plugins.
    ``family``
        the family it belongs to (defaults to ``name``).
    ``summary``
        one line for ``peregistry list`` (defaults to the first line of the docstring).
    ``properties``
        the laws it obeys beyond its kind's (e.g. ``"alibi-slopes"``).
    ``exempt_checks``
        ``{check name: reason}``: laws of its kind it legitimately breaks (docs/conformance.md).
    ``continuous``
        True if real-valued positions are meaningful.
    ``float64_reference``
        optional ``(self, inputs, params) -> ndarray``: the output in float64 NumPy by code
        independent of the encoder's (the paper's formula), checked by ``check_matches_reference``.

    Options: attributes that are :class:`~peregistry.Option` instances.

    Every encoder holds the :attr:`services` (backend adapters, rope scalings, other encoders) of
    the registry that built it; an encoder built outside a registry, or unpickled, uses the
    default registry's.
    """

    properties: ClassVar[frozenset[str]] = frozenset()
    exempt_checks: ClassVar[Mapping[str, str]] = MappingProxyType({})
    continuous: ClassVar[bool] = False
    float64_reference: ClassVar[Callable[..., Any] | None] = None
    #: Params must have a real floating dtype (set by :class:`LearnedParams`).
    _params_real_floating: ClassVar[bool] = False

    __slots__ = ()

    # -- shared helpers for the public methods -------------------------------------------------
    def _context(self, *arrays: Any, names: tuple[str, ...] | Callable[[], tuple[str, ...]] | None
                 = None) -> tuple[Ctx, list[Any]]:
        """Namespace, backend, device and wide dtype of the inputs; Python numbers and sequences
        become NumPy arrays. All array inputs must belong to one backend. ``names`` (the
        arguments' names, e.g. ``("positions",)``, or a function giving them) make the errors
        say which input is wrong."""
        services, backend, lead = self._services, None, None
        # each array's adapter: one dict get, the registry's answer by type (not under
        # torch.compile: Dynamo would guard on the dict); else the registry asks its adapters
        compiler = getattr(sys.modules.get("torch"), "compiler", None)
        by_type = (services.backend_by_type if compiler is None or not compiler.is_compiling()
                   else {})
        for a in arrays:  # the usual call: arrays of one backend (and Nones)
            if a is None:
                continue
            b = by_type.get(type(a))
            if b is None:
                b = services.backend_of(a)
            if b is None or (backend is not None and b is not backend):
                backend = None
                break
            if backend is None:
                backend, lead = b, a
        if backend is None:
            return make_context(self.name, arrays, services=services,
                                names=names() if callable(names) else names)
        return backend.context(lead), list(arrays)

    def _positions(self, positions: Any, ctx: Ctx, what: str = "positions") -> Any:
        """Check that positions are numeric (integer, or real for continuous encoders)."""
        dtype = getattr(positions, "dtype", None)
        # (the namespace too: NumPy and JAX share dtype objects, not their answers)
        key = (getattr(ctx.xp, "__name__", None), type(dtype), dtype)
        try:
            kind = _DTYPE_KINDS.get(key)
        except TypeError:  # a dtype that cannot be hashed
            kind = None
        if kind is None:
            try:
                kind = (bool(ctx.xp.isdtype(dtype, "integral")),
                        bool(ctx.xp.isdtype(dtype, "real floating")))
            except Exception:  # None, or no numeric dtype: the error below says which
                kind = (False, False)
            # (not torch's dtypes: a global changed while TorchDynamo traces costs a recompile)
            if len(_DTYPE_KINDS) < 64 and "torch" not in type(dtype).__module__:
                _DTYPE_KINDS[key] = kind
        if kind[0] or (kind[1] and self.continuous):
            return positions
        return check_positions(self.name, positions, ctx, what=what, continuous=self.continuous)

    def _run(self, hook: str, ctx: Ctx, *arrays: Any, params: Any, dtype: Any = _NO_DTYPE) -> Any:
        """``getattr(self, hook)(*arrays, params=params, ctx=ctx[, dtype=dtype])``: the
        computation after validation. The one dispatch to a framework: on eager JAX, a hook
        whose class declares ``_compile_hook_eagerly`` runs as one compiled program per shape,
        with the bits of running it op by op (:mod:`peregistry._jax_eager`)."""
        xp = ctx.xp
        try:
            if getattr(xp, "__name__", None) in JAX_NAMES and (
                    dtype is _NO_DTYPE or dtype in (xp.float32, xp.float64)):
                from .._jax_eager import compiled_hook

                static = {} if dtype is _NO_DTYPE else {"dtype": dtype}
                out = compiled_hook(self, hook, arrays, {"params": dict(params)}, **static)
                if out is not None:
                    return out
            if dtype is _NO_DTYPE:
                return getattr(self, hook)(*arrays, params=params, ctx=ctx)
            return getattr(self, hook)(*arrays, params=params, ctx=ctx, dtype=dtype)
        except Exception as exc:  # a framework's error for arrays on two devices names neither
            err = devices_differ(self.name, ctx.backend, hook_arguments(hook, arrays, params))
            if err is None:
                raise
            raise err from exc

    def _check_params(self, params: Mapping[str, Any] | None, ctx: Ctx) -> Mapping[str, Any]:
        """The params of a call, checked: a dict with the keys and shapes of
        :meth:`param_shapes` whose values are arrays of the inputs' backend (of a real floating
        dtype, for :class:`LearnedParams`); ``{}`` for an encoder without learned params."""
        shapes = self._cache.get("param_shapes")  # (kept at construction: a fact of the options)
        if not shapes:
            if params is not None:
                raise TypeError(f"{self.name} has no learned parameters; got params={params!r}")
            return {}
        if params is None:
            raise TypeError(f"{self.name} needs params (from enc.init(xp)); got None")
        if not isinstance(params, Mapping):
            raise TypeError(f"{self.name}: params must be a dict of arrays, got "
                            f"{type(params).__name__}")
        for v in params.values():  # each an array, before its shape is read
            if not hasattr(v, "shape") or not hasattr(v, "dtype"):
                check_param_arrays(self.name, params)
        if params.keys() != shapes.keys():
            raise ValueError(f"{self.name}: params must have keys {sorted(shapes)}, got "
                             f"{sorted(params)}")
        backend, xp = ctx.backend, ctx.xp
        by_type = self._services.backend_by_type
        for key, shape in shapes.items():
            v = params[key]
            got = tuple(v.shape)
            if got != shape:
                raise ValueError(f"{self.name}: params[{key!r}].shape={got}, but should be {shape}")
            b = by_type.get(type(v)) or self._services.backend_of(v)
            if b is not backend:
                raise TypeError(
                    f"{self.name}: params[{key!r}] is a "
                    f"{b.name if b is not None else type(v).__qualname__} array but the "
                    f"positions are {backend.name}; pass positions and params of one "
                    f"framework (peregistry.convert(params, xp) moves params)")
            if (self._params_real_floating and v.dtype not in (xp.float32, xp.float64)
                    and not backend.is_float_dtype(v.dtype)):
                raise TypeError(f"{self.name}: params[{key!r}] must have a real floating "
                                f"dtype, got {v.dtype}")
        if type(backend).prepare_params is Backend.prepare_params:
            return params  # (the base adapter's is the identity)
        return backend.prepare_params(params)

    def _finish(self, out: Any, dtype: Any, ctx: Ctx, *, hook: str) -> Any:
        """The result of private hook ``hook`` cast once to ``dtype``, after checking that it is
        an array of the inputs' backend (a plugin computing with another framework would
        otherwise compare dtypes across namespaces, or hand the caller foreign arrays)."""
        backend = self._services.backend_by_type.get(type(out)) or self._services.backend_of(out)
        if backend is not ctx.backend:
            got = (f"{backend.name} array" if backend is not None
                   else f"{type(out).__module__}.{type(out).__qualname__}")
            raise TypeError(
                f"{self.name}: {type(self).__name__}.{hook} returned a {got} for "
                f"{ctx.backend.name} inputs, but must return an array of the inputs' namespace "
                f"({ctx.backend.name}): compute with ctx.xp, never with a fixed framework"
            )
        return out if out.dtype == dtype else ctx.xp.astype(out, dtype)

    def _output_dtype(self, dtype: Any, params: Mapping[str, Any], ctx: Ctx) -> Any:
        """The dtype of the result: ``dtype`` if given; else the params' dtype for an encoder
        with learned params (as ``torch.nn.functional.embedding`` returns its weight's dtype:
        float64 params give float64, bfloat16 params bfloat16), else the namespace's default
        real floating dtype. ``params`` are the validated ones (empty without learned params).
        float32 and float64 are floating on every backend: asked of the adapter only for
        other dtypes."""
        backend, xp = ctx.backend, ctx.xp
        if dtype is None:
            if not params:
                if ctx.default_float is not None:  # (an adapter's that never changes)
                    return ctx.default_float
                return backend.default_float_dtype(ctx.device)
            first = None
            for v in params.values():
                if first is None:
                    first = v.dtype
                elif v.dtype != first:  # several dtypes: promoted
                    return params_dtype(params, ctx)
            if first in (xp.float32, xp.float64) or backend.is_float_dtype(first):
                return first
            return backend.default_float_dtype(ctx.device)
        if not isinstance(dtype, str) and (dtype in (xp.float32, xp.float64)
                                           or backend.is_float_dtype(dtype)):
            return dtype
        return resolve_dtype(self.name, backend, dtype, ctx.device)


class AbsoluteEncoder(Encoder):
    """Maps positions to vectors: ``encode(positions) -> (*positions.shape, out_dim)``."""

    kind = "absolute"
    __slots__ = ()

    @property
    def out_dim(self) -> int:
        """Length of one position's vector (``options["dim"]`` unless a subclass says else)."""
        return int(self._values["dim"])

    def encode(self, positions: Any, *, params: Mapping[str, Any] | None = None,
               dtype: Any = None) -> Any:
        """The encoding of every position: ``(*positions.shape, out_dim)``, in the positions'
        namespace and on their device, of ``dtype`` (default: the params' dtype for learned
        encoders, else the namespace's default float).

        >>> import numpy as np
        >>> import peregistry as per
        >>> enc = per.get_encoder("sinusoidal", dim=8)
        >>> out = enc.encode(np.arange(4))
        >>> out.shape, out.dtype
        ((4, 8), dtype('float64'))
        >>> print(np.round(out[2], 4))  # [sin p·ω_0, cos p·ω_0, sin p·ω_1, ...] at p = 2
        [ 0.9093 -0.4161  0.1987  0.9801  0.02    0.9998  0.002   1.    ]
        >>> enc.encode(np.arange(4), dtype=np.float32).dtype
        dtype('float32')
        """
        ctx, (pos,) = self._context(positions, names=("positions",))
        pos = self._positions(pos, ctx)
        params = self._check_params(params, ctx)
        out_dtype = self._output_dtype(dtype, params, ctx)
        out = self._run("_encode", ctx, pos, params=params)
        return self._finish(out, out_dtype, ctx, hook="_encode")

    def _encode(self, positions: Any, *, params: Mapping[str, Any], ctx: Ctx) -> Any:
        """Compute the encoding (any float dtype; the caller casts once)."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement _encode")


class PairEncoder(Encoder):
    """What the pair kinds share: the front of ``bias``/``embed``. Subclass
    :class:`BiasEncoder` or :class:`RelativeEmbedding`, not this one."""

    __slots__ = ()

    def _pair_inputs(self, q_positions: Any, k_positions: Any,
                     params: Any) -> tuple[Ctx, Any, Any, Mapping[str, Any]]:
        """One namespace for positions *and* params (so a Python list of positions follows
        torch params), validated positions (whose leading axes broadcast) and validated
        params."""
        arrays: tuple[Any, ...] = (q_positions, k_positions)
        if params is not None and isinstance(params, Mapping):
            values = tuple(params.values())
            for v in values:  # each an array (the error names the first that is not)
                if not hasattr(v, "shape") or not hasattr(v, "dtype"):
                    check_param_arrays(self.name, params)
            arrays += values
        ctx, got = self._context(*arrays, names=lambda: (  # (made only for an error message)
            "q_positions", "k_positions", *[f"params[{key!r}]" for key in params or ()]))
        q = self._positions(got[0], ctx, what="q_positions")
        k = self._positions(got[1], ctx, what="k_positions")
        if q.ndim != 1 or k.ndim != 1:
            pair_batch_shape(self.name, q, k)
        return ctx, q, k, self._check_params(params, ctx)


class BiasEncoder(PairEncoder):
    """Additive attention bias from query and key positions: ``(..., num_heads, Q, K)``.

    ``bias(q, k)[..., h, i, j]`` is added to the attention logit of query ``i`` (at position
    ``q[..., i]``) and key ``j`` (at ``k[..., j]``) in head ``h``. A subclass declares a
    ``num_heads`` option and implements :meth:`_bias`; the public method here finds the
    namespace (of positions and params), validates positions and params, broadcasts the leading
    axes of ``(..., Q)`` and ``(..., K)``, and casts once to the requested dtype.
    """

    kind = "bias"
    __slots__ = ()

    @property
    def heads(self) -> int:
        """Number of attention heads of the output (``options["num_heads"]``)."""
        return int(self._values["num_heads"])

    def bias(self, q_positions: Any, k_positions: Any, *,
             params: Mapping[str, Any] | None = None, dtype: Any = None) -> Any:
        """The additive bias ``(*batch, num_heads, Q, K)`` where ``batch`` is the broadcast of
        ``q_positions.shape[:-1]`` and ``k_positions.shape[:-1]``; of ``dtype`` (default: the
        params' dtype for learned encoders, else the namespace's default float), in the inputs'
        namespace and on their device.

        >>> import numpy as np
        >>> import peregistry as per
        >>> enc = per.get_encoder("alibi", num_heads=4)
        >>> b = enc.bias(np.arange(3), np.arange(3))
        >>> b.shape
        (4, 3, 3)
        >>> print(np.round(b[1], 4))  # head 1: -m_1·|i - j|, m_1 = 2**-4
        [[ 0.     -0.0625 -0.125 ]
         [-0.0625  0.     -0.0625]
         [-0.125  -0.0625  0.    ]]
        """
        ctx, q, k, prepared = self._pair_inputs(q_positions, k_positions, params)
        out_dtype = self._output_dtype(dtype, prepared, ctx)
        out = self._run("_bias", ctx, q, k, params=prepared, dtype=out_dtype)
        return self._finish(out, out_dtype, ctx, hook="_bias")

    def _bias(self, q: Any, k: Any, *, params: Mapping[str, Any], ctx: Ctx, dtype: Any) -> Any:
        """Compute the bias for validated positions ``q`` ``(..., Q)`` and ``k`` ``(..., K)``
        (any float dtype of at least the precision of ``dtype``; the caller casts once)."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement _bias")


class RelativeEmbedding(PairEncoder):
    """Embeddings of relative positions: ``(..., Q, K, dim)``.

    ``embed(q, k)[..., i, j, :]`` is the vector of the pair (query ``i``, key ``j``), used inside
    attention (Shaw et al. 2018 add it to keys/values; Transformer-XL projects it). A subclass
    declares a ``dim`` option and implements :meth:`_embed`; validation, broadcasting of the
    leading axes and the final cast live here, as for :meth:`BiasEncoder.bias`.
    """

    kind = "relative-embedding"
    __slots__ = ()

    @property
    def out_dim(self) -> int:
        """Length of one pair's vector (``options["dim"]``)."""
        return int(self._values["dim"])

    def embed(self, q_positions: Any, k_positions: Any, *,
              params: Mapping[str, Any] | None = None, dtype: Any = None) -> Any:
        """The embeddings ``(*batch, Q, K, dim)`` where ``batch`` is the broadcast of
        ``q_positions.shape[:-1]`` and ``k_positions.shape[:-1]``; of ``dtype`` (default: the
        params' dtype for learned encoders, else the namespace's default float), in the inputs'
        namespace and on their device.

        >>> import numpy as np
        >>> import peregistry as per
        >>> enc = per.get_encoder("transformer-xl", dim=4)
        >>> r = enc.embed(np.arange(3), np.arange(3))
        >>> r.shape
        (3, 3, 4)
        >>> bool(np.allclose(r[2, 1], r[1, 0]))  # a function of i - j only
        True
        """
        ctx, q, k, prepared = self._pair_inputs(q_positions, k_positions, params)
        out_dtype = self._output_dtype(dtype, prepared, ctx)
        out = self._run("_embed", ctx, q, k, params=prepared, dtype=out_dtype)
        return self._finish(out, out_dtype, ctx, hook="_embed")

    def _embed(self, q: Any, k: Any, *, params: Mapping[str, Any], ctx: Ctx, dtype: Any) -> Any:
        """Compute the embeddings for validated ``q`` ``(..., Q)`` and ``k`` ``(..., K)``."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement _embed")
