"""Word documents (.docx) through python-docx (MIT): paragraphs and tables in body order, headings ("Title",
"Heading 1"..."Heading 9" styles, or an outline level) as section paths, tables as rows of cells. Pages where Word
recorded them: the page breaks it rendered when it last saved the file (``w:lastRenderedPageBreak``), or explicit
page breaks; a file with neither has sections only."""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path

from lcrag.documents.archives import check_text, open_archive
from lcrag.documents.files import read_regular_file
from lcrag.documents.limits import ParseLimits, TextBudget
from lcrag.core.errors import InputError
from lcrag.core.provenance import PHYSICAL
from lcrag.core.registry import LOADERS
from lcrag.core.types import Document

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_HEADING = re.compile(r"^(?:heading|überschrift|titre|titolo|encabezado)\s*(\d)$", re.IGNORECASE)


def _open(path: Path, data: bytes):
    import docx
    from docx.opc.exceptions import OpcError
    from lxml.etree import XMLSyntaxError

    try:
        open_archive(data, path).close()  # before python-docx inflates any part: it reads each whole at once
        return docx.Document(io.BytesIO(data))
    except (OpcError, zipfile.BadZipFile, KeyError, ValueError, XMLSyntaxError) as exc:
        # An OLE2 container is an encrypted .docx or an old binary .doc; a broken zip or part is a damaged file.
        kind = "an encrypted or old-format (.doc) Word file" if data[:4] == b"\xd0\xcf\x11\xe0" else "not a valid .docx"
        raise InputError(f"{path}: {kind} ({exc.__class__.__name__}); open it in Word or LibreOffice and save it as "
                         ".docx") from None


def _heading_levels(doc) -> dict[str, int]:
    """Heading level by paragraph style id, read once: python-docx's ``paragraph.style`` looks the style up anew
    for every paragraph (measured: 20x the cost of reading the text)."""
    levels = {}
    for style in doc.styles.element.iterfind(f"{_W}style"):
        name_element = style.find(f"{_W}name")
        name = (name_element.get(f"{_W}val") if name_element is not None else "") or ""
        match = _HEADING.match(name.strip())
        if name.strip().lower() == "title" or match:
            levels[style.get(f"{_W}styleId")] = 0 if not match else int(match.group(1))
    return levels


def _heading_level(paragraph, levels: dict[str, int]) -> int | None:
    style = paragraph._p.find(f"{_W}pPr/{_W}pStyle")  # lxml directly: python-docx's accessors run an XPath each
    return levels.get(style.get(f"{_W}val")) if style is not None else None


def _has_page_breaks(data: bytes, member: str) -> bool:
    """Whether the body records any page break: a byte search of its XML, so a document without pages costs no
    walk of every paragraph. Read a step at a time, so the search holds no second copy of the body."""
    tail = b""
    with zipfile.ZipFile(io.BytesIO(data)) as z, z.open(member) as xml:
        while chunk := xml.read(1 << 20):
            window = tail + chunk
            if b"lastRenderedPageBreak" in window or b'w:type="page"' in window:
                return True
            tail = window[-32:]  # a mark split across two steps
    return False


def _page_breaks(element) -> int:
    rendered = explicit = 0
    for e in element.iter(f"{_W}lastRenderedPageBreak", f"{_W}br"):
        if e.tag == f"{_W}br":
            explicit += e.get(f"{_W}type") == "page"
        else:
            rendered += 1
    return rendered or explicit


def _rows(table, budget: TextBudget) -> str:
    """The table as lines of cells separated by ' | ', each ``<w:tc>`` read once: python-docx's ``row.cells`` lists a
    cell once per grid column it spans (``<w:gridSpan w:val="300000000"/>`` makes 300 million) and finds a vertically
    merged cell's text by walking up the rows (quadratic in a long merge). A merged cell's text is shown in each row
    it covers, as Word shows it; a row's repeated cells once. Counted against ``budget`` row by row."""
    from docx.table import _Cell

    lines, above = [], {}  # above: the text of the cell starting at each grid column of the row before
    for tr in table._tbl.tr_lst:
        column, here, cells = tr.grid_before, {}, []
        for tc in tr.tc_lst:
            if tc.vMerge == "continue":
                text = above.get(column, "")
            else:
                text = " ".join(_Cell(tc, table).text.split())
            here[column] = text
            cells.append(text)
            column += max(1, tc.grid_span)
        above = here
        lines.append(" | ".join(dict.fromkeys(cells)))
        budget.add(len(lines[-1]) + 1)
    return "\n".join(lines)


def docx_document(path: Path, limits: ParseLimits | None = None) -> Document:
    """The document at ``path``, read within ``limits`` (None: the defaults)."""
    limits = limits or ParseLimits()
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    data = read_regular_file(path, limits.file_bytes)
    doc = _open(path, data)
    paged = _has_page_breaks(data, doc.part.partname.membername)  # the body the package names, not a fixed path
    page, levels, budget = 1, _heading_levels(doc), TextBudget(path, limits, len(data))
    builder = budget.builder()
    for block in doc.iter_inner_content():
        if isinstance(block, Paragraph):
            level = _heading_level(block, levels)
            text = block.text
            budget.add(len(text))  # as it grows: the walk of a huge body is the slow part
            if level is not None and text.strip():
                builder.sections.enter(level, " ".join(text.split()))
        elif isinstance(block, Table):
            text = _rows(block, budget)  # counted row by row as it is read
        else:
            continue
        builder.add(text, page=str(page))
        page += _page_breaks(block._element) if paged else 0
    if not check_text(builder.text, path, limits.chars):
        raise InputError(f"{path}: the Word document holds no text")
    layout = builder.layout(PHYSICAL, f"python-docx {version('python-docx')}")
    if page == 1:  # no page break recorded: the file has no pages to cite, only sections
        layout = replace(layout, page_numbering=None, segments=tuple(replace(s, page=None) for s in layout.segments))
    return Document(text=builder.text, id=path.stem, title=path.stem, source=str(path), layout=layout)


@LOADERS.register("docx", help="Word .docx (python-docx): paragraphs and tables, heading styles as sections",
                  suffixes=(".docx",), forms=(".docx",))
def load_docx(path: Path, limits: ParseLimits) -> list[Document]:
    return [docx_document(path, limits)]
