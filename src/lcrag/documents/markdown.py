"""Markdown files: the text as written (Markdown reads as plain text), with each heading's path as the section of
the lines below it. Headings are found by markdown-it-py's block parser (MIT; already installed with rich), so a ``#``
inside a fenced code block is not a heading and setext headings (underlined with ``===``) are."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

from lcrag.documents.limits import ParseLimits, TextBudget
from lcrag.documents.loaders import read_text
from lcrag.core.provenance import SEGMENT_COST, Layout, Sections, Segment
from lcrag.core.errors import InputError
from lcrag.core.registry import LOADERS
from lcrag.core.types import Document


def _headings(text: str) -> list[tuple[int, int, str]]:
    """(first line, level, title) of every heading, in order. Only the block structure is parsed: the inline
    parse (emphasis, links) would build a token tree of the whole text that no heading needs (``"*a_"`` repeated
    over 4.5 MB: 21 s and 1.7 GB); a heading's title is its inline token's source text either way."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").disable(["inline", "text_join"]).parse(text)
    found = []
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and token.map:
            found.append((token.map[0], int(token.tag[1:]), tokens[i + 1].content.strip()))
    return found


def markdown_layout(text: str, budget: TextBudget | None = None) -> Layout:
    """Each heading's section over the lines below it, up to the next heading; its titles cut and counted, and its
    segments counted, by ``budget``'s limits."""
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    sections = budget.sections() if budget is not None else Sections()
    segments, start = [], 0
    for line, level, title in _headings(text):
        at = line_starts[min(line, len(line_starts) - 1)]
        if at > start:
            segments.append(Segment(start, at, None, sections.current))
        sections.enter(level, title)
        start = at
    segments.append(Segment(start, len(text), None, sections.current))
    kept = tuple(s for s in segments if s.end > s.start)
    if budget is not None:
        budget.add_headings(SEGMENT_COST * len(kept))
    return Layout(kept, None, f"markdown-it-py {version('markdown-it-py')}", verbatim=True,
                  sections=tuple(sections.table))


@LOADERS.register("markdown", help="Markdown, one document per file: heading paths as sections",
                  suffixes=(".md", ".markdown"), forms=(".md",))
def load_markdown(path: Path, limits: ParseLimits) -> list[Document]:
    text = read_text(path, limits.file_bytes)
    if not text.strip():
        raise InputError(f"{path} is empty")
    budget = TextBudget(path, limits)
    budget.add(len(text))
    return [Document(text=text, id=path.stem, title=path.stem, source=str(path), layout=markdown_layout(text, budget))]
