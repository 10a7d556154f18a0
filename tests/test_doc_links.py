"""Every link in the project's Markdown, and every doc reference in deploy/, resolves.

Relative links must name a file of the repository, and an anchor (``#part``)
a heading of that file, as GitHub makes anchors of headings.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# Doc references in comments and descriptions: docs/x.md#part or README.md#part.
REFERENCE = re.compile(r"\b((?:docs/[\w./-]+|README)\.md(?:#[\w-]+)?)")


def tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / name for name in out if not name.startswith("tests/")]


def slug(heading: str) -> str:
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    counts: dict[str, int] = {}
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        match = re.match(r"^#{1,6}\s+(.*)$", line)
        if match:
            base = slug(match.group(1))
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def problems_of(source: Path, target: str) -> str | None:
    if re.match(r"^[a-z]+:", target) or target.startswith("//"):
        return None  # a web address or mailto: not checked here
    name, _, anchor = target.partition("#")
    path = (source.parent / name).resolve() if name else source
    if not path.exists():
        return f"{source.relative_to(ROOT)}: link to {target}: no such file"
    if anchor and path.suffix == ".md" and anchor not in anchors(path):
        return f"{source.relative_to(ROOT)}: link to {target}: no heading #{anchor}"
    return None


MARKDOWN = tracked("*.md")


@pytest.mark.parametrize("source", MARKDOWN, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_markdown_links_resolve(source: Path) -> None:
    text = source.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    problems = [p for t in LINK.findall(text) if (p := problems_of(source, t))]
    assert not problems, "\n".join(problems)


def test_doc_references_outside_markdown_resolve() -> None:
    problems = []
    for source in tracked("deploy/*", "dashboards/*", "sidecar/*", "scripts/*", "bench/*"):
        if source.suffix in {".png", ".pyc"} or not source.is_file():
            continue
        try:
            text = source.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for reference in REFERENCE.findall(text):
            name, _, anchor = reference.partition("#")
            path = ROOT / name
            if not path.exists():
                problems.append(f"{source.relative_to(ROOT)}: {reference}: no such file")
            elif anchor and anchor not in anchors(path):
                problems.append(f"{source.relative_to(ROOT)}: {reference}: no heading #{anchor}")
    assert not problems, "\n".join(problems)


def test_the_slugs_are_githubs() -> None:
    assert slug("Scaling and sizing") == "scaling-and-sizing"
    assert slug("Producer requirement: `partition_traces_by_id: true`") == (
        "producer-requirement-partition_traces_by_id-true"
    )
    assert slug("Judge drift: provenance, canaries, diff") == "judge-drift-provenance-canaries-diff"
