"""The backend adapter interface: what the Array API standard leaves to each framework.

Encoders are written against the Array API standard alone. What the standard lacks lives here,
one adapter per framework: recognising its arrays, its namespace, default and widest float dtypes,
devices, seeded initialisation, DLPack conversion, and jit for the conformance suite.

Adapters are pluggy plugins (hook ``peregistry_backends``). A framework is only ever detected if
it is already in :data:`sys.modules` (as einops does): a framework may be installed but broken or
slow to import, and a user who never hands us its arrays must never pay for it. Each adapter's
:attr:`Backend.name` is both its id and its ``sys.modules`` key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Backend", "Ctx"]

#: The floating dtypes the suite knows, widest last.
FLOAT_DTYPE_NAMES = ("float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True, slots=True)
class Ctx:
    """What a call learns of its input arrays, as their backend adapter answers it: what an
    encoder's private hook computes with.

    :ivar xp: the Array API namespace of the inputs.
    :ivar backend: the adapter of that namespace.
    :ivar device: the inputs' device (None inside a tracer, for a sharded array, and for a
        JAX array not committed to a device on the default one: arrays made with it are then
        not committed either).
    :ivar wide: the float dtype to compute in (float64 where the backend offers it).
    :ivar index: the namespace's default indexing dtype on that device (what
        :meth:`Backend.index_dtype` answers), given by an adapter that knows it with the rest
        (NumPy, torch) so that a call asks its adapter once; None otherwise (then ask
        :meth:`Backend.index_dtype`).
    :ivar default_float: the namespace's default real floating dtype (what
        :meth:`Backend.default_float_dtype` answers), given by an adapter for which it never
        changes (NumPy: float64); None otherwise (torch's follows ``torch.set_default_dtype``).
    """

    xp: Any
    backend: Backend
    device: Any
    wide: Any
    index: Any = None
    default_float: Any = None

    @property
    def has_float64(self) -> bool:
        """True when the wide dtype is float64 (False on float32-only backends, such as JAX
        without x64)."""
        return bool(self.wide == getattr(self.xp, "float64", None))

    def constant(self, values: Any, dtype: Any = None) -> Any:
        """A host constant (a Python number or list) as an array on the inputs' device."""
        return self.xp.asarray(values, dtype=self.wide if dtype is None else dtype,
                               device=self.device)


class Backend:
    """Adapter for one array framework. Subclass it and return instances from
    the ``peregistry_backends`` hook.

    Subclasses set :attr:`name` (the framework's module name, e.g. ``"torch"``) and implement
    :meth:`owns`, :meth:`namespace` and :meth:`native`; the rest has standard-based defaults.
    """

    #: Adapter id, equal to the framework's ``sys.modules`` key.
    name: str = ""
    #: Lower numbers are asked first when two adapters could own an array.
    priority: int = 100
    #: Keys of what the adapter keeps in its ``__dict__`` between calls (a ``Ctx``, a device),
    #: dropped by :meth:`_clear_memos` (``peregistry.rope.clear_caches()``); none by default.
    _memos: tuple[str, ...] = ()

    def _clear_memos(self) -> None:
        """Forget what the adapter keeps between calls (:attr:`_memos`); made again on next use."""
        for key in self._memos:
            self.__dict__.pop(key, None)

    # -- discovery ------------------------------------------------------------------------------
    def is_installed(self) -> bool:
        """True if the framework can be imported (checked without importing it)."""
        import importlib.util  # here, not at every start

        return importlib.util.find_spec(self.name) is not None

    def owns(self, x: Any) -> bool:
        """True if ``x`` is an array of this framework. Only called once the framework's module
        is in :data:`sys.modules`, so it may import it freely."""
        raise NotImplementedError

    def namespace(self) -> Any:
        """The Array API namespace used for this framework's arrays."""
        raise NotImplementedError

    def native(self) -> Any:
        """The module a user passes as ``xp`` (``numpy``, ``torch``, ``jax.numpy``)."""
        raise NotImplementedError

    def owns_namespace(self, xp: Any) -> bool:
        """True if the module ``xp`` (native or Array API namespace) belongs to this backend."""
        return xp is self.namespace() or xp is self.native()

    # -- dtypes ---------------------------------------------------------------------------------
    def float_dtypes(self) -> Mapping[str, Any]:
        """The floating dtypes this framework offers, by standard name."""
        xp = self.namespace()
        return {n: getattr(xp, n) for n in FLOAT_DTYPE_NAMES if hasattr(xp, n)}

    def default_float_dtype(self, device: Any = None) -> Any:
        """The dtype that ``dtype=None`` means: the namespace's default real floating dtype."""
        info = self.namespace().__array_namespace_info__()
        return info.default_dtypes(device=device)["real floating"]

    def index_dtype(self, device: Any = None) -> Any:
        """The namespace's default indexing dtype (int64; int32 on JAX without x64)."""
        info = self.namespace().__array_namespace_info__()
        return info.default_dtypes(device=device)["indexing"]

    def wide_float_dtype(self, device: Any = None) -> Any:
        """The widest float dtype available for intermediate computation (float64 if offered)."""
        return self.float_dtypes().get("float64", self.namespace().float32)

    def is_float_dtype(self, dtype: Any) -> bool:
        """True if ``dtype`` is a real floating dtype of this framework."""
        return any(dtype == d for d in self.float_dtypes().values())

    def dtype_name(self, dtype: Any) -> str:
        """The standard name of a dtype (``"bfloat16"``); ``str(dtype)`` if unknown."""
        for n, d in self.float_dtypes().items():
            if dtype == d:
                return n
        return str(dtype)

    # -- devices --------------------------------------------------------------------------------
    def device(self, x: Any) -> Any:
        """The device ``x`` lives on."""
        return x.device

    #: The device a call on ``x`` makes its arrays on (:class:`~peregistry.Ctx`'s ``device``;
    #: None leaves placement to the framework): by default :meth:`device` itself, also in a
    #: subclass that overrides only :meth:`device` (:meth:`__init_subclass__`; one call on
    #: the hot path, not two).
    placement = device

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "device" in cls.__dict__ and "placement" not in cls.__dict__:
            cls.placement = cls.__dict__["device"]

    def context(self, x: Any) -> Ctx:
        """The :class:`Ctx` of a call whose inputs are arrays of this backend, on ``x``'s
        device (:meth:`placement`)."""
        device = self.placement(x)
        return Ctx(xp=self.namespace(), backend=self, device=device,
                   wide=self.wide_float_dtype(device))

    def default_device(self) -> Any:
        """The namespace's default device (Array API ``__array_namespace_info__``)."""
        return self.namespace().__array_namespace_info__().default_device()

    def test_devices(self) -> list[Any]:
        """Devices the conformance suite places inputs on to check device preservation."""
        return [self.default_device()]

    # -- creation and conversion ----------------------------------------------------------------
    def from_numpy(self, a: np.ndarray[Any, Any], *, dtype: Any = None, device: Any = None) -> Any:
        """A framework array with the values of NumPy array ``a`` (cast to ``dtype``)."""
        xp = self.namespace()
        if dtype is not None:
            # Cast on the host first: the device may not hold a's dtype (no_float64).
            return xp.asarray(a, dtype=dtype, device=device)
        return xp.asarray(a, device=device)

    def to_numpy(self, x: Any) -> np.ndarray[Any, Any]:
        """A NumPy copy of ``x``. Dtypes NumPy lacks (bfloat16) arrive as float32."""
        import numpy as np

        try:
            return np.asarray(x)
        except (TypeError, RuntimeError, ValueError):
            xp = self.namespace()
            return np.asarray(xp.astype(x, xp.float32))

    def from_dlpack(self, x: Any, *, device: Any = None) -> Any:
        """Import a foreign array through DLPack (zero-copy where the frameworks allow)."""
        xp = self.namespace()
        out = xp.from_dlpack(x)
        if device is not None and self.device(out) != device:
            out = xp.asarray(out, device=device, copy=True)
        return out

    def random_normal(
        self, shape: tuple[int, ...], *, seed: int, std: float, dtype: Any, device: Any,
        mean: float = 0.0,
    ) -> Any:
        """Standard-normal values times ``std`` plus ``mean``, identical on every backend for one
        seed.

        They are drawn with NumPy's PCG64 in float64 on the host and transferred, so a seed means
        the same numbers in NumPy, PyTorch, JAX and array-api-strict (framework RNGs differ).
        """
        import numpy as np

        rng = np.random.default_rng(seed)
        values = rng.standard_normal(shape) * std + mean
        return self.from_numpy(values, dtype=dtype, device=device)

    def prepare_params(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        """Hook for adapters that must unwrap framework objects (e.g. parameters) before use."""
        return params

    # -- compilation (used by the conformance suite) --------------------------------------------
    def jit(self, fn: Callable[..., Any], *, dynamic: bool = False) -> Callable[..., Any] | None:
        """``fn`` compiled with this framework's tracing compiler, or None if it has none.
        ``dynamic=True`` compiles for symbolic sizes where the framework can (asked only by a
        caller that :meth:`mark_dynamic` told it can: ``torch.compile(dynamic=True)``)."""
        return None

    def mark_dynamic(self, x: Any, axis: int) -> bool:
        """Mark ``axis`` of array ``x`` as a size that changes between calls of a function
        compiled by ``jit(fn, dynamic=True)`` (the sequence axis): True if the framework compiles
        for symbolic sizes (one compilation then serves every size of that axis, and code that
        fixes the size is an error), False if its sizes are always static (a new shape is traced
        again: ``jax.jit``), the default."""
        return False

    def jit_counted(self, fn: Callable[..., Any]) -> tuple[Callable[..., Any] | None,
                                                           Callable[[], int]]:
        """``fn`` compiled as by :meth:`jit`, and a function returning how many times it has been
        traced so far (a call that retraces increases it). The default counts executions of the
        Python function, which tracing compilers run once per trace."""
        count = [0]

        def counted(*args: Any, **kwargs: Any) -> Any:
            count[0] += 1
            return fn(*args, **kwargs)

        return self.jit(counted), lambda: count[0]

    # -- timing (used by ``peregistry bench``) -------------------------------------------------
    #: True if this framework's code is normally run compiled by :meth:`jit` (JAX), so timings
    #: compile what they time; False if it is normally run eagerly (NumPy, PyTorch).
    runs_jitted: bool = False

    def block_until_ready(self, x: Any) -> Any:
        """``x``, once the computation producing it has finished: frameworks that dispatch
        asynchronously return before it has, and a timing must wait. The default returns ``x``."""
        return x

    def take(self, table: Any, idx: Any, *, axis: int) -> Any:
        """``table`` indexed along ``axis`` by an integer array ``idx`` of any shape:
        ``axis=0`` gives ``(*idx.shape, *table.shape[1:])``; ``axis=1`` (2-D tables) gives
        ``(table.shape[0], *idx.shape)``. The standard's ``take`` accepts 1-D indices only,
        so the default flattens them and reshapes the result."""
        xp = self.namespace()
        shape = tuple(idx.shape)
        out = xp.take(table, xp.reshape(idx, (-1,)), axis=axis)
        if axis == 0:
            return xp.reshape(out, (*shape, *table.shape[1:]))
        return xp.reshape(out, (table.shape[0], *shape))

    def is_tracing(self, x: Any) -> bool:
        """True if ``x`` is a placeholder of a tracing compiler (its values are unknown now).
        Encoders then neither read values on the host nor touch eager caches."""
        return False

    # -- differentiation (used by the conformance suite and the docs' training examples) -------
    def grad(self, fn: Callable[[Mapping[str, Any]], Any]) -> Callable[[Mapping[str, Any]],
                                                                       dict[str, Any]] | None:
        """``g(params) -> {name: d fn(params) / d params[name]}`` for a scalar-valued ``fn`` of a
        dict of arrays, by the framework's automatic differentiation; None if it has none.

        ``g`` never modifies ``params`` and keeps no graph alive between calls."""
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
