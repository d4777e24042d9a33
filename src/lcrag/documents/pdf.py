"""PDF documents through pypdfium2 (PDFium's text layer; Apache-2.0/BSD, a self-contained wheel).

Measured against pypdf and pdfplumber on the Bash Reference Manual (docs/documents.md): the same text at 16x pypdf's
speed. Pages keep their printed numbers where the PDF has page labels, else their 1-based positions; the PDF's
outline (bookmarks) gives section heading paths, split inside a page where the heading's title is found."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from lcrag.documents.cleaning import clean_pages
from lcrag.documents.files import read_regular_file
from lcrag.documents.limits import ParseLimits, TextBudget
from lcrag.core.provenance import ELLIPSIS, PHYSICAL, PRINTED, clipped
from lcrag.core.errors import InputError
from lcrag.core.registry import LOADERS
from lcrag.core.types import Document

CLEANING_VERSION = 1  # bump when the cleaning rules change what text a PDF gives
# A page is an object of its own in the file (a page dictionary, and a content stream for one with text): tens of
# bytes at the least, compressed. A PDF of more pages than one per MIN_PAGE_BYTES lists pages repeatedly.
MIN_PAGE_BYTES = 16
MIN_PAGES_ALLOWED = 1000


@dataclass(frozen=True)
class Heading:
    level: int
    title: str
    page: int  # 0-based


def _open(path: Path, data: bytes):
    import pypdfium2 as pdfium

    try:
        return pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise InputError(f"{path}: the PDF is encrypted; decrypt it first, e.g. qpdf --decrypt "
                             f"--password=PASSWORD {path.name} decrypted.pdf") from None
        raise InputError(f"{path}: not a readable PDF ({str(exc).removeprefix('Failed to load document ')}); "
                         "check the file is complete, or re-save it") from None


def _outline(pdf, budget: TextBudget) -> list[Heading]:
    """The outline's headings, each title cut to the limits' ``title_chars`` and counted against ``budget`` as it is
    read (an outline may hold more titles than the pages hold text)."""
    headings = []
    for item in pdf.get_toc():
        dest = item.get_dest()
        index = dest.get_index() if dest is not None else None
        title = clipped((item.get_title() or "").strip(), budget.limits.title_chars)
        if index is not None and title:
            budget.add_headings(len(title))  # and its section's weight when it is entered
            headings.append(Heading(item.level, title, index))
    return headings


def _check_page_count(path: Path, pages: int, file_bytes: int) -> None:
    """Refuse a page tree that lists pages far more often than the file could hold them: every page is an object of
    its own, tens of bytes at the least, but a tree may list one page object a million times (PDFium counts each)."""
    most = max(MIN_PAGES_ALLOWED, file_bytes // MIN_PAGE_BYTES)
    if pages > most:
        raise InputError(f"{path.name}: {pages:,} pages in a file of {file_bytes:,} bytes, more than such a file can "
                         f"hold (at most one page per {MIN_PAGE_BYTES} bytes beyond the first {MIN_PAGES_ALLOWED:,}): "
                         "its page tree lists pages many times over (an amplification); repair it, e.g. qpdf in.pdf "
                         "out.pdf")


def _page_texts(pdf, budget: TextBudget) -> tuple[list[str], list[str]]:
    """Each page's text and label, counted against ``budget`` page by page (a page's label is read with it)."""
    texts, labels = [], []
    for i in range(len(pdf)):
        page = pdf[i]
        textpage = page.get_textpage()
        try:
            texts.append(textpage.get_text_range())
        finally:
            textpage.close()
            page.close()
        labels.append(clipped(pdf.get_page_label(i), budget.limits.title_chars))
        budget.add(len(texts[-1]) + 1)  # a page costs its text, and a page without text still costs a little
        budget.add_headings(len(labels[-1]))
    return texts, labels


def _title_pattern(title: str) -> re.Pattern:
    words = [re.escape(w) for w in title.removesuffix(ELLIPSIS).split()]  # a cut title: its first words
    return re.compile(r"(?m)^[^\n]{0,12}?" + r"\s+".join(words))


def _split_at_headings(text: str, headings: list[Heading]) -> list[tuple[int, Heading | None]]:
    """Where each of the page's headings starts (found by title at a line start, in outline order; a title not
    found starts at the page top)."""
    cuts, at = [(0, None)], 0
    for heading in headings:
        match = _title_pattern(heading.title).search(text, at)
        at = match.start() if match else at
        cuts.append((at, heading))
    return cuts


def pdf_document(path: Path, limits: ParseLimits | None = None) -> Document:
    """The document at ``path``, read within ``limits`` (None: the defaults)."""
    limits = limits or ParseLimits()
    import pypdfium2 as pdfium

    data = read_regular_file(path, limits.file_bytes)
    pdf = _open(path, data)
    try:
        _check_page_count(path, len(pdf), len(data))
        budget = TextBudget(path, limits, len(data))
        raw, labels = _page_texts(pdf, budget)
        outline = _outline(pdf, budget)
    except pdfium.PdfiumError as exc:
        raise InputError(f"{path}: a damaged PDF ({exc}); re-save it or repair it, e.g. qpdf in.pdf out.pdf") from None
    finally:
        pdf.close()
    if not any(t.strip() for t in raw):
        raise InputError(f"{path}: no text layer ({len(raw)} page(s) of images): run OCR first, e.g. ocrmypdf "
                         f"{path.name} ocr.pdf")
    numbering = PRINTED if any(labels) else PHYSICAL
    names = [label or str(i + 1) for i, label in enumerate(labels)] if numbering == PRINTED else \
        [str(i + 1) for i in range(len(raw))]
    pages = clean_pages(raw, labels if numbering == PRINTED else None)
    builder, by_page = budget.builder(), {}
    for heading in outline:  # grouped once: a long outline is not searched again for every page
        by_page.setdefault(heading.page, []).append(heading)
    for number, text in enumerate(pages):
        cuts = _split_at_headings(text, by_page.get(number, []))
        for (start, heading), (end, _) in zip(cuts, cuts[1:] + [(len(text), None)]):
            if heading is not None:
                builder.sections.enter(heading.level, heading.title)
            builder.add(text[start:end], page=names[number])
    extractor = f"pypdfium2 {version('pypdfium2')}; lcrag-pdf {CLEANING_VERSION}"
    return Document(text=builder.text, id=path.stem, title=path.stem, source=str(path),
                    layout=builder.layout(numbering, extractor))


@LOADERS.register("pdf", help="PDF text layer (pypdfium2): printed page labels or physical pages, outline sections",
                  suffixes=(".pdf",), forms=(".pdf",))
def load_pdf(path: Path, limits: ParseLimits) -> list[Document]:
    return [pdf_document(path, limits)]
