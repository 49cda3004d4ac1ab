"""docs/api.md is what ``docs/make_api.py`` writes from the code (issue 45): Markdown that reads
on the repository's web page, with each signature as the source annotates it; the signatures
(and headings and tables) cannot drift from the code."""

from __future__ import annotations

import importlib.util
import typing
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _make_api() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_api", ROOT / "docs" / "make_api.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_api_md_states_the_api_the_code_has() -> None:
    """Headings, signatures and tables as the code gives them (a docstring's prose may be a
    run behind; ``python docs/make_api.py`` renews all of it)."""
    make_api = _make_api()
    page = make_api.signature_view((ROOT / "docs" / "api.md").read_text())
    code = make_api.signature_view(make_api.render())
    stale = [line for line in code if line not in page] + [f"(gone) {line}" for line in page
                                                            if line not in code]
    assert page == code, ("docs/api.md is stale: run python docs/make_api.py and commit it:\n"
                          + "\n".join(stale[:20]))


def test_api_md_shows_the_typed_signatures() -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    assert "{eval-rst}" not in text and ".. auto" not in text  # (raw on the repository's page)
    assert "get_encoder(name: Literal['rotary'], /, **options: Any) -> Rotary" in text
    assert "get_encoder(name: str, kind: type[_E], /, **options: Any) -> _E" in text
    assert "| `rotary` | `Rotary` |" in text


def test_markdown_of_a_docstring() -> None:
    md = _make_api().markdown(
        "Use :func:`~peregistry.get_encoder` or :class:`peregistry.Encoder`, ``x``::\n\n"
        "    enc = f()\n\nthen\n\n>>> 1 + 1\n2\n\n:param x: the x.")
    assert md.splitlines() == [
        "Use `get_encoder` or `peregistry.Encoder`, `x`:", "", "```", "enc = f()", "```", "",
        "then", "", "```pycon", ">>> 1 + 1", "2", "```", "", "- `x`: the x."]


def test_every_section_member_exists() -> None:
    module = _make_api()
    for _, mod, _, members in module.SECTIONS:
        for path in members:
            module._resolve(mod, path)  # (AttributeError names a member that went away)
    assert typing.get_overloads(importlib.import_module("peregistry").get_encoder)
