"""Small real documents for the tests, written here: PDF (by hand: pages of Helvetica text, optional page labels
and outline), DOCX (python-docx), HTML, EPUB (a zip of XHTML). Each holds facts on known pages or under known
headings, so the tests can check provenance end to end."""

from __future__ import annotations

import zipfile
from pathlib import Path


def _pdf_string(text: str) -> str:
    return "(" + text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"


def write_pdf(path: Path, pages: list[list[str]], labels: tuple[str, int] | None = None,
              outline: list[tuple[str, int]] = (), header: str | None = None) -> Path:
    """A PDF whose page i shows the lines ``pages[i]`` (and ``header`` with the page number on top, a running
    header); ``labels=("r", 3)``: the first 3 pages numbered i, ii, iii, the rest 1, 2, ...; ``outline``:
    (title, 0-based page) bookmarks at level 0."""
    objects: dict[int, bytes] = {}
    n = len(pages)
    page_ids = [10 + 2 * i for i in range(n)]
    for i, lines in enumerate(pages):
        shown = ([f"{header} {i + 1}"] if header else []) + lines
        ops = ["BT", "/F1 11 Tf", "14 TL", "72 740 Td"] + [f"{_pdf_string(line)} Tj T*" for line in shown] + ["ET"]
        stream = "\n".join(ops).encode("latin-1")
        objects[page_ids[i] + 1] = b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream"
        objects[page_ids[i]] = (f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 "
                                f"0 R >> >> /Contents {page_ids[i] + 1} 0 R >>").encode()
    objects[3] = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
    objects[2] = f"<< /Type /Pages /Kids [{' '.join(f'{p} 0 R' for p in page_ids)}] /Count {n} >>".encode()
    catalog = "<< /Type /Catalog /Pages 2 0 R"
    if labels:
        style, roman = labels
        catalog += f" /PageLabels << /Nums [0 << /S /{style} >> {roman} << /S /D /St 1 >>] >>"
    if outline:
        first = 200
        for j, (title, page) in enumerate(outline):
            links = (f" /Prev {first + j - 1} 0 R" if j else "") + (f" /Next {first + j + 1} 0 R" if j + 1 < len(outline) else "")
            objects[first + j] = (f"<< /Title {_pdf_string(title)} /Parent 4 0 R /Dest [{page_ids[page]} 0 R /XYZ 0 792 0]"
                                  f"{links} >>").encode()
        objects[4] = (f"<< /Type /Outlines /First {first} 0 R /Last {first + len(outline) - 1} 0 R "
                      f"/Count {len(outline)} >>").encode()
        catalog += " /Outlines 4 0 R"
    objects[1] = (catalog + " >>").encode()
    path.write_bytes(pdf_bytes(objects))
    return path


def pdf_bytes(objects: dict[int, bytes]) -> bytes:
    """A PDF file of numbered objects (1: the catalog), with its cross-reference table."""
    out, offsets = bytearray(b"%PDF-1.4\n"), {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n" % number + objects[number] + b"\nendobj\n"
    size = max(objects) + 1
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for number in range(1, size):
        out += (b"%010d 00000 n \n" % offsets[number]) if number in offsets else b"0000000000 65535 f \n"
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return bytes(out)


def write_docx(path: Path, blocks: list[tuple[str, object]]) -> Path:
    """A .docx from blocks: ("title", text), ("h1"/"h2", text), ("p", text), ("table", rows), ("page", None)."""
    import docx

    doc = docx.Document()
    for kind, value in blocks:
        if kind == "title":
            doc.add_heading(value, level=0)
        elif kind in ("h1", "h2", "h3"):
            doc.add_heading(value, level=int(kind[1]))
        elif kind == "p":
            doc.add_paragraph(value)
        elif kind == "table":
            table = doc.add_table(rows=len(value), cols=len(value[0]))
            for r, row in enumerate(value):
                for c, cell in enumerate(row):
                    table.cell(r, c).text = cell
        elif kind == "page":
            doc.add_page_break()
    doc.save(path)
    return path


FILLER = ("The committee met again in the spring and reviewed every report that had been filed during the "
          "preceding year, noting which recommendations had been carried out and which were still pending. ")


def html_page(title: str, sections: list[tuple[str, list[str]]]) -> str:
    """A web page with navigation, a script, a sidebar and a footer around an article of h2 sections."""
    body = "".join(f"<h2>{h}</h2>" + "".join(f"<p>{p} {FILLER}</p>" for p in ps) for h, ps in sections)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title>"
            "<script>window.tracker = function () { return 'analytics'; };</script>"
            "<style>body { font-family: sans-serif; }</style></head><body>"
            "<nav><ul><li><a href='/'>Home</a></li><li><a href='/shop'>Shop</a></li><li><a href='/login'>Log in</a>"
            "</li></ul></nav>"
            f"<main><article><h1>{title}</h1>{body}</article></main>"
            "<aside><h3>Related</h3><ul><li><a href='/a'>Ten tips for spring</a></li></ul></aside>"
            "<footer><p>Copyright 2024 Example Corp. All rights reserved. Privacy policy. Cookie settings.</p></footer>"
            "</body></html>")


def write_epub(path: Path, chapters: list[tuple[str, list[str]]]) -> Path:
    """An EPUB 3 with one XHTML file per (title, paragraphs) chapter and a navigation document."""
    xhtml = ("<?xml version='1.0' encoding='utf-8'?><html xmlns='http://www.w3.org/1999/xhtml'><head><title>{t}"
             "</title></head><body><h1>{t}</h1>{ps}</body></html>")
    with zipfile.ZipFile(path, "w") as book:
        book.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        book.writestr("META-INF/container.xml",
                      "<?xml version='1.0'?><container version='1.0' xmlns='urn:oasis:names:tc:opendocument:xmlns:"
                      "container'><rootfiles><rootfile full-path='OEBPS/content.opf' media-type='application/oebps-"
                      "package+xml'/></rootfiles></container>")
        items = "".join(f"<item id='c{i}' href='text/ch{i}.xhtml' media-type='application/xhtml+xml'/>"
                        for i in range(len(chapters)))
        spine = "".join(f"<itemref idref='c{i}'/>" for i in range(len(chapters)))
        book.writestr("OEBPS/content.opf",
                      "<?xml version='1.0'?><package xmlns='http://www.idpf.org/2007/opf' version='3.0'>"
                      "<metadata xmlns:dc='http://purl.org/dc/elements/1.1/'><dc:title>Test book</dc:title></metadata>"
                      f"<manifest><item id='nav' href='nav.xhtml' properties='nav' media-type='application/xhtml+xml'/>"
                      f"{items}</manifest><spine>{spine}</spine></package>")
        links = "".join(f"<li><a href='text/ch{i}.xhtml'>{t}</a></li>" for i, (t, _) in enumerate(chapters))
        book.writestr("OEBPS/nav.xhtml",
                      "<?xml version='1.0'?><html xmlns='http://www.w3.org/1999/xhtml' xmlns:epub='http://www.idpf.org"
                      f"/2007/ops'><body><nav epub:type='toc'><ol>{links}</ol></nav></body></html>")
        for i, (title, paragraphs) in enumerate(chapters):
            ps = "".join(f"<p>{p} {FILLER}</p>" for p in paragraphs)
            book.writestr(f"OEBPS/text/ch{i}.xhtml", xhtml.format(t=title, ps=ps))
    return path


CRANE_FACT = "The reset code for the harbour crane is 7781."
_PARTS = "pumps valves gauges hoses filters belts seals bearings".split()


def crane_manual(folder: Path) -> Path:
    """An 8-page PDF manual with an outline (Overview from page 1, Crane Controls from page 6) whose physical page 6
    states CRANE_FACT; every other line varies by page, so nothing is taken for a running header."""
    pages = [[f"Routine notes about the {p} open this page.", f"The {p} are inspected weekly by the day shift.",
              f"Worn {p} are replaced from stores, and the {p} log is signed."] for p in _PARTS]
    pages[5][1] = CRANE_FACT
    return write_pdf(folder / "crane.pdf", pages, outline=[("Overview", 0), ("Crane Controls", 5)])


# A tool's manual in which "Which algorithm does it use?" has a different answer in each command's section: a follow-up
# that needs the conversation to be understood.
TOOL_COMMANDS = {
    "fit": "The fit command trains a model on the rows of a table. Internally fit minimises the loss with the "
           "L-BFGS algorithm, stopping after 200 iterations.",
    "plot": "The plot command draws charts of a table. The algorithm it uses to place the points is a "
            "force-directed layout, which it runs for a few seconds.",
    "export": "The export command writes a trained model to disk. The export format it uses is ONNX, so other "
              "runtimes can read the file.",
}


def tool_manual(folder: Path) -> Path:
    """manual.md: a section per command (# The fit command, ...), each padded to about 60 words."""
    filler = "This section of the manual is kept short, and the examples that follow it are in the appendix. " * 3
    path = folder / "manual.md"
    path.write_text("\n\n".join(f"# The {name} command\n\n{text} {filler}" for name, text in TOOL_COMMANDS.items()))
    return path


LONG_HEADING = 50_000  # characters in heading_markdown's top heading, 100 times the titles' default cut


def heading_markdown(path: Path, title_chars: int = LONG_HEADING, sections: int = 5000) -> Path:
    """One huge top heading over many small sub-sections (114 KB at the defaults)."""
    path.write_text("# " + "A" * title_chars + "\n\n" + "".join(f"## h{i}\n\n" for i in range(sections)))
    return path
