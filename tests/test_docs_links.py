"""The Markdown pages render on the repository's web page as they do in the Sphinx build.

GitHub shows ``README.md`` and ``docs/*.md`` as they are and resolves a relative link or image
against the page's folder, so every such target must be a file in the repository (tracked by git,
not drawn at build time), every ``page.md#anchor`` must name a heading of that page (GitHub's
slugs, which myst's ``myst_heading_anchors`` also uses), and every table must have its delimiter
row (a table split by a blank line renders as a paragraph of ``| … |`` text). The pictures in
``docs/images/`` are the ones ``docs/draw_images.py`` draws, each embedded by some page.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from conftest import require_matplotlib

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"),
                *(ROOT / "plugins").glob("*/README.md")])

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) and ![alt](target), with an optional "title"; the text may hold `code` and [x].
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
HTML_TARGET = re.compile(r"<(?:img|a)\b[^>]*?\b(?:src|href)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@cache
def _lines_outside_code(page: Path) -> list[tuple[int, str]]:
    """``(line number, text)`` of the lines of a page outside fenced code blocks."""
    out = []
    fence: str | None = None
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence = match.group(1)
            else:
                out.append((number, line))
        elif match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
                and not line.strip()[len(match.group(1)):]:
            fence = None
    return out


def _blank_code_spans(line: str) -> str:
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def _targets(page: Path) -> list[tuple[int, str, bool]]:
    """``(line number, target, is_image)`` of every link and image of a page."""
    found = []
    for number, raw in _lines_outside_code(page):
        line = _blank_code_spans(raw)
        for match in INLINE_LINK.finditer(line):
            found.append((number, match.group(1), match.group(0).startswith("!")))
        if definition := REFERENCE_DEF.match(line):
            found.append((number, definition.group(1), False))
        for match in HTML_TARGET.finditer(line):
            found.append((number, match.group(1), match.group(0).lower().startswith("<img")))
    return found


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lower-cased, punctuation dropped, spaces to ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # [text](url) -> text
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """The heading anchors of a page, numbered ``-1``, ``-2`` … for repeats, as GitHub does."""
    seen: Counter[str] = Counter()
    out = set()
    for _, line in _lines_outside_code(page):
        if heading := HEADING.match(line):
            slug = github_slug(heading.group(2))
            out.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
            seen[slug] += 1
    return frozenset(out)


@cache
def tracked_files() -> frozenset[str] | None:
    """The files git tracks in this checkout (``None`` outside a git work tree)."""
    try:
        result = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return frozenset(result.stdout.decode().split("\0")) - {""}


def _is_tracked(path: Path) -> bool:
    tracked = tracked_files()
    if tracked is None:
        return True
    rel = _rel(path)
    return rel in tracked or (path.is_dir() and any(f.startswith(rel + "/") for f in tracked))


def _problem(page: Path, target: str, is_image: bool) -> str | None:
    """Why ``target`` of ``page`` does not resolve on the repository's web page (``None``: it does)."""
    if SCHEME.match(target) or target.startswith("//"):
        return None                                         # a web address: not checked offline
    path_part, _, fragment = target.partition("#")
    if path_part.startswith("/"):
        return "absolute path: GitHub resolves it against the site, not the repository; use a relative one"
    dest = (page.parent / unquote(path_part)).resolve() if path_part else page
    if not dest.is_relative_to(ROOT):
        return "points outside the repository"
    if not dest.exists():
        return f"{_rel(dest)} does not exist"
    if not _is_tracked(dest):
        return f"{_rel(dest)} is not tracked by git (a fresh clone does not have it)"
    if is_image and not dest.is_file():
        return f"{_rel(dest)} is not a file"
    if fragment and dest.suffix == ".md" and fragment not in anchors(dest):
        return f"{_rel(dest)} has no heading with the anchor #{fragment}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_links_and_images_resolve_to_tracked_files(page: Path) -> None:
    problems = [f"{_rel(page)}:{number}: ({target}) {why}"
                for number, target, is_image in _targets(page)
                if (why := _problem(page, target, is_image)) is not None]
    assert not problems, "links that do not resolve on the repository's web page:\n" + "\n".join(problems)


def _cells(row: str) -> int:
    """Cells of a GFM table row: pipes split cells (inside code spans too) unless escaped."""
    inner = row.strip()
    inner = inner.removeprefix("|")
    if inner.endswith("|") and not inner.endswith("\\|"):
        inner = inner[:-1]
    return len(re.split(r"(?<!\\)\|", inner))


DELIMITER_ROW = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_tables_have_a_header_and_delimiter_row(page: Path) -> None:
    # Pipes inside code spans split cells too in GFM: the rows are read as they are.
    blocks: list[list[tuple[int, str]]] = []
    previous = 0
    for number, line in _lines_outside_code(page):
        if line.lstrip().startswith("|"):
            if blocks and previous == number - 1:
                blocks[-1].append((number, line))
            else:
                blocks.append([(number, line)])
            previous = number
    problems = []
    for block in blocks:
        start, header = block[0]
        if len(block) < 2 or not DELIMITER_ROW.match(block[1][1]):
            problems.append(f"{_rel(page)}:{start}: rows without a header and `| --- |` row above "
                            "(a blank line inside a table?): they render as plain text")
            continue
        if _cells(block[1][1]) != _cells(header):
            problems.append(f"{_rel(page)}:{start}: header has {_cells(header)} cells, "
                            f"delimiter row {_cells(block[1][1])}: not a table")
        problems += [f"{_rel(page)}:{number}: {_cells(row)} cells, the header {_cells(header)}: "
                     "the extra cells are not shown" for number, row in block[2:]
                     if _cells(row) > _cells(header)]
    assert not problems, "\n".join(problems)


def _draw_images_module() -> Any:
    """``docs/draw_images.py`` as a module (importing it imports no matplotlib: drawing does)."""
    name = "_peregistry_docs_draw_images"
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "draw_images.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module              # its dataclass looks its module up while being made
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


def test_doc_images_are_drawn_by_the_script_and_each_shown_on_a_page() -> None:
    module = _draw_images_module()
    drawn = {image.file for image in module.IMAGES} | set(module.STUDY_IMAGES)
    images_dir = ROOT / "docs" / "images"
    on_disk = {p.name for p in images_dir.glob("*.png")}
    assert on_disk == drawn, (f"docs/images/ has {sorted(on_disk - drawn)} that docs/draw_images.py does "
                              f"not draw, and lacks {sorted(drawn - on_disk)} that it draws: "
                              "run `python docs/draw_images.py` and commit docs/images/")
    embedded = {(page.parent / unquote(target)).resolve()
                for page in PAGES for _, target, is_image in _targets(page) if is_image}
    unused = sorted(name for name in drawn if (images_dir / name).resolve() not in embedded)
    assert not unused, f"docs/images/{unused} are drawn but no page shows them"


@pytest.mark.parametrize(("heading", "slug"), [
    ("Speed", "speed"),
    ("`cos_sin` layouts: half and interleaved", "cos_sin-layouts-half-and-interleaved"),
    ("Popular models", "popular-models"),
    ("What [YaRN](https://arxiv.org/abs/2309.00071) changes?", "what-yarn-changes"),
    ("M-RoPE (Qwen2-VL)", "m-rope-qwen2-vl"),
])
def test_github_slug(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug


def test_checker_finds_what_breaks_a_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The checks catch what they are for: a missing picture, a bad anchor, a split table.
    tmp_path = tmp_path.resolve()
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "tracked_files", lambda: frozenset({"page.md", "other.md"}))
    (tmp_path / "other.md").write_text("# Title\n\n## A section\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("![x](images/missing.png) [ok](other.md#a-section) [bad](other.md#nope)\n"
                    "[web](https://example.org) `[code](nowhere.md)`\n\n"
                    "| a | b |\n| --- | --- |\n| 1 | 2 |\n\n| 3 | 4 |\n", encoding="utf-8")
    problems = [why for _, target, is_image in _targets(page) if (why := _problem(page, target, is_image))]
    assert problems == ["images/missing.png does not exist", "other.md has no heading with the anchor #nope"]
    with pytest.raises(AssertionError, match="render as plain text"):
        test_tables_have_a_header_and_delimiter_row(page)


def test_draw_images_check_names_stale_missing_and_extra_images(tmp_path: Path) -> None:
    require_matplotlib()
    import numpy as np
    from PIL import Image

    draw_images = _draw_images_module()
    images = [image for image in draw_images.IMAGES if image.file == "rotary_angles.png"]
    (path,) = draw_images.draw(tmp_path, images, {})
    assert draw_images.check(tmp_path, images, {}) == []              # a redraw gives the same pixels
    with Image.open(path) as im:
        pixels = np.array(im.convert("RGBA"))
    pixels[0, 0] = 255 - pixels[0, 0]
    Image.fromarray(pixels).save(path)
    (tmp_path / "old.png").write_bytes(b"")
    problems = draw_images.check(tmp_path, images, {})
    assert problems[0].endswith(f"/rotary_angles.png: stale, 1 of {pixels.shape[0] * pixels.shape[1]} pixels "
                                "differ from what the code draws"), problems
    assert problems[1].endswith("/old.png: not drawn by docs/draw_images.py (add it to IMAGES or delete it)")
    assert len(problems) == 2, problems
    path.unlink()
    assert draw_images.check(tmp_path, images, {})[0].endswith("/rotary_angles.png: missing")
