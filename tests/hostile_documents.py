"""Small files that ask a loader for unbounded work (issue 34, items 1-4), written by the tests, never committed: each
is a few to a hundred kilobytes and, read naively, costs minutes of CPU and gigabytes of memory."""

from __future__ import annotations

import copy
import random
import zipfile
import zlib
from pathlib import Path

from document_fixtures import pdf_bytes

WORDS = ("harbour crane valve pump gauge hose filter belt seal bearing shift report spring committee record "
         "engine signal cable winch anchor rudder deck hatch ballast keel").split()


def prose(chars: int, seed: int = 7) -> str:
    """``chars`` characters of varied words (they compress like real text, about 3 to 1)."""
    rng = random.Random(seed)
    out, size = [], 0
    while size < chars:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars]


def page_tree_pdf(path: Path, fan_out: int = 1000, depth: int = 2, line_chars: int = 80, lines: int = 32) -> Path:
    """Item 2: a page tree whose every level lists one node ``fan_out`` times, so one page object (with
    ``lines`` lines of text) stands for ``fan_out ** depth`` pages; 1000 x 1000 is a 1,000,000-page PDF of 17 KB."""
    text = prose(line_chars * lines)
    shown = [text[i:i + line_chars].replace("(", "").replace(")", "") for i in range(0, len(text), line_chars)]
    ops = "BT /F1 9 Tf 11 TL 40 760 Td " + " ".join(f"({line}) Tj T*" for line in shown) + " ET"
    stream = zlib.compress(ops.encode("latin-1"), 9)
    objects = {1: b"<< /Type /Catalog /Pages 2 0 R >>",
               3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
               4: b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream"}
    nodes = [2] + [10 + level for level in range(depth - 1)]  # the Pages nodes, root first
    page = 10 + depth
    for level, node in enumerate(nodes):
        child = nodes[level + 1] if level + 1 < len(nodes) else page
        parent = b"" if level == 0 else b" /Parent %d 0 R" % nodes[level - 1]
        count = fan_out ** (depth - level)
        objects[node] = (b"<< /Type /Pages%s /Count %d /Kids [" % (parent, count)
                         + b" ".join([b"%d 0 R" % child] * fan_out) + b"] >>")
    objects[page] = (b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >>"
                     b" /Contents 4 0 R >>" % nodes[-1])
    path.write_bytes(pdf_bytes(objects))
    return path


def blank_page_tree_pdf(path: Path, fan_out: int = 1000, depth: int = 2) -> Path:
    """A page tree as :func:`page_tree_pdf`'s, of pages without text: no character limit ever trips."""
    return page_tree_pdf(path, fan_out, depth, lines=0)


def spanned_docx(path: Path, span: int = 300_000_000) -> Path:
    """Item 1: a DOCX whose one table cell spans ``span`` grid columns (``<w:gridSpan w:val="N"/>``); python-docx's
    ``row.cells`` lists the cell N times."""
    import docx

    document = docx.Document()
    document.add_paragraph("A table follows.")
    table = document.add_table(rows=1, cols=1)
    table.cell(0, 0).text = "one cell, spanned " + prose(200)
    table.rows[0]._tr.tc_lst[0].get_or_add_tcPr().grid_span = span
    document.save(path)
    return path


def merged_docx(path: Path, rows: int = 20_000) -> Path:
    """A DOCX whose first column is one cell merged down ``rows`` rows (``<w:vMerge/>``): python-docx finds each
    row's text by walking up the merge, so reading it all is quadratic in the rows."""
    import docx

    document = docx.Document()
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "merged"
    table.cell(0, 1).text = "row 0"
    table.rows[0]._tr.tc_lst[0].vMerge = "restart"
    template = table.rows[0]._tr
    for i in range(1, rows):
        tr = copy.deepcopy(template)
        first, second = tr.tc_lst
        first.vMerge = "continue"
        for p in first.p_lst[1:]:
            first.remove(p)
        first.p_lst[0].clear_content()
        second.p_lst[0].clear_content()
        second.p_lst[0].add_r().text = f"row {i}"
        table._tbl.append(tr)
    document.save(path)
    return path


_CONTAINER = ("<?xml version='1.0'?><container version='1.0' xmlns='urn:oasis:names:tc:opendocument:xmlns:container'>"
              "<rootfiles><rootfile full-path='OEBPS/content.opf' media-type='application/oebps-package+xml'/>"
              "</rootfiles></container>")


def spine_epub(path: Path, repeats: int = 300, chapter_chars: int = 900_000, aliases: int = 1) -> Path:
    """Item 3: an EPUB whose spine lists one ~900 KB chapter ``repeats`` times (through ``aliases`` manifest items
    naming the same file, so neither the idref nor the item repeats when ``aliases == repeats``)."""
    paragraphs = prose(chapter_chars)
    body = "".join(f"<p>{paragraphs[i:i + 600]}</p>" for i in range(0, len(paragraphs), 600))
    chapter = ("<?xml version='1.0' encoding='utf-8'?><html xmlns='http://www.w3.org/1999/xhtml'><head><title>One"
               f"</title></head><body><h1>One</h1>{body}</body></html>")
    items = "".join(f"<item id='c{i}' href='text/one.xhtml' media-type='application/xhtml+xml'/>"
                    for i in range(aliases))
    spine = "".join(f"<itemref idref='c{i % aliases}'/>" for i in range(repeats))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as book:
        book.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        book.writestr("META-INF/container.xml", _CONTAINER)
        book.writestr("OEBPS/content.opf",
                      "<?xml version='1.0'?><package xmlns='http://www.idpf.org/2007/opf' version='3.0'>"
                      "<metadata xmlns:dc='http://purl.org/dc/elements/1.1/'><dc:title>Spine</dc:title></metadata>"
                      f"<manifest>{items}</manifest><spine>{spine}</spine></package>")
        book.writestr("OEBPS/text/one.xhtml", chapter)
    return path


def emphasis_markdown(path: Path, repeats: int = 1_500_000) -> Path:
    """Item 4: ``"*a_"`` repeated (4.5 MB at the default): markdown-it's inline parser builds a token per
    delimiter and balances them, ~375 times the input in memory."""
    path.write_text("# Title\n\n" + "*a_" * repeats + "\n", encoding="utf-8")
    return path


def form_bomb_pdf(path: Path, fan_out: int = 200, depth: int = 3) -> Path:
    """One page that draws a form ``fan_out`` times, which draws another ``fan_out`` times, ``depth`` deep, the
    last showing a line of text: ``fan_out ** depth`` lines from one small page, all inside one PDFium call."""
    objects = {1: b"<< /Type /Catalog /Pages 2 0 R >>",
               2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               4: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"}
    first = 10
    for level in range(depth):
        number = first + level
        if level == depth - 1:
            ops = b"BT /F1 9 Tf 40 700 Td (" + prose(60).encode() + b") Tj ET"
            resources = b"/Font << /F1 4 0 R >>"
        else:
            ops = b" ".join([b"/X Do"] * fan_out)
            resources = b"/XObject << /X %d 0 R >>" % (number + 1)
        stream = zlib.compress(ops, 9)
        objects[number] = (b"<< /Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << %s >> /Length %d "
                           b"/Filter /FlateDecode >>\nstream\n" % (resources, len(stream)) + stream + b"\nendstream")
    page_ops = zlib.compress(b" ".join([b"/X Do"] * fan_out), 9)
    objects[5] = b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(page_ops) + page_ops + b"\nendstream"
    objects[3] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /XObject << /X %d 0 R >> >>"
                  b" /Contents 5 0 R >>" % first)
    path.write_bytes(pdf_bytes(objects))
    return path
