"""Learned parameters as the built-in learned encoders handle them, public for plugins: an
``init`` that gives the same float32-exact numbers for one seed on every backend and dtype, and
params checked to be real floating arrays of the positions' framework.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._services import current_services
from .base import Encoder, resolve_dtype
from .pairs import check_param_arrays

if TYPE_CHECKING:
    from .._services import Services
    from .base import Ctx

__all__ = ["LearnedParams", "check_param_arrays", "init_params", "params_backend_matches"]


def params_backend_matches(owner: str, params: Any, ctx: Ctx, *,
                           services: Services | None = None) -> None:
    """Params must be arrays of the positions' framework (no silent host round trips); their
    backends are looked up in ``services`` (the encoder's :attr:`~Encoder.services`)."""
    if not isinstance(params, Mapping):
        return
    check_param_arrays(owner, params)
    registry = current_services() if services is None else services
    for key, v in params.items():
        b = registry.backend_of(v)
        if b is not ctx.backend:
            got = b.name if b is not None else type(v).__qualname__
            raise TypeError(
                f"{owner}: params[{key!r}] is a {got} array but the positions are "
                f"{ctx.backend.name}; pass positions and params of one framework "
                f"(peregistry.convert(params, xp) moves params)"
            )


def init_params(enc: Encoder, xp: Any, *, seed: int = 0, dtype: Any = None,
                device: Any = None) -> dict[str, Any]:
    """Fresh params of ``enc`` (one array per :meth:`~Encoder.param_shapes` entry) in namespace
    ``xp``, float32-exact: the same numbers for one seed on every backend and in every dtype.

    Each parameter ``i`` (in ``param_shapes`` order) is drawn from ``N(0, enc.init_std(key)²)``
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

    def init(self, xp: Any, *, seed: int = 0, dtype: Any = None,
             device: Any = None) -> dict[str, Any]:
        """Fresh params: :func:`init_params` of this encoder."""
        return init_params(self, xp, seed=seed, dtype=dtype, device=device)

    def _check_params(self, params: Any, ctx: Ctx) -> Any:
        check_param_arrays(self.name, params)
        out = super()._check_params(params, ctx)
        params_backend_matches(self.name, out, ctx, services=self._services)
        for key, v in out.items():
            if not ctx.xp.isdtype(v.dtype, "real floating"):
                raise TypeError(f"{self.name}: params[{key!r}] must have a real floating "
                                f"dtype, got {v.dtype}")
        return out
