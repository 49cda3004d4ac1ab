"""The pair kinds, encoders of a query and a key position: ``bias`` (:class:`BiasEncoder`,
``(..., num_heads, Q, K)``) and ``relative-embedding`` (:class:`RelativeEmbedding`,
``(..., Q, K, dim)``). Their common front (:meth:`PairEncoder._pair_inputs`) finds one
namespace for positions and params, validates both and checks that the leading axes broadcast;
the family's hook computes, and the public method casts once. The helpers a family computes with
(``distance``, ``gather``, ...) are :mod:`peregistry.encoders.pairs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._params import check_param_arrays
from .base import Encoder
from .context import Ctx, pair_batch_shape

__all__ = ["BiasEncoder", "PairEncoder", "RelativeEmbedding"]


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
            check_param_arrays(self.name, params)
            arrays += tuple(params.values())
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
