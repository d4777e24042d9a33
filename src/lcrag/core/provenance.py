"""Where a piece of a document's text came from: file, page, section heading path, line range.

A loader that knows pages or sections (PDF, DOCX, HTML, EPUB, Markdown) records them as :class:`Segment` s over
the extracted text's character offsets (the document's :class:`Layout`); chunks keep their offsets, so any chunk,
retrieved or located, maps back to its pages and section with a binary search. Plain text needs no layout: its
line range is counted from the offsets.
"""

from __future__ import annotations

import bisect
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from lcrag.core.text import content_words

PRINTED, PHYSICAL = "printed", "physical"  # page numbers: the PDF's page labels, or 1-based page positions


# A heading title or page label longer than this is cut, with an ellipsis (lcrag serve --max-title-chars): a title
# is a line naming a section, and each is kept in memory, in parses and in citations.
MAX_TITLE_CHARS = 500
ROOT = 0  # a layout's first section: no heading (the text before the first one)
# What a source cites of its section path: its innermost titles, each cut shorter still (an answer carries one path
# per source, and an answer is kept in the answer cache).
SOURCE_SECTION_LEVELS = 3
SOURCE_TITLE_CHARS = 120
ELLIPSIS = "\u2026"


def clipped(title: str, most: int) -> str:
    """``title`` cut to at most ``most`` characters, ending in an ellipsis when it was cut."""
    return title if len(title) <= most else title[:max(0, most - 1)].rstrip() + ELLIPSIS


@dataclass(frozen=True, slots=True)
class Segment:
    """``text[start:end]`` of the document came from ``page`` (a label) under the section ``section_id`` (an index
    into its layout's :attr:`Layout.sections`; :meth:`Layout.path` gives its heading titles)."""

    start: int
    end: int
    page: str | None = None
    section_id: int = ROOT


@dataclass(frozen=True)
class Layout:
    """The segments of a document's extracted text, in order, and how its pages are numbered. Its sections are a
    table of headings, each ``(parent's index, title)`` (index 0 is no heading), so a title is held once however
    many segments lie below it: a path is read by walking up the parents."""

    segments: tuple[Segment, ...]
    page_numbering: str | None = None  # PRINTED, PHYSICAL, or None when the format has no pages
    extractor: str = ""  # library and version that extracted the text: part of the index key
    verbatim: bool = False  # the text is the file's own (Markdown): line numbers point into the file
    sections: tuple[tuple[int, str], ...] = ((ROOT, ""),)

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

    def path(self, section_id: int) -> tuple[str, ...]:
        """The heading titles of section ``section_id``, outermost first (``()`` for none)."""
        titles = []
        while section_id != ROOT:  # a parent's index is always below its child's: the walk ends
            section_id, title = self.sections[section_id]
            titles.append(title)
        return tuple(reversed(titles))

    def memory_bytes(self) -> int:
        """The bytes this layout holds in memory: its segments, their page labels, its section table and the list
        of starts its lookups make (each object counted once, as measured by ``sys.getsizeof``)."""
        seen: set[int] = set()

        def once(value: object) -> int:
            if value is None or id(value) in seen or (type(value) is int and -5 <= value <= 256):
                return 0  # None and small integers are shared by the whole interpreter
            seen.add(id(value))
            return sys.getsizeof(value)

        size = sys.getsizeof(self.segments) + sys.getsizeof(self.sections)
        for segment in self.segments:
            size += sys.getsizeof(segment) + once(segment.start) + once(segment.end) + once(segment.page)
        for node in self.sections:
            size += sys.getsizeof(node) + once(node[0]) + once(node[1])
        return size + sys.getsizeof([]) + 8 * len(self.segments)  # the starts' list, made on the first lookup


class Sections:
    """The section table of a document being read, and the headings open above the text read so far: a loader
    :meth:`enter` s each heading as it meets it, by level (lower: outer), and cites :attr:`current` for the text
    after it. Each title is cut to ``max_title_chars`` and counted (its length and :data:`SECTION_COST`) by
    ``count``, e.g. a :class:`lcrag.documents.limits.TextBudget`'s."""

    def __init__(self, max_title_chars: int = MAX_TITLE_CHARS, count: Callable[[int], None] | None = None):
        self.table: list[tuple[int, str]] = [(ROOT, "")]
        self.max_title_chars = max_title_chars
        self._count = count
        self._open: list[tuple[float, int]] = []  # (level, index) of the open headings, outermost first

    @property
    def current(self) -> int:
        return self._open[-1][1] if self._open else ROOT

    def enter(self, level: float, title: str) -> int:
        """A heading at ``level``: it closes the open ones at its level or deeper and is the section of the text
        that follows (its index)."""
        title = clipped(title, self.max_title_chars)
        if self._count is not None:
            self._count(len(title) + SECTION_COST)
        self._open = [(lv, i) for lv, i in self._open if lv < level]
        self.table.append((self.current, title))
        self._open.append((level, len(self.table) - 1))
        return self.current

    def close_all(self) -> None:
        """No heading is open any more (a new chapter): the text that follows has no section until one comes."""
        self._open = []


# What a section and a segment weigh against a document's text budget, in characters besides their titles and page
# labels: about what each holds in memory and in a parse (a few objects), so a file of many tiny sections is counted
# for what it costs, not for its few characters of text.
SECTION_COST = 100
SEGMENT_COST = 100


class TextBuilder:
    """Builds a document's text piece by piece (paragraphs, pages), recording each piece's page and section (by
    default the current one of :attr:`sections`); ``count`` is told what each new segment weighs (its page label's
    length and :data:`SEGMENT_COST`), the text itself being counted by the loader as it reads it."""

    def __init__(self, sections: Sections | None = None, count: Callable[[int], None] | None = None) -> None:
        self.sections = sections or Sections()
        self._count = count
        self._pieces: list[str] = []
        self._segments: list[Segment] = []
        self._at = 0

    def add(self, text: str, page: str | None = None, section_id: int | None = None) -> None:
        text = text.strip()
        if not text:
            return
        section_id = self.sections.current if section_id is None else section_id
        if self._pieces:
            self._pieces.append("\n\n")
            self._at += 2
        self._pieces.append(text)
        last = self._segments[-1] if self._segments else None
        if last and last.page == page and last.section_id == section_id:
            self._segments[-1] = Segment(last.start, self._at + len(text), page, section_id)
        else:
            if self._count is not None:
                self._count(len(page or "") + SEGMENT_COST)
            self._segments.append(Segment(self._at, self._at + len(text), page, section_id))
        self._at += len(text)

    @property
    def text(self) -> str:
        return "".join(self._pieces)

    def layout(self, page_numbering: str | None, extractor: str) -> Layout:
        return Layout(tuple(self._segments), page_numbering, extractor, sections=tuple(self.sections.table))


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


def cited_section(path: tuple[str, ...]) -> list[str]:
    """What a source cites of a section path: its innermost :data:`SOURCE_SECTION_LEVELS` titles, each cut to
    :data:`SOURCE_TITLE_CHARS`, after an ellipsis when outer ones were left out (a source is one place in an answer
    of many, and the innermost heading is the one a reader looks for)."""
    kept = [clipped(title, SOURCE_TITLE_CHARS) for title in path[-SOURCE_SECTION_LEVELS:]]
    return [ELLIPSIS, *kept] if len(path) > SOURCE_SECTION_LEVELS else kept


class Placed(Protocol):
    """What :func:`locate` reads of a document (``lcrag.core.types.Document`` has it; this module sits below it)."""

    text: str
    source: str
    id: str
    parts: tuple
    line_breaks: Sequence[int]  # where the text's line breaks are, ascending


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
        section = cited_section(layout.path(next((s.section_id for s in segments if s.section_id != ROOT), ROOT)))
        place.update(pages=pages, page_numbering=layout.page_numbering if pages else None, section=section)
        if pages or section or not layout.verbatim:
            return place  # lines of extracted text would point nowhere in the user's file: the quote says where
    breaks = document.line_breaks
    place["lines"] = [bisect.bisect_left(breaks, start) + 1, bisect.bisect_left(breaks, max(start, end - 1)) + 1]
    return place


def quote(document: Placed, start: int, end: int, sentences: tuple[tuple[int, int], ...], query: str) -> dict[str, Any]:
    """``document.text[start:end]`` cited by its sentence sharing the most content words with ``query`` (function
    words such as "the" say nothing of which sentence holds the answer): that sentence as the snippet, and its
    place (:func:`locate`: a passage of 300 words often spans two pages; the sentence says which one holds the words
    cited). ``sentences``: the passage's sentence spans, relative to ``start``."""
    text = document.text[start:end]
    wanted = content_words(query)
    first, last = max(sentences, key=lambda s: len(wanted & content_words(text[s[0]:s[1]])))
    return {"snippet": snippet(text[first:last]), **locate(document, start + first, start + last)}
