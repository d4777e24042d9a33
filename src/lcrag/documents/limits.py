"""What reading one document may cost, checked while it is read.

A small file can ask a parser for unbounded work: one page object listed a million times in a PDF's page tree, one
chapter listed in an EPUB's spine hundreds of times, a table cell spanning millions of columns. Each loader counts
the text it yields as it goes (page by page, chapter by chapter, row by row) against a :class:`TextBudget`, so a
document over a limit is refused at the limit, never after it was all extracted. What no loader can count (a parser
stuck inside one C call) is bounded by the process it runs in: :mod:`lcrag.documents.sandbox`.

The limits in force are the context's (:func:`applied`), else the defaults; ``lcrag serve`` and ``lcrag mcp`` set
them with ``--max-document-chars``, ``--max-chars-per-byte``, ``--max-parse-seconds`` and ``--max-parse-mb``."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from lcrag.errors import InputError

# Text one document may yield: tens of books; beyond it, it is a corpus (`lcrag corpus build`).
MAX_DOCUMENT_CHARS = 50_000_000
# Text per byte of the file. Real files yield less than one character per byte as plain text or Markdown, a few as
# compressed PDF, DOCX or EPUB (their text compresses 3-5x); a file that repeats one part many times (a page, a
# chapter, a drawing) yields hundreds or millions. Documents of up to RATIO_FLOOR_CHARS are never refused for it.
MAX_CHARS_PER_BYTE = 100
RATIO_FLOOR_CHARS = 1_000_000
# The separate process a service parses an uploaded file in: wall-clock time (and as much CPU time), and memory.
MAX_PARSE_SECONDS = 60.0
MAX_PARSE_MB = 1024.0


@dataclass(frozen=True)
class ParseLimits:
    """The limits one document's reading keeps within. ``chars`` and ``chars_per_byte`` are checked by the loaders
    as they read; ``seconds`` and ``memory_mb`` by the sandbox's process (reading in-process has no deadline)."""

    seconds: float = MAX_PARSE_SECONDS
    memory_mb: float = MAX_PARSE_MB
    chars: int = MAX_DOCUMENT_CHARS
    chars_per_byte: float = MAX_CHARS_PER_BYTE

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise InputError(f"parse limit {name}: a number > 0, got {value!r}")

    def key(self) -> str:
        """What a parse's outcome depends on among the limits: the text the loaders may yield. (A refusal for the
        parsing process's time or memory holds under those limits only: :mod:`lcrag.documents.sandbox` keeps them
        with it.)"""
        return f"c{self.chars}-r{self.chars_per_byte:g}"

    def process_bounds(self) -> dict[str, float]:
        """The limits of the process a file is parsed in."""
        return {"seconds": float(self.seconds), "memory_mb": float(self.memory_mb)}


_LIMITS: contextvars.ContextVar[ParseLimits] = contextvars.ContextVar("lcrag_parse_limits", default=ParseLimits())


def current() -> ParseLimits:
    return _LIMITS.get()


@contextmanager
def applied(limits: ParseLimits) -> Iterator[ParseLimits]:
    """``limits`` in force for the loaders called inside (in this thread or task)."""
    token = _LIMITS.set(limits)
    try:
        yield limits
    finally:
        _LIMITS.reset(token)


def _size(count: int) -> str:
    return f"{count / (1 << 20):,.1f} MB" if count >= 1 << 20 else f"{count:,} bytes"


def check_chars(count: int, path: Path, max_chars: int | None = None) -> None:
    """Refuse a document whose text has reached ``count`` characters when that is over the limit."""
    limit = current().chars if max_chars is None else max_chars
    if count > limit:
        raise InputError(f"{Path(path).name}: {count:,} characters of text, over the {limit:,} limit for one document "
                         "(--max-document-chars; split it, or index it as a corpus with `lcrag corpus build`)")


class TextBudget:
    """The text one file may still yield: at most the document limit, and at most ``chars_per_byte`` per byte of
    the file beyond the first :data:`RATIO_FLOOR_CHARS`. A loader calls :meth:`add` with each piece's length as it
    reads (a page, a chapter, a table row), so an amplifying file is stopped at the limit, not after."""

    def __init__(self, path: Path, file_bytes: int | None = None, limits: ParseLimits | None = None):
        self.path = Path(path)
        self.limits = limits or current()
        self.file_bytes = self.path.stat().st_size if file_bytes is None else file_bytes
        self.chars = 0
        self.ratio_limit = max(RATIO_FLOOR_CHARS, int(self.limits.chars_per_byte * self.file_bytes))

    def add(self, count: int) -> None:
        self.chars += count
        check_chars(self.chars, self.path, self.limits.chars)
        if self.chars > self.ratio_limit:
            raise InputError(f"{self.path.name}: {self.chars:,} characters of text from a {_size(self.file_bytes)} "
                             f"file, over the {self.limits.chars_per_byte:g} per byte a document may yield "
                             "(--max-chars-per-byte): the file repeats its content many times over (an amplification),"
                             " which would cost far more to read than the file is worth")
