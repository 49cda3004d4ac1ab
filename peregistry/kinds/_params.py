"""The learned parameters an encoder declares: their names and shapes (:meth:`param_shapes`) and
their initial values (:meth:`init`, drawn with NumPy's PCG64 so that one seed gives the same
numbers on every backend). :class:`~peregistry.Encoder` inherits these; a call's params are
checked by the encoder's public methods (:meth:`Params._check_params`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ..backends._base import Backend
from .context import resolve_dtype

if TYPE_CHECKING:
    from .context import Ctx

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


    def _check_params(self, params: Mapping[str, Any] | None, ctx: Ctx) -> Mapping[str, Any]:
        """The params of a call, checked: a dict with the keys and shapes of
        :meth:`param_shapes` whose values are arrays of the inputs' backend (of a real floating
        dtype, for :class:`LearnedParams`); ``{}`` for an encoder without learned params."""
        if params is None and type(self).param_shapes is Params.param_shapes:
            return {}  # (no learned params: nothing to check)
        shapes = self.param_shapes()
        if not shapes:
            if params is not None:
                raise TypeError(f"{self.name} has no learned parameters; got params={params!r}")
            return {}
        if params is None:
            raise TypeError(f"{self.name} needs params (from enc.init(xp)); got None")
        if not isinstance(params, Mapping):
            raise TypeError(f"{self.name}: params must be a dict of arrays, got "
                            f"{type(params).__name__}")
        check_param_arrays(self.name, params)  # (each an array, before its shape is read)
        if params.keys() != shapes.keys():
            raise ValueError(f"{self.name}: params must have keys {sorted(shapes)}, got "
                             f"{sorted(params)}")
        for key, shape in shapes.items():
            v = params[key]
            got = tuple(v.shape)
            if got != shape:
                raise ValueError(f"{self.name}: params[{key!r}].shape={got}, but should be {shape}")
            b = self._services.backend_of(v)
            if b is not ctx.backend:
                raise TypeError(
                    f"{self.name}: params[{key!r}] is a "
                    f"{b.name if b is not None else type(v).__qualname__} array but the "
                    f"positions are {ctx.backend.name}; pass positions and params of one "
                    f"framework (peregistry.convert(params, xp) moves params)")
            if self._params_real_floating and not ctx.backend.is_float_dtype(v.dtype):
                raise TypeError(f"{self.name}: params[{key!r}] must have a real floating "
                                f"dtype, got {v.dtype}")
        if type(ctx.backend).prepare_params is Backend.prepare_params:
            return params  # (the base adapter's is the identity)
        return ctx.backend.prepare_params(params)


def _mean(mean: float) -> dict[str, float]:
    """``mean=`` for :meth:`Backend.random_normal` only when it is not 0: a backend written
    before the argument existed keeps working for every encoder that does not use it."""
    return {"mean": mean} if mean else {}
