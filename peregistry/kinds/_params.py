"""The learned parameters an encoder declares: their names and shapes (:meth:`param_shapes`) and
their initial values (:meth:`init`, drawn with NumPy's PCG64 so that one seed gives the same
numbers on every backend). :class:`~peregistry.Encoder` inherits these; a call's params are
checked by the kinds' front (``Encoder._check_params``, :mod:`.base`) against the shapes kept
when the encoder is made."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from .context import resolve_dtype

__all__ = ["Params", "check_param_arrays"]


def check_param_arrays(owner: str, params: Any) -> None:
    """Each value of a params dict must be an array (not a list or number)."""
    if not isinstance(params, Mapping):
        return
    for key, v in params.items():
        if not hasattr(v, "shape") or not hasattr(v, "dtype"):
            raise TypeError(f"{owner}: params[{key!r}] must be an array (from enc.init(xp)), got "
                            f"{type(v).__module__}.{type(v).__qualname__}")


class Params:
    """The learned parameters of an encoder (a mixin of :class:`~peregistry.Encoder`): none
    unless a subclass declares :meth:`param_shapes`."""

    __slots__ = ()
    name: ClassVar[str]
    _services: Any
    _params_real_floating: ClassVar[bool]

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Names and shapes of the learned parameters (empty for fixed encoders)."""
        return {}

    @property
    def learned(self) -> bool:
        """True when the encoder has learned parameters (:meth:`param_shapes` is not empty)."""
        return bool(self.param_shapes())

    def init_std(self, name: str) -> float:
        """Standard deviation of the normal initialisation of parameter ``name``."""
        return 0.02

    def init_mean(self, name: str) -> float:
        """Mean of the normal initialisation of parameter ``name`` (0.0; with ``init_std`` 0, a
        constant start such as FIRE's ``c = 0.1``)."""
        return 0.0

    def init(self, xp: Any, *, seed: int = 0, dtype: Any = None, device: Any = None) -> dict[str, Any]:
        """Fresh parameters as a plain ``dict[str, array]`` of namespace ``xp``.

        Values come from NumPy's PCG64 generator, so one seed gives the same numbers on every
        backend. ``xp`` is a module (``numpy``, ``torch``, ``jax.numpy``, ``array_api_strict``)
        or a backend name.
        """
        shapes = self.param_shapes()
        if not shapes:
            raise TypeError(f"{self.name} has no learned parameters; nothing to init")
        backend = self._services.backend_of_namespace(xp)
        dtype = resolve_dtype(self.name, backend, dtype, device)
        return {
            key: backend.random_normal(shape, seed=seed + i, std=self.init_std(key),
                                       **_mean(self.init_mean(key)),
                                       dtype=dtype, device=device)
            for i, (key, shape) in enumerate(shapes.items())
        }




def _mean(mean: float) -> dict[str, float]:
    """``mean=`` for :meth:`Backend.random_normal` only when it is not 0: a backend written
    before the argument existed keeps working for every encoder that does not use it."""
    return {"mean": mean} if mean else {}
