"""Clean extracted text: words hyphenated at line ends joined, running headers and footers and page numbers removed
where they repeat, whitespace normalised. Shared by every page-based loader (PDF today)."""

from __future__ import annotations

import re
from collections import Counter

# "configu-\nration" -> "configuration": a letter, a hyphen ending the line, a lower-case letter starting the next.
# The hyphen first, then the letter before it: a pattern that starts with a literal is scanned for fast.
_HYPHENATED = re.compile(r"-(?<=[^\W\d_]-)\n(?=[^\W\d_A-Z])")
# PDFium marks a hyphen it knows to be a line-end break as U+FFFE; a soft hyphen (U+00AD) is one by definition.
_SOFT_HYPHENS = re.compile(r"[\ufffe\u00ad]\n?")
_SPACES = re.compile(r"  +")
_BLANK_LINES = re.compile(r"\n\n\n+")
_DIGITS = re.compile(r"\d+")
_PAGE_NUMBER = re.compile(r"(?i)^(page\s+)?([0-9]+|[ivxlcdm]+)(\s*(/|of)\s*[0-9]+)?$")
MARGIN_LINES = 2  # lines at each end of a page that may be a running header or footer
# A margin line (digits ignored) repeated on at least this share of the pages, and on 3 pages or more, is a running
# header or footer: "Chapter 3: Basic Shell Features 15" and "16 Bash Reference Manual" both go.
REPEAT_SHARE = 0.2


def normalize(text: str) -> str:
    """Line ends as ``\\n``, runs of spaces as one space, no trailing spaces, at most one blank line in a row."""
    # str methods and literal-led patterns only: this runs over every page of a 300-page PDF.
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    for space in "\t\u00a0\f\v":  # str.translate is ten times slower here
        text = text.replace(space, " ")
    text = _SPACES.sub(" ", text).replace(" \n", "\n").replace("\n ", "\n")
    return _BLANK_LINES.sub("\n\n", text).strip()


def join_hyphenation(text: str) -> str:
    if "\ufffe" in text or "\u00ad" in text:
        text = _SOFT_HYPHENS.sub("", text)
    return _HYPHENATED.sub("", text) if "-\n" in text else text


def _margin_key(line: str) -> str:
    return _DIGITS.sub("#", line.lower())


def _margins(lines: list[str]) -> list[int]:
    """Indexes of the first and last MARGIN_LINES non-empty lines of a page (one each on a page of few lines, so
    a short page is never all margin)."""
    filled = [i for i, line in enumerate(lines) if line]  # normalised: no line is only spaces
    width = MARGIN_LINES if len(filled) > 4 * MARGIN_LINES else 1
    return sorted(set(filled[:width] + filled[-width:])) if len(filled) > 2 else []


_EDGE_NUMBER = re.compile(r"^(\d+)\b|\b(\d+)$")


def _edge_number(line: str) -> int | None:
    match = _EDGE_NUMBER.search(line)
    return int(match.group(1) or match.group(2)) if match else None


def _page_number_offset(split: list[list[str]], margins: list[list[int]]) -> int | None:
    """The printed-minus-physical page offset when margin lines start or end with a number that runs with the
    pages ("Chapter 3: Basic Shell Features 15" on the 21st page, "16 Bash Reference Manual" on the 22nd), on 3
    pages or more; such lines are running headers even when their titles change with every chapter."""
    offsets = Counter(n - page for page, lines in enumerate(split) for n in
                      {_edge_number(lines[i]) for i in margins[page]} if n is not None)
    if not offsets:
        return None
    offset, n = offsets.most_common(1)[0]
    return offset if n >= 3 and n >= REPEAT_SHARE * len(split) else None


def drop_running_margins(pages: list[str], labels: list[str] | None = None) -> list[str]:
    """``pages`` without their running headers and footers (margin lines repeated across pages, digits ignored, or
    carrying the running page number) and without bare page numbers (or the page's own label) in their margins."""
    split = [page.split("\n") for page in pages]
    margins = [_margins(lines) for lines in split]
    counts = Counter(key for lines, edge in zip(split, margins) for key in {_margin_key(lines[i]) for i in edge})
    repeated = {key for key, n in counts.items() if n >= 3 and n >= REPEAT_SHARE * len(pages) and key}
    offset = _page_number_offset(split, margins)
    cleaned = []
    for number, lines in enumerate(split):
        label = (labels[number] if labels else "").strip().lower()
        drop = {i for i in margins[number] if _margin_key(lines[i]) in repeated
                or (offset is not None and _edge_number(lines[i]) == number + offset)
                or _PAGE_NUMBER.match(lines[i]) or (label and lines[i].lower() == label)}
        if not drop:
            cleaned.append(pages[number])
            continue
        for i in sorted(drop, reverse=True):  # margins: a few lines at the ends
            del lines[i]
        cleaned.append("\n".join(lines))
    return cleaned


def clean_pages(pages: list[str], labels: list[str] | None = None) -> list[str]:
    """Each page normalised, its running margins dropped and its line-end hyphenation joined."""
    return [join_hyphenation(page) for page in drop_running_margins([normalize(p) for p in pages], labels)]
