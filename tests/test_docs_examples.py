"""Every plugin example in README.md and docs/*.md passes the full conformance suite on every
selected backend (``PEREGISTRY_BACKENDS``).

The blocks come from Sybil's parse of each page (its Markdown python-block parser, the one
tests_docs/ runs every block with). A plugin example is a visible python block that defines an
``Encoder`` subclass with a ``name``. The blocks of one page that define classes run in order in
one fresh namespace (a later block may use the imports of an earlier one); each encoder class
found is instantiated directly (no entry point) with its ``example_options()``, with ``dim=16``
(as the documents' test lines) where ``dim`` is required, and checked with ``check_encoder``. A
block marked ``<!-- skip: next "why" -->`` (Sybil's directive) is skipped here too, with its
reason.
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

sybil = pytest.importorskip("sybil", reason="the docs' blocks are parsed by sybil (the test extra)")
markdown = pytest.importorskip("sybil.parsers.markdown")

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DEFINES_CLASS = re.compile(r"^class \w+\(", re.M)
# shell blocks are parsed (never run here) so that a skip directive marks the block it stands before
PARSER = sybil.Sybil(parsers=[markdown.PythonCodeBlockParser(), markdown.SkipParser(),
                              *(markdown.CodeBlockParser(lang, lambda example: None) for lang in ("bash", "console"))],
                     path=str(ROOT))


def _blocks(doc: Path) -> list[tuple[int, str, str | None]]:
    """(line, code, skip reason) of each python block of ``doc`` that defines a class."""
    out = []
    document = PARSER.parse(doc)
    examples = list(document.examples())
    for i, example in enumerate(examples):
        if not isinstance(example.parsed, str) or not DEFINES_CLASS.search(example.parsed):
            continue  # a skip directive, a doctest, or no class
        if not document.text.startswith("```", example.start):
            continue  # hidden setup (it may register a plugin): not an example a reader sees
        before = examples[i - 1].parsed if i else None
        reason = before[1] or "marked skip" if isinstance(before, tuple) and before[0] == "next" else None
        out.append((example.line, str(example.parsed), reason))
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
                    reason=f"marked skip: {reason}")))
                continue
            before = set(namespace)
            exec(compile("\n" * line + code, str(doc), "exec"), namespace)  # our own documentation
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
