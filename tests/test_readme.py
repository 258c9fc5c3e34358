"""The README is for a user: short, its links and the docs' links resolve, its two-commands block
carries no dated timing (timings go stale; the placeholders under it are filled by measurement), and
it names both matrices. Pure text checks: fast tier."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
MAX_LINES = 250

_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_INLINE_CODE = re.compile(r"`[^`]*`")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_CLOCK = re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?\b")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code removed (links there are not links)."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(_INLINE_CODE.sub("", line))
    return out


def fenced_blocks(text: str) -> list[str]:
    blocks, cur, fenced = [], [], False
    for line in text.splitlines():
        if _FENCE.match(line.lstrip()):
            if fenced:
                blocks.append("\n".join(cur))
                cur = []
            fenced = not fenced
            continue
        if fenced:
            cur.append(line)
    return blocks


def relative_links(text: str) -> list[str]:
    links = []
    for line in prose_lines(text):
        for target in _LINK.findall(line):
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, https:, mailto:, …
                continue
            links.append(target)
    return links


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation dropped, spaces -> '-'."""
    h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    h = h.replace("`", "").replace("*", "").strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in _headings_with_code(text):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def _headings_with_code(text: str) -> list[str]:
    """Heading lines outside fences, inline code kept (its text is part of the anchor)."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.append(line)
    return out


def broken_links(md: Path, text: str | None = None) -> list[str]:
    """Relative links of `md` (text: another version of it) whose file, or #anchor in a .md, is missing."""
    text = md.read_text() if text is None else text
    bad = []
    for target in relative_links(text):
        path, _, anchor = target.partition("#")
        dest = (md.parent / path).resolve() if path else md
        if not dest.exists():
            bad.append(f"{md.name}: {target}: no such file")
        elif anchor and dest.suffix == ".md" and dest.is_file():
            body = text if dest == md else dest.read_text()
            if anchor not in anchors(body):
                bad.append(f"{md.name}: {target}: no heading with that anchor")
    return bad


def commands_block_timings(text: str) -> list[str]:
    """Dates and clock times inside the fenced block(s) that hold `make run`."""
    found = []
    for block in fenced_blocks(text):
        if "make run" in block:
            found += _DATE.findall(block) + _CLOCK.findall(block)
    return found


def test_readme_is_short() -> None:
    n = len(README.read_text().splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines; at most {MAX_LINES} (move reference material to docs/)"


@pytest.mark.parametrize("md", [README, *DOCS], ids=lambda p: p.name)
def test_relative_links_resolve(md: Path) -> None:
    assert broken_links(md) == []


def test_readme_links_every_docs_page() -> None:
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in relative_links(README.read_text())}
    missing = [p.name for p in DOCS if p.resolve() not in linked]
    assert missing == [], f"README.md's Documentation list does not link {missing}"


def test_two_commands_block_has_no_dated_timing() -> None:
    text = README.read_text()
    assert any("make run" in b for b in fenced_blocks(text)), "README.md has no fenced block with `make run`"
    assert commands_block_timings(text) == []


def test_readme_names_both_matrices() -> None:
    text = README.read_text()
    assert "make nightly" in text
    assert "scenarios/quick.yaml" in text


def test_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    """The helpers fail on the kind of README this test guards against."""
    old = ("# x\n\n```sh\nmake run   # 35 min 27 s, measured on 2026-11-26 at 13:28\n```\n\n"
           "[gone](docs/no-such-page.md) [bad anchor](#nowhere) [ok](#x) [web](https://example.org)\n")
    f = tmp_path / "README.md"
    f.write_text(old)
    assert commands_block_timings(old) == ["2026-11-26", "13:28"]
    assert broken_links(f) == ["README.md: docs/no-such-page.md: no such file",
                               "README.md: #nowhere: no heading with that anchor"]
    assert slug("The `docker` backend and `docker-compose.yml`") == "the-docker-backend-and-docker-composeyml"


def test_the_findings_table_gives_one_short_line_per_incident() -> None:
    """A row's result cell is a line, not a paragraph: the figures and their spread live in docs/findings.md."""
    text = README.read_text()
    section = text[text.index("## What it found"):text.index("## The two commands")]
    rows = [r for r in section.splitlines() if r.startswith("| ") and not r.startswith("| incident")]
    assert len(rows) >= 10
    for r in rows:
        cells = [c.strip() for c in r.strip().strip("|").split(" | ")]
        assert len(cells) == 5, r
        assert len(cells[3]) <= 200, f"result cell of {len(cells[3])} characters: {cells[3]}"
