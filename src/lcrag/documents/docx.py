"""Word documents (.docx) through python-docx (MIT): paragraphs and tables in body order, headings ("Title",
"Heading 1"..."Heading 9" styles, or an outline level) as section paths, tables as rows of cells. Pages where Word
recorded them: the page breaks it rendered when it last saved the file (``w:lastRenderedPageBreak``), or explicit
page breaks; a file with neither has sections only."""

from __future__ import annotations

import io
import re
import zipfile
from importlib.metadata import version
from pathlib import Path

from lcrag.documents.files import read_regular_file
from lcrag.provenance import PHYSICAL, TextBuilder
from lcrag.errors import InputError
from lcrag.registry import LOADERS
from lcrag.types import Document

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_HEADING = re.compile(r"^(?:heading|überschrift|titre|titolo|encabezado)\s*(\d)$", re.IGNORECASE)


def _open(path: Path, data: bytes):
    import docx
    from docx.opc.exceptions import OpcError
    from lxml.etree import XMLSyntaxError

    try:
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
    for style in doc.styles:
        name = (style.name or "").strip()
        match = _HEADING.match(name)
        if name.lower() == "title" or match:
            levels[style.style_id] = 0 if name.lower() == "title" else int(match.group(1))
    return levels


def _heading_level(paragraph, levels: dict[str, int]) -> int | None:
    ppr = paragraph._p.pPr
    style = ppr.pStyle.val if ppr is not None and ppr.pStyle is not None else None
    return levels.get(style) if style else None


def _page_breaks(element) -> int:
    rendered = len(element.findall(f".//{_W}lastRenderedPageBreak"))
    explicit = sum(1 for br in element.iter(f"{_W}br") if br.get(f"{_W}type") == "page")
    return rendered or explicit


def _rows(table) -> str:
    lines = []
    for row in table.rows:
        cells = list(dict.fromkeys(" ".join(cell.text.split()) for cell in row.cells))  # merged cells repeat
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def docx_document(path: Path) -> Document:
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    doc = _open(path, read_regular_file(path))
    paged = any(True for _ in doc.element.body.iter(f"{_W}lastRenderedPageBreak")) or any(
        br.get(f"{_W}type") == "page" for br in doc.element.body.iter(f"{_W}br"))
    builder, stack, page, levels = TextBuilder(), [], 1, _heading_levels(doc)
    for block in doc.iter_inner_content():
        section = tuple(title for _, title in stack)
        if isinstance(block, Paragraph):
            level = _heading_level(block, levels)
            text = block.text
            if level is not None and text.strip():
                stack = [(lv, t) for lv, t in stack if lv < level] + [(level, " ".join(text.split()))]
                section = tuple(title for _, title in stack)
        elif isinstance(block, Table):
            text = _rows(block)
        else:
            continue
        builder.add(text, page=str(page) if paged else None, section=section)
        page += _page_breaks(block._element) if paged else 0
    if not builder.text:
        raise InputError(f"{path}: the Word document holds no text")
    return Document(text=builder.text, id=path.stem, title=path.stem, source=str(path),
                    layout=builder.layout(PHYSICAL if paged else None, f"python-docx {version('python-docx')}"))


@LOADERS.register("docx", help="Word .docx (python-docx): paragraphs and tables, heading styles as sections",
                  suffixes=(".docx",), forms=(".docx",))
def load_docx(path: Path) -> list[Document]:
    return [docx_document(path)]
