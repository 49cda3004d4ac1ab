"""Every plugin example in README.md and docs/*.md passes the full conformance suite on every
selected backend (``PEREGISTRY_BACKENDS``).

A plugin example is a ``python`` code block that defines an ``Encoder`` subclass with a
``name``. The python blocks of one document that define classes run in order in one fresh
namespace (a reader follows a page top to bottom: a later block may use the imports of an
earlier one); each encoder class found is instantiated directly (no entry point) with its
``example_options()``, with ``dim=16`` (as the documents' test lines) where ``dim`` is
required, and checked with
``check_encoder``.

A block that is deliberately not runnable is marked by an HTML comment on the line before its
fence: ``<!-- no-check: reason -->``; the reason is shown in the skip. No block needs it today.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import peregistry as per
from peregistry.testing import check_encoder
from peregistry.testing._core import selected_backends

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
NO_CHECK = re.compile(r"<!--\s*no-check:\s*(.*?)\s*-->\s*$")
DEFINES_CLASS = re.compile(r"^class \w+\(", re.M)


def _blocks(doc: Path) -> list[tuple[int, str, str | None]]:
    """(line, code, no-check reason) of each python block of ``doc`` that defines a class."""
    text = doc.read_text()
    out = []
    for m in BLOCK.finditer(text):
        if not DEFINES_CLASS.search(m.group(1)):
            continue
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = NO_CHECK.search(before)
        out.append((text[:m.start()].count("\n") + 1, m.group(1), marker and marker.group(1)))
    return out


def _examples() -> list[Any]:
    """One pytest param per (document, encoder class) found."""
    params = []
    for doc in DOCUMENTS:
        # A real module: torch.compile re-imports the module of the code it traces.
        module = types.ModuleType(f"docs_example_{doc.stem.replace('-', '_')}")
        sys.modules[module.__name__] = module
        namespace = module.__dict__
        for line, code, reason in _blocks(doc):
            where = f"{doc.relative_to(ROOT)}:{line}"
            if reason is not None:
                params.append(pytest.param(where, None, id=where, marks=pytest.mark.skip(
                    reason=f"marked no-check: {reason}")))
                continue
            before = set(namespace)
            exec(compile(code, where, "exec"), namespace)  # our own documentation
            for name, obj in namespace.items():
                if (name not in before and isinstance(obj, type) and issubclass(obj, per.Encoder)
                        and bool(getattr(obj, "name", None))):
                    params.append(pytest.param(where, obj, id=f"{where}:{name}"))
    return params


EXAMPLES = _examples()


def _options(cls: type[per.Encoder]) -> dict[str, Any]:
    options: dict[str, Any] = dict(cls.example_options())
    spec = cls._option_specs.get("dim")
    if spec is not None and spec.required:
        options["dim"] = 16  # what the documents' own test lines use
    return options


def test_the_documents_have_plugin_examples() -> None:
    found = {where.split(":")[0] for where, *_ in (p.values for p in EXAMPLES)}
    assert {"README.md", "docs/plugins.md"} <= found, found


@pytest.mark.parametrize("backend_name", [b.name for b in selected_backends()])
@pytest.mark.parametrize(("where", "cls"), EXAMPLES)
def test_plugin_example_passes_the_full_suite(where: str, cls: type[per.Encoder],
                                              backend_name: str) -> None:
    enc = cls(**_options(cls))
    report = check_encoder(enc, backends=backend_name)
    assert report.ok, f"the plugin example at {where} ({enc!r}) fails the suite:\n{report}"
