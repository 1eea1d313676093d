"""The docs stay small enough to read (docs/ under 70 KB in all), and every link between the README and the docs
pages reaches an existing page and heading."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [*DOCS, ROOT / "README.md"]
LIMIT = 70_000  # bytes, as `wc -c` counts them
LINK = re.compile(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)")


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors for a page's headings: lowercase, punctuation dropped, spaces as hyphens."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    headings = re.findall(r"^#+ (.+)$", prose, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def broken_links(pages) -> list[str]:
    anchors = {page.resolve(): heading_anchors(page.read_text()) for page in pages}
    broken = []
    for page in pages:
        for target, anchor in LINK.findall(page.read_text()):
            if target.startswith(("http:", "https:", "mailto:")):
                continue
            path = (page.parent / target).resolve() if target else page.resolve()
            if not path.exists() or (anchor and path.suffix == ".md" and anchor not in anchors.get(path, set())):
                broken.append(f"{page.name}: ({target}#{anchor})" if anchor else f"{page.name}: ({target})")
    return broken


def test_docs_stay_under_70_kb():
    sizes = {page.name: page.stat().st_size for page in DOCS}
    assert len(sizes) > 5 and sum(sizes.values()) < LIMIT, sorted(sizes.items(), key=lambda item: -item[1])


def test_links_between_pages_resolve():
    assert broken_links(PAGES) == []


def test_a_broken_link_or_anchor_is_found(tmp_path):
    (tmp_path / "a.md").write_text("# Start here\n\n## What it does, in short\n\n```\n# not a heading\n```\n")
    (tmp_path / "b.md").write_text(
        "[ok](a.md#what-it-does-in-short) [self](#own) [gone](a.md#not-a-heading) [missing](c.md)\n\n## Own\n"
    )
    assert broken_links([tmp_path / "a.md", tmp_path / "b.md"]) == ["b.md: (a.md#not-a-heading)", "b.md: (c.md)"]
