"""Fixtures of the vision plugin's tests: ``backend``, one per backend the conformance suite
selects (``PEREGISTRY_BACKENDS``), its framework imported; ``wide``, its widest float dtype."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from peregistry.testing._core import selected_backends


@pytest.fixture(params=[b.name for b in selected_backends()])
def backend(request: pytest.FixtureRequest) -> Any:
    from peregistry.registry import default_registry

    b = default_registry.backend(request.param)
    importlib.import_module(b.name)
    return b


@pytest.fixture
def wide(backend: Any) -> str:
    """``"float64"`` where the backend has it, else ``"float32"`` (JAX without x64)."""
    return "float64" if "float64" in backend.float_dtypes() else "float32"
