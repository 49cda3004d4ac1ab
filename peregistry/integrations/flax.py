"""Flax NNX modules over peregistry encoders (extra ``peregistry[flax]``).

``Encoder(name_or_encoder, rngs=nnx.Rngs(0), **options)`` is an ``nnx.Module``: a learned
encoder's parameters (``enc.param_shapes()``) are ``nnx.Param`` attributes of the module, drawn
from ``rngs.params()`` with the encoder's own initial scale (``enc.init_std``), so ``nnx.jit``,
``nnx.grad`` and ``nnx.Optimizer`` train them as any NNX weights; parameter-free encoders
(rotary, sinusoidal, ALiBi) are stateless modules. Calling the module calls the encoder's
method of its kind, with the parameters filled in:

* absolute: ``m(positions, dtype=None)`` is ``enc.encode``;
* rotary: ``m(x, positions=None, offset=0)`` is ``enc.rotate``;
* bias: ``m(q_positions, k_positions, dtype=None)`` is ``enc.bias``;
* relative embedding: ``m(q_positions, k_positions, dtype=None)`` is ``enc.embed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flax import nnx

from .._resolve import encoder_from
from ..kinds.base import Encoder as _Encoder

__all__ = ["Encoder"]


class Encoder(nnx.Module):  # type: ignore[misc,unused-ignore]  # Any where flax is absent
    """An NNX module holding one peregistry encoder (and its parameters, if it learns any).

    :param encoder: a registered name (with ``options``) or an encoder object.
    :param rngs: ``nnx.Rngs`` for a learned encoder's fresh parameters (its ``params`` stream).
    :param params: existing parameters instead (``{name: array}``, e.g. ``enc.init(jnp)`` or a
        converted checkpoint); each must have the shape ``enc.param_shapes()`` gives.
    :param param_dtype: the dtype of fresh parameters (default float32).

    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> from peregistry.integrations.flax import Encoder
    >>> rope = Encoder("rotary", dim=8)  # parameter-free: a stateless module
    >>> out = rope(jnp.ones((2, 5, 8)))  # enc.rotate, positions 0..4
    >>> out.shape, rope.params
    ((2, 5, 8), None)
    >>> table = Encoder("learned", num_positions=16, dim=8, rngs=nnx.Rngs(0))
    >>> table(jnp.arange(4)).shape  # enc.encode with the module's nnx.Param
    (4, 8)
    >>> type(table.table).__name__, table.params["table"].shape
    ('Param', (16, 8))
    """

    def __init__(self, encoder: str | _Encoder, *, rngs: nnx.Rngs | None = None,
                 params: Mapping[str, Any] | None = None, param_dtype: Any = None,
                 **options: Any) -> None:
        """Resolve the encoder and make its parameters (fresh from ``rngs`` or the given
        ``params``, shapes checked) ``nnx.Param`` attributes named as the encoder names them."""
        import jax
        import jax.numpy as jnp

        enc = encoder_from("peregistry.flax.Encoder", encoder, options)
        self.encoder = enc
        shapes = enc.param_shapes() if enc.learned else {}
        self._names = tuple(shapes)
        if not shapes:
            if params:
                raise TypeError(f"peregistry.flax.Encoder: {enc.name} has no parameters, got "
                                f"params {sorted(params)}")
            return
        if params is None:
            if rngs is None:
                raise TypeError(f"peregistry.flax.Encoder: {enc.name} learns {list(shapes)}: "
                                f"pass rngs=nnx.Rngs(seed) for fresh ones, or params=")
            dtype = jnp.float32 if param_dtype is None else param_dtype
            params = {k: jax.random.normal(rngs.params(), shape, dtype) * enc.init_std(k)
                      for k, shape in shapes.items()}
        if set(params) != set(shapes):
            raise ValueError(f"peregistry.flax.Encoder: {enc.name} takes params {sorted(shapes)},"
                             f" got {sorted(params)}")
        for key, shape in shapes.items():
            value = jnp.asarray(params[key])
            if tuple(value.shape) != tuple(shape):
                raise ValueError(f"peregistry.flax.Encoder: params[{key!r}] must have shape "
                                 f"{tuple(shape)} for {enc!r}, got {tuple(value.shape)}")
            setattr(self, key, nnx.Param(value))

    @property
    def params(self) -> dict[str, Any] | None:
        """The parameters as the encoder takes them (None for a parameter-free encoder)."""
        if not self._names:
            return None
        return {k: getattr(self, k)[...] for k in self._names}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The encoder's method of its kind (``encode``, ``rotate``, ``bias``, ``embed``) with
        the module's parameters filled in (see the module docstring)."""
        enc: Any = self.encoder
        kind = enc.kind
        if kind == "rotary":
            return enc.rotate(*args, **kwargs)
        method = {"absolute": "encode", "bias": "bias", "relative-embedding": "embed"}[kind]
        return getattr(enc, method)(*args, params=self.params, **kwargs)
