"""The validation of ``bias``/``embed`` calls, remembered (issue 17: the fixed cost of small
calls).

A model asks its relative encoder for a bias or embedding on every layer (or every forward),
with positions of the same class, dtype, leading axes and device each time. Everything
:func:`~peregistry.encoders.pairs.pair_inputs` checks depends on exactly those (and on the
params' keys, classes, dtypes, shapes and devices, and the ``dtype`` asked for), never on the
positions' values nor on the lengths ``Q`` and ``K`` (a decode step's keys grow by one); the
framework's default and widest float dtypes (global state: torch's ``set_default_dtype``, JAX's
x64 flag) are part of the signature too. So a validated eager call's *signature* is kept with
what validation found (the :class:`~peregistry.encoders.context.Ctx` and the output dtype); a
later call with the same signature goes straight to the hook, and any other call (new leading
axes, a Python list, a bad argument) takes the full path, which raises the same errors as ever;
so does every call of a subclass that overrides a validation method (a plugin checking
positions' values, say).
Nothing is kept from, or read inside, a trace (``torch.compile``, ``jax.jit``, torch.func
transforms): those take the full path. At most :data:`KEPT` signatures per encoder, newest
first, replaced as one tuple (no lock).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import _lazy
from .base import BiasEncoder, Encoder, RelativeEmbedding
from .context import own_methods, run_hook
from .pairs import pair_inputs

if TYPE_CHECKING:
    from .base import Ctx

__all__ = ["KEPT", "RememberedBias", "RememberedEmbedding", "RememberedPairs"]

#: Signatures kept per encoder (a model's bias at two lengths, prefill and decode, and spares).
KEPT = 4


class RememberedPairs(Encoder):
    """Mixin of the built-in pair encoders (put it first among the bases): ``bias``/``embed``
    through :meth:`_pair_call`, which skips the validation an identical signature passed."""

    __slots__ = ()

    def __init__(self, **options: Any) -> None:
        _lazy.bind_for_torch()  # the call machinery, before any torch.compile meets it
        super().__init__(**options)

    def _pair_call(self, hook: str, q_positions: Any, k_positions: Any,
                   params: Mapping[str, Any] | None, dtype: Any) -> Any:
        """The public method's body (see :meth:`BiasEncoder.bias`), hook ``hook``."""
        sig = _signature(self, q_positions, k_positions, params, dtype)
        if sig is not None and own_methods(type(self), _VALIDATION):
            for kept, ctx, out_dtype in self._cache.get("pair_calls", ()):
                if kept == sig:
                    prepared = {} if params is None else ctx.backend.prepare_params(params)
                    out = run_hook(self, hook, ctx, q_positions, k_positions, params=prepared,
                                   dtype=out_dtype)
                    return self._finish(out, out_dtype, ctx, hook=hook)
        ctx, q, k, prepared, _ = pair_inputs(self, q_positions, k_positions, params)
        out_dtype = self._output_dtype(dtype, prepared, ctx)
        if sig is not None and own_methods(type(self), _VALIDATION):
            _remember(self, sig, ctx, out_dtype)
        out = run_hook(self, hook, ctx, q, k, params=prepared, dtype=out_dtype)
        return self._finish(out, out_dtype, ctx, hook=hook)


class RememberedBias(RememberedPairs, BiasEncoder):
    """A :class:`BiasEncoder` whose ``bias`` remembers validated signatures."""

    __slots__ = ()

    def bias(self, q_positions: Any, k_positions: Any, *,
             params: Mapping[str, Any] | None = None, dtype: Any = None) -> Any:
        return self._pair_call("_bias", q_positions, k_positions, params, dtype)

    bias.__doc__ = BiasEncoder.bias.__doc__


class RememberedEmbedding(RememberedPairs, RelativeEmbedding):
    """A :class:`RelativeEmbedding` whose ``embed`` remembers validated signatures."""

    __slots__ = ()

    def embed(self, q_positions: Any, k_positions: Any, *,
              params: Mapping[str, Any] | None = None, dtype: Any = None) -> Any:
        return self._pair_call("_embed", q_positions, k_positions, params, dtype)

    embed.__doc__ = RelativeEmbedding.embed.__doc__


#: The methods validation calls; a subclass overriding one (to check positions' values, say)
#: must see every call, so its calls are never remembered.
_VALIDATION = ("_context", "_positions", "_check_params", "_output_dtype")


def _remember(enc: Encoder, sig: tuple[Any, ...], ctx: Ctx, out_dtype: Any) -> None:
    kept = enc._cache.get("pair_calls", ())
    enc._cache["pair_calls"] = ((sig, ctx, out_dtype), *kept[:KEPT - 1])


def _signature(enc: Encoder, q: Any, k: Any, params: Any, dtype: Any) -> tuple[Any, ...] | None:
    """What validation of this call depends on, as a hashable tuple; None for a call that must
    take the full path every time (Python sequences, arrays of two frameworks, a trace)."""
    services = enc._services
    backend = services.backend_of(q)
    if backend is None or backend.is_tracing(q):
        return None
    if k is not q and (services.backend_of(k) is not backend or backend.is_tracing(k)):
        return None  # (q and k are often one array: a self-attention's bias)
    described: tuple[Any, ...] = ()
    if params is not None:
        if type(params) is not dict:
            return None
        for key, v in params.items():
            if services.backend_of(v) is not backend or backend.is_tracing(v):
                return None
            described += (key, type(v), v.dtype, v.shape, backend.device(v))
    device = backend.device(q)
    # What the framework's global state decides: the wide dtype (JAX's x64 flag) and, for
    # dtype=None without params, the default float dtype (torch.set_default_dtype).
    default = backend.default_float_dtype(device) if dtype is None and params is None else None
    # Of the positions' shapes, validation reads the number of axes and the leading ones (which
    # must broadcast), never the lengths Q and K: a decode step's keys, one more each step, keep
    # the signature. (Shapes as the arrays give them: tuples, or torch.Size, equal to its tuple.)
    qn, kn = q.ndim, k.ndim
    return (backend, type(q), q.dtype, qn, () if qn == 1 else q.shape[:-1], device, type(k),
            k.dtype, kn, () if kn == 1 else k.shape[:-1], device if k is q else backend.device(k),
            params is None, described, dtype, backend.wide_float_dtype(device), default)
