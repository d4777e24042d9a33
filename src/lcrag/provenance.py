"""Where a piece of a document's text came from: file, page, section heading path, line range.

A loader that knows pages or sections (PDF, DOCX, HTML, EPUB, Markdown) records them as :class:`Segment` s over
the extracted text's character offsets (the document's :class:`Layout`); chunks keep their offsets, so any chunk,
retrieved or located, maps back to its pages and section with a binary search. Plain text needs no layout: its
line range is counted from the offsets.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

PRINTED, PHYSICAL = "printed", "physical"  # page numbers: the PDF's page labels, or 1-based page positions


@dataclass(frozen=True)
class Segment:
    """``text[start:end]`` of the document came from ``page`` (a label) under the heading path ``section``."""

    start: int
    end: int
    page: str | None = None
    section: tuple[str, ...] = ()


@dataclass(frozen=True)
class Layout:
    """The segments of a document's extracted text, in order, and how its pages are numbered."""

    segments: tuple[Segment, ...]
    page_numbering: str | None = None  # PRINTED, PHYSICAL, or None when the format has no pages
    extractor: str = ""  # library and version that extracted the text: part of the index key
    verbatim: bool = False  # the text is the file's own (Markdown): line numbers point into the file

    @cached_property
    def _starts(self) -> list[int]:  # computed once per layout: the binary search below runs per chunk
        return [s.start for s in self.segments]

    def overlapping(self, start: int, end: int) -> list[Segment]:
        first = max(0, bisect.bisect_right(self._starts, start) - 1)
        found = []
        for segment in self.segments[first:]:
            if segment.start >= max(end, start + 1):
                break
            if segment.end > start:
                found.append(segment)
        return found


class TextBuilder:
    """Builds a document's text piece by piece (paragraphs, pages), recording each piece's page and section."""

    def __init__(self) -> None:
        self._pieces: list[str] = []
        self._segments: list[Segment] = []
        self._at = 0

    def add(self, text: str, page: str | None = None, section: tuple[str, ...] = ()) -> None:
        text = text.strip()
        if not text:
            return
        if self._pieces:
            self._pieces.append("\n\n")
            self._at += 2
        self._pieces.append(text)
        last = self._segments[-1] if self._segments else None
        if last and last.page == page and last.section == section:
            self._segments[-1] = Segment(last.start, self._at + len(text), page, section)
        else:
            self._segments.append(Segment(self._at, self._at + len(text), page, section))
        self._at += len(text)

    @property
    def text(self) -> str:
        return "".join(self._pieces)

    def layout(self, page_numbering: str | None, extractor: str) -> Layout:
        return Layout(tuple(self._segments), page_numbering, extractor)


@dataclass
class Source:
    """One cited place: the file, its page(s) or section, line range for plain text, and the quoted snippet.

    ``how`` is ``retrieved`` (the reader saw this chunk) or ``located`` (an LC answer: the chunk that best matches
    question and answer, found afterwards in the document's index)."""

    file: str
    snippet: str
    how: str = "retrieved"
    pages: list[str] = field(default_factory=list)
    page_numbering: str | None = None
    section: list[str] = field(default_factory=list)
    lines: list[int] | None = None  # first and last line, 1-based, for text without pages or sections
    chunk: int | None = None
    score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def place(self) -> str:
        """``p. 3`` / ``pp. 3–4`` / ``l. 10–42``, with `` (§ Subsection)`` (the innermost heading) when known."""
        if self.pages:
            where = f"p. {self.pages[0]}" if len(self.pages) == 1 else f"pp. {self.pages[0]}–{self.pages[-1]}"
        elif self.lines:
            where = f"l. {self.lines[0]}" if self.lines[0] == self.lines[1] else f"l. {self.lines[0]}–{self.lines[1]}"
        else:
            where = ""
        section = f"§ {self.section[-1]}" if self.section else ""
        if where and section:
            return f"{where} ({section})"
        return where or section


def format_sources(sources: list[Source]) -> str:
    """``manual.pdf p. 3; p. 17 (§ Shell Parameters)``: a file is named once, before its first place; located
    sources (LC answers) are marked, and physical page numbers said."""
    parts, last_file = [], None
    for source in sources:
        name = Path(source.file).name
        place = source.place()
        text = place if name == last_file and place else f"{name} {place}".strip()
        if text not in parts and f"{name} {place}".strip() not in parts:  # one place cited once
            parts.append(text)
        last_file = name
    line = "; ".join(parts)
    notes = []
    if any(s.page_numbering == PHYSICAL for s in sources):
        notes.append("physical page numbers")
    if sources and all(s.how == "located" for s in sources):
        notes.append("located after the answer, not retrieved")
    return line + (f" ({'; '.join(notes)})" if notes else "")


_SPACE = re.compile(r"\s+")


def snippet(text: str, limit: int = 240) -> str:
    """The chunk's text on one line, cut at a word boundary near ``limit`` characters."""
    flat = _SPACE.sub(" ", text).strip()
    if len(flat) <= limit:
        return flat
    cut = flat.rfind(" ", 0, limit)
    return flat[: cut if cut > limit // 2 else limit] + " …"


class Placed(Protocol):
    """What :func:`locate` reads of a document (``lcrag.types.Document`` has it; this module sits below it)."""

    text: str
    source: str
    id: str
    parts: tuple


def locate(document: Placed, start: int, end: int) -> dict[str, Any]:
    """File, pages, page numbering, section and (for plain text) lines of ``document.text[start:end]``."""
    parts = document.parts
    if parts:
        offsets = [offset for offset, _ in parts]
        i = max(0, bisect.bisect_right(offsets, start) - 1)
        offset, part = parts[i]
        return locate(part, max(0, start - offset), max(0, min(end, offset + len(part.text)) - offset))
    place: dict[str, Any] = {"file": document.source or document.id}
    layout = getattr(document, "layout", None)
    if layout is not None and layout.segments:
        segments = layout.overlapping(start, end)
        pages = list(dict.fromkeys(s.page for s in segments if s.page))
        section = next((s.section for s in segments if s.section), ())
        place.update(pages=pages, page_numbering=layout.page_numbering if pages else None, section=list(section))
        if pages or section or not layout.verbatim:
            return place  # lines of extracted text would point nowhere in the user's file: the quote says where
    text = document.text
    first = text.count("\n", 0, start) + 1
    place["lines"] = [first, first + text.count("\n", start, max(start, end - 1))]
    return place
