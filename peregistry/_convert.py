"""``peregistry.convert``: move arrays between frameworks, DLPack first (backends are those of
the current registry, :func:`peregistry._services.current_services`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .kinds._services import current_services

if TYPE_CHECKING:
    from .kinds._services import Services


def convert(params: Any, xp: Any, device: Any = None) -> Any:
    registry = current_services()
    target = registry.backend_of_namespace(xp)
    if isinstance(params, Mapping):
        return {k: _one(v, target, device, registry) for k, v in params.items()}
    if isinstance(params, list | tuple):
        return type(params)(_one(v, target, device, registry) for v in params)
    return _one(params, target, device, registry)


def _one(x: Any, target: Any, device: Any, registry: Services) -> Any:
    source = registry.backend_of(x)
    if source is None:
        raise TypeError(
            f"convert: expected arrays of a registered backend, got {type(x).__qualname__}"
        )
    if source is target:
        if device is None or source.device(x) == device:
            return x
        return target.namespace().asarray(x, device=device, copy=True)
    if hasattr(x, "detach"):  # torch: a parameter or tensor in a graph
        x = x.detach()
    name = source.dtype_name(x.dtype)
    dtype = target.float_dtypes().get(name) if name in target.float_dtypes() else None
    try:
        out = target.from_dlpack(x, device=device)
    except Exception:
        import numpy as np

        host = source.to_numpy(x)  # bfloat16 arrives as float32; cast back below
        out = target.from_numpy(np.ascontiguousarray(host), device=device)
    if dtype is not None and out.dtype != dtype:
        out = target.namespace().astype(out, dtype)
    return out
