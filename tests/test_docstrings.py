"""Every public module, class, function and method of peregistry has a docstring (issue 44).

Public: a name not starting with ``_`` in a module whose dotted path has no part starting with
``_`` (``peregistry.rope.scaled``, not ``peregistry.rope._tables``), and every name the package's
front doors re-export (``peregistry``, ``peregistry.rope``, ``peregistry.testing``,
``peregistry.plugin``) wherever it is defined. A class's public methods and properties are
checked through its MRO (those defined in peregistry's own classes); a method overriding a
documented one may inherit its docstring (:func:`inspect.getdoc`), a class may not (its own
``__doc__``, not its base's and not the signature a dataclass or ``NamedTuple`` writes in).

A module that imports an optional framework (Keras, Flax, transformers, ...) is skipped, saying
which, only when that framework is not installed in this environment; the envs with it (keras,
flax, torch) check it.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import peregistry

PACKAGE_DIR = Path(peregistry.__file__).parent

#: Frameworks a public module may need at import; a module is skipped only for one of these.
OPTIONAL_FRAMEWORKS = frozenset(
    {"torch", "jax", "jaxlib", "flax", "keras", "transformers", "matplotlib", "array_api_strict"}
)

#: Modules whose re-exported names are public wherever they are defined.
FRONT_DOORS = ("peregistry", "peregistry.rope", "peregistry.testing", "peregistry.plugin")


def _public_modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if any(p.startswith("_") for p in parts):
            continue
        names.append(".".join(parts))
    return names


PUBLIC_MODULES = _public_modules()


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing in OPTIONAL_FRAMEWORKS:
            pytest.skip(f"{name} needs {missing}, which is not installed in this environment")
        raise


def _own_doc(obj: Any) -> str:
    """The docstring written for ``obj`` itself: a class's own ``__doc__``, without the one a
    dataclass or ``NamedTuple`` generates from its fields."""
    if inspect.isclass(obj):
        doc = obj.__dict__.get("__doc__") or ""
        if doc.startswith(obj.__name__ + "(") and (
            dataclasses.is_dataclass(obj) or hasattr(obj, "_fields")
        ):
            return ""
        return doc.strip()
    return (inspect.getdoc(obj) or "").strip()


def _is_ours(obj: Any) -> bool:
    return (getattr(obj, "__module__", None) or "").partition(".")[0] == "peregistry"


def _members(cls: type) -> Iterator[tuple[str, Any]]:
    """(qualified name, object) of the public methods and properties of ``cls`` and of its
    peregistry base classes."""
    for klass in cls.__mro__:
        if not _is_ours(klass):
            continue
        for name, attr in vars(klass).items():
            if name.startswith("_"):
                continue
            if isinstance(attr, (staticmethod, classmethod)):
                attr = attr.__func__
            if isinstance(attr, property):
                doc_of: Any = attr
            elif inspect.isfunction(attr):
                doc_of = getattr(cls, name, attr)  # bound to cls: getdoc finds an overridden doc
            elif hasattr(attr, "__set_name__") and hasattr(attr, "func"):  # cached_property
                doc_of = attr.func
            else:
                continue
            yield f"{klass.__module__}.{klass.__qualname__}.{name}", doc_of


def _objects(module: ModuleType) -> Iterator[tuple[str, Any]]:
    """(qualified name, object) of everything public that ``module`` defines or, for a front
    door, re-exports."""
    reexports = module.__name__ in FRONT_DOORS
    names = getattr(module, "__all__", None) if reexports else None
    for name, obj in sorted(vars(module).items()):
        if name.startswith("_") or (names is not None and name not in names):
            continue
        if not (inspect.isclass(obj) or inspect.isroutine(obj)) or not _is_ours(obj):
            continue
        if not reexports and getattr(obj, "__module__", None) != module.__name__:
            continue
        yield f"{module.__name__}.{name}", obj
        if inspect.isclass(obj):
            yield from _members(obj)


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_public_names_have_docstrings(module_name: str) -> None:
    module = _import(module_name)
    missing = [] if (module.__doc__ or "").strip() else [f"{module_name} (the module)"]
    seen: set[str] = set()
    for qualname, obj in _objects(module):
        if qualname not in seen:
            seen.add(qualname)
            if not _own_doc(obj):
                missing.append(qualname)
    assert not missing, "no docstring:\n  " + "\n  ".join(missing)


def test_front_doors_are_checked() -> None:
    """The re-exporting modules are public modules the test above walks."""
    assert set(FRONT_DOORS) <= set(PUBLIC_MODULES)
    assert len(PUBLIC_MODULES) > 30
