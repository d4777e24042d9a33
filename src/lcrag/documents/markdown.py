"""Markdown files: the text as written (Markdown reads as plain text), with each heading's path as the section of
the lines below it. Headings are found by markdown-it-py's block parser (MIT; already installed with rich), so a ``#``
inside a fenced code block is not a heading and setext headings (underlined with ``===``) are."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

from lcrag.documents.limits import TextBudget
from lcrag.documents.loaders import read_text
from lcrag.provenance import Layout, Segment
from lcrag.errors import InputError
from lcrag.registry import LOADERS
from lcrag.types import Document


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


def markdown_layout(text: str) -> Layout:
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    segments, stack, start, section = [], [], 0, ()
    for line, level, title in _headings(text):
        at = line_starts[min(line, len(line_starts) - 1)]
        if at > start:
            segments.append(Segment(start, at, None, section))
        stack = [(lv, t) for lv, t in stack if lv < level] + [(level, title)]
        start, section = at, tuple(t for _, t in stack)
    segments.append(Segment(start, len(text), None, section))
    return Layout(tuple(s for s in segments if s.end > s.start), None, f"markdown-it-py {version('markdown-it-py')}",
                  verbatim=True)


@LOADERS.register("markdown", help="Markdown, one document per file: heading paths as sections",
                  suffixes=(".md", ".markdown"), forms=(".md",))
def load_markdown(path: Path) -> list[Document]:
    text = read_text(path)
    if not text.strip():
        raise InputError(f"{path} is empty")
    TextBudget(path).add(len(text))
    return [Document(text=text, id=path.stem, title=path.stem, source=str(path), layout=markdown_layout(text))]
