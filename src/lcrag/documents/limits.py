"""What reading one document may cost, checked while it is read.

A small file can ask a parser for unbounded work: one page object listed a million times in a PDF's page tree, one
chapter listed in an EPUB's spine hundreds of times, a table cell spanning millions of columns. Each loader counts
the text it yields as it goes (page by page, chapter by chapter, row by row) against a :class:`TextBudget`, so a
document over a limit is refused at the limit, never after it was all extracted. What no loader can count (a parser
stuck inside one C call) is bounded by the process it runs in: :mod:`lcrag.documents.sandbox`.

The limits are passed to each loader (``load_documents(path, limits)``; a loader is called with the file and its
:class:`ParseLimits`), never looked up: ``lcrag serve`` and ``lcrag mcp`` set them with ``--max-document-chars``,
``--max-chars-per-byte``, ``--max-parse-seconds``, ``--max-parse-mb`` and ``--max-title-chars``; the largest file
read whole is ``file_mb`` (``lcrag --max-file-mb``).

What a document holds besides its text counts too: each heading (its title, cut to ``title_chars``, and a section's
weight) and each segment of its layout (its page label and a segment's weight), so a small file of many long
headings is held to the same budget as its text would be."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from lcrag.documents.files import DEFAULT_MAX_FILE_MB, megabytes
from lcrag.core.errors import InputError
from lcrag.core.provenance import MAX_TITLE_CHARS, Sections, TextBuilder

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
    as they read; ``seconds`` and ``memory_mb`` by the sandbox's process (reading in-process has no deadline);
    ``title_chars``: the longest heading title or page label kept (a longer one is cut, with an ellipsis);
    ``file_mb``: the largest file read whole (a larger one is refused before it is read)."""

    seconds: float = MAX_PARSE_SECONDS
    memory_mb: float = MAX_PARSE_MB
    chars: int = MAX_DOCUMENT_CHARS
    chars_per_byte: float = MAX_CHARS_PER_BYTE
    title_chars: int = MAX_TITLE_CHARS
    file_mb: float = DEFAULT_MAX_FILE_MB

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise InputError(f"parse limit {name}: a number > 0, got {value!r}")
        if not isinstance(self.title_chars, int):
            raise InputError(f"parse limit title_chars: a whole number of characters, got {self.title_chars!r}")

    def key(self) -> str:
        """What a parse's outcome depends on among the limits: the text the loaders may yield and how long a title
        may be. (A refusal for the
        parsing process's time or memory holds under those limits only: :mod:`lcrag.documents.sandbox` keeps them
        with it.)"""
        return f"c{self.chars}-r{self.chars_per_byte:g}-t{self.title_chars}"

    @property
    def file_bytes(self) -> int:
        """The largest file read whole, in bytes."""
        return megabytes(self.file_mb)

    def process_bounds(self) -> dict[str, float]:
        """The limits of the process a file is parsed in."""
        return {"seconds": float(self.seconds), "memory_mb": float(self.memory_mb)}


def _size(count: int) -> str:
    return f"{count / (1 << 20):,.1f} MB" if count >= 1 << 20 else f"{count:,} bytes"


def check_chars(count: int, path: Path, limit: int, headings: int = 0) -> None:
    """Refuse a document whose text (``count`` characters, ``headings`` of them its headings' and layout's) has
    reached a count over ``limit``."""
    if count > limit:
        what = f"{count:,} characters of text" if not headings else \
            f"{count:,} characters of text and headings ({headings:,} of headings, sections and page labels)"
        raise InputError(f"{Path(path).name}: {what}, over the {limit:,} limit for one document "
                         "(--max-document-chars; split it, or index it as a corpus with `lcrag corpus build`)")


class TextBudget:
    """The text one file may still yield: at most the document limit, and at most ``chars_per_byte`` per byte of
    the file beyond the first :data:`RATIO_FLOOR_CHARS`. A loader calls :meth:`add` with each piece's length as it
    reads (a page, a chapter, a table row), so an amplifying file is stopped at the limit, not after; its headings
    and layout are counted by the :class:`Sections` and :class:`TextBuilder` it makes with :meth:`sections` and
    :meth:`builder`, through :meth:`add_headings`."""

    def __init__(self, path: Path, limits: ParseLimits, file_bytes: int | None = None):
        self.path = Path(path)
        self.limits = limits
        self.file_bytes = self.path.stat().st_size if file_bytes is None else file_bytes
        self.chars = 0
        self.headings = 0  # of chars: what headings, sections and segments weigh
        self.ratio_limit = max(RATIO_FLOOR_CHARS, int(self.limits.chars_per_byte * self.file_bytes))

    def add_headings(self, count: int) -> None:
        self.headings += count
        self.add(count)

    def sections(self) -> Sections:
        """A section table whose titles are cut to the limits' ``title_chars`` and counted here."""
        return Sections(self.limits.title_chars, self.add_headings)

    def builder(self) -> TextBuilder:
        """A text builder whose sections and segments are counted here (the loader counts the text itself)."""
        return TextBuilder(self.sections(), self.add_headings)

    def add(self, count: int) -> None:
        self.chars += count
        check_chars(self.chars, self.path, self.limits.chars, self.headings)
        if self.chars > self.ratio_limit:
            raise InputError(f"{self.path.name}: {self.chars:,} characters of text from a {_size(self.file_bytes)} "
                             f"file, over the {self.limits.chars_per_byte:g} per byte a document may yield "
                             "(--max-chars-per-byte): the file repeats its content many times over (an amplification),"
                             " which would cost far more to read than the file is worth")
