"""Learned parameters as the built-in learned encoders handle them, public for plugins: an
``init`` that gives the same float32-exact numbers for one seed on every backend and dtype, and
params checked to be real floating arrays of the positions' framework.
"""

from __future__ import annotations

from typing import Any

from ..kinds.base import Encoder
from ..kinds.context import resolve_dtype
from .pairs import check_param_arrays

__all__ = ["LearnedParams", "check_param_arrays", "init_params"]


def init_params(enc: Encoder, xp: Any, *, seed: int = 0, dtype: Any = None,
                device: Any = None) -> dict[str, Any]:
    """Fresh params of ``enc`` (one array per :meth:`~Encoder.param_shapes` entry) in namespace
    ``xp``, float32-exact: the same numbers for one seed on every backend and in every dtype.

    Each parameter ``i`` (in ``param_shapes`` order) is drawn from
    ``N(enc.init_mean(key), enc.init_std(key)²)``
    by NumPy's PCG64 with seed ``seed + i`` (as :meth:`Encoder.init`), rounded to float32, and
    cast to ``dtype`` (default: the namespace's default float dtype). So float32, float64 and
    JAX without x64 all hold the same values, which the conformance suite's float64 reference
    and gradient checks rely on; narrower dtypes (bfloat16, float16) round them once more.
    ``xp`` is a module (``numpy``, ``torch``, ``jax.numpy``, ``array_api_strict``) or a backend
    name; backends are looked up in ``enc.services``.
    """
    backend = enc.services.backend_of_namespace(xp)
    out_dtype = resolve_dtype(enc.name, backend, dtype, device)
    f32 = backend.float_dtypes()["float32"]
    params = Encoder.init(enc, xp, seed=seed, dtype=f32, device=device)
    ns = backend.namespace()
    return {k: v if v.dtype == out_dtype else ns.astype(v, out_dtype) for k, v in params.items()}


class LearnedParams(Encoder):
    """Mixin for learned encoders, as the built-ins use it: :meth:`init` is :func:`init_params`
    (float32-exact values, the same for one seed on every backend and dtype), and params are
    checked to be a dict of real floating arrays of the positions' framework, with the keys
    and shapes of :meth:`~Encoder.param_shapes`.

    Put it first among the bases: ``class MyTable(LearnedParams, per.AbsoluteEncoder)``.
    """

    __slots__ = ()
    _params_real_floating = True

    def init(self, xp: Any, *, seed: int = 0, dtype: Any = None,
             device: Any = None) -> dict[str, Any]:
        """Fresh params: :func:`init_params` of this encoder."""
        return init_params(self, xp, seed=seed, dtype=dtype, device=device)
