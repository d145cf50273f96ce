"""Every relative link of README.md and docs/*.md points at a file of the repository (and a heading, with #anchor)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def prose(text: str) -> list[tuple[int, str]]:
    """The lines of a Markdown text outside code fences, numbered from 1."""
    lines, fence = [], None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1) == fence and line.strip() == fence:
                fence = None
            continue
        if fence is None:
            lines.append((number, line))
    return lines


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the headings of PAGE: lower case, punctuation dropped, spaces as hyphens."""
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for _, line in prose(page.read_text()) if re.match(r"#{1,6} ", line)}


def dead_links(page: Path, root: Path = REPO) -> list[str]:
    """'page:line: target (why)' for each relative link of PAGE (a file under ROOT) that leads nowhere."""
    dead = []
    for number, line in prose(page.read_text()):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not ours to check
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(root)}:{number}: {target}"
            if not resolved.exists():
                dead.append(f"{where} (no such file)")
            elif not resolved.is_relative_to(root):
                dead.append(f"{where} (outside the repository)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                dead.append(f"{where} (no heading #{anchor})")
    return dead


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_dead_relative_link(page: Path) -> None:
    assert dead_links(page) == []


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = (REPO / "README.md").read_text()
    assert [p.name for p in PAGES[1:] if f"](docs/{p.name})" not in readme] == []


def test_the_checker_finds_a_dead_link_and_a_dead_anchor(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (tmp_path / "outside.md").write_text("# Outside\n")
    (root / "other.md").write_text("# A heading: here (too)\n")
    page = root / "page.md"
    page.write_text("[ok](other.md#a-heading-here-too) [gone](missing.md) [bad](other.md#nowhere)\n"
                    "```\n[in a fence](missing.md)\n```\n[web](https://example.org/x) [up](../outside.md)\n")
    assert dead_links(page, root) == ["page.md:1: missing.md (no such file)",
                                      "page.md:1: other.md#nowhere (no heading #nowhere)",
                                      "page.md:5: ../outside.md (outside the repository)"]
