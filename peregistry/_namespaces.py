"""The names of the Array API namespaces the core tells apart, declared once: a namespace is
recognised by its module name (compared directly, importing nothing; array-api-compat's
``is_torch_namespace``/``is_jax_namespace`` are ``lru_cache``-wrapped, which TorchDynamo warns
about when it traces a call). The one dispatch of each layer (``Encoder._run``,
:mod:`peregistry.rope._delegation`, :mod:`peregistry._jax_eager`) reads them."""

from __future__ import annotations

from typing import Any

__all__ = ["JAX_NAMES", "NUMPY_NAMES", "TORCH_NAMES", "is_jax", "is_numpy", "is_torch"]

TORCH_NAMES = frozenset({"torch", "array_api_compat.torch"})
NUMPY_NAMES = frozenset({"numpy", "array_api_compat.numpy"})
JAX_NAMES = frozenset({"jax.numpy", "jax.experimental.array_api"})


def is_torch(xp: Any) -> bool:
    """Whether ``xp`` is torch's namespace (array-api-compat's or torch itself)."""
    return getattr(xp, "__name__", None) in TORCH_NAMES


def is_numpy(xp: Any) -> bool:
    """Whether ``xp`` is NumPy's namespace (array-api-compat's or NumPy itself)."""
    return getattr(xp, "__name__", None) in NUMPY_NAMES


def is_jax(xp: Any) -> bool:
    """Whether ``xp`` is JAX's array namespace."""
    return getattr(xp, "__name__", None) in JAX_NAMES
