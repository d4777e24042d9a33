"""Every format's loader on documents written by the tests: text, pages, sections, cleaning, and the one-line
refusals of documents that cannot be read."""

from __future__ import annotations

import logging

import pytest
from document_fixtures import FILLER, write_docx, write_epub, write_pdf

from lcrag.documents import load_document, load_documents
from lcrag.core.errors import InputError
from lcrag.core.provenance import PHYSICAL, PRINTED, locate

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()


def _pages(n: int = 6, extra: dict[int, str] | None = None) -> list[list[str]]:
    pages = [[f"The {WORDS[i]} part opens this page with some text.", f"The {WORDS[i]} section describes a configu-",
              "ration of the system in detail.", f"It ends the {WORDS[i]} page."] for i in range(n)]
    for page, line in (extra or {}).items():
        pages[page].insert(2, line)
    return pages


def _where(doc, needle: str) -> dict:
    at = doc.text.index(needle)
    return locate(doc, at, at + len(needle))


def test_pdf_pages_are_physical_without_labels_and_running_headers_are_dropped(tmp_path):
    doc = load_document(write_pdf(tmp_path / "guide.pdf", _pages(extra={3: "The harbour code is BLUEFIN."}),
                                  header="User Guide"))
    assert doc.layout.page_numbering == PHYSICAL
    place = _where(doc, "BLUEFIN")
    assert place["pages"] == ["4"] and place["page_numbering"] == PHYSICAL
    assert "User Guide" not in doc.text  # a running header with the page number, on every page
    assert "configuration of the system" in doc.text and "configu-" not in doc.text  # hyphenation joined


def test_pdf_page_labels_give_printed_numbers_and_the_outline_gives_sections(tmp_path):
    pdf = write_pdf(tmp_path / "manual.pdf", _pages(extra={2: "Install with the setup wizard.", 4: "Dock at pier nine."}),
                    labels=("r", 2), outline=[("Preface", 0), ("Installation", 2), ("Harbour", 4)])
    doc = load_document(pdf)
    assert doc.layout.page_numbering == PRINTED
    assert _where(doc, "The alpha part") == {"file": str(pdf), "pages": ["i"], "page_numbering": PRINTED,
                                             "section": ["Preface"]}
    assert _where(doc, "setup wizard")["pages"] == ["1"] and _where(doc, "setup wizard")["section"] == ["Installation"]
    assert _where(doc, "pier nine")["pages"] == ["3"] and _where(doc, "pier nine")["section"] == ["Harbour"]
    assert _where(doc, "The zeta part")["section"] == ["Harbour"]  # the section runs on to later pages


def test_pdf_outline_heading_found_mid_page_splits_the_page(tmp_path):
    pages = _pages(3)
    pages[1] = ["Text before the heading on page two.", "Chapter Two", "Text after the heading on page two."]
    doc = load_document(write_pdf(tmp_path / "m.pdf", pages, outline=[("Chapter One", 0), ("Chapter Two", 1)]))
    assert _where(doc, "before the heading")["section"] == ["Chapter One"]
    assert _where(doc, "after the heading")["section"] == ["Chapter Two"]
    assert _where(doc, "after the heading")["pages"] == ["2"]


def test_pdf_without_a_text_layer_is_refused_naming_ocr(tmp_path):
    with pytest.raises(InputError, match=r"scan\.pdf: no text layer .*run OCR first, e\.g\. ocrmypdf"):
        load_document(write_pdf(tmp_path / "scan.pdf", [[], []]))


def test_encrypted_pdf_is_refused(tmp_path):
    from pypdf import PdfReader, PdfWriter

    plain = write_pdf(tmp_path / "plain.pdf", _pages(2))
    writer = PdfWriter(clone_from=PdfReader(plain))
    writer.encrypt(user_password="secret", algorithm="RC4-128")
    with open(tmp_path / "locked.pdf", "wb") as f:
        writer.write(f)
    with pytest.raises(InputError, match=r"locked\.pdf: the PDF is encrypted; decrypt it first"):
        load_document(tmp_path / "locked.pdf")


@pytest.mark.parametrize("name, data, message", [
    ("broken.pdf", b"%PDF-1.4\n1 0 obj << /Type /Catalog", r"broken\.pdf: not a readable PDF"),
    ("broken.docx", b"PK\x03\x04 not really a zip", r"broken\.docx: not a valid \.docx"),
    ("old.docx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600, r"old\.docx: an encrypted or old-format"),
    ("broken.epub", b"PK\x03\x04 nope", r"broken\.epub: not a valid EPUB"),
    ("image.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256)) * 4, r"image\.png: \.png is not a format lcrag "
     r"reads \(it reads \.txt, \.jsonl, \.md, \.pdf, \.docx, \.html or \.epub\)"),
])
def test_damaged_or_unknown_files_are_one_line_errors(tmp_path, name, data, message):
    (tmp_path / name).write_bytes(data)
    with pytest.raises(InputError, match=message) as info:
        load_document(tmp_path / name)
    assert "\n" not in str(info.value)


def test_docx_headings_tables_and_page_breaks(tmp_path):
    path = write_docx(tmp_path / "report.docx", [
        ("title", "Annual Report"), ("h1", "Budget"), ("p", "We spent forty dollars on tea."),
        ("table", [["item", "cost"], ["tea", "40"]]), ("page", None), ("h1", "Staff"), ("h2", "Hiring"),
        ("p", "Ada was hired in May.")])
    doc = load_document(path)
    assert "item | cost\ntea | 40" in doc.text
    assert _where(doc, "forty dollars")["section"] == ["Annual Report", "Budget"]
    assert _where(doc, "tea | 40")["section"] == ["Annual Report", "Budget"]
    hired = _where(doc, "Ada was hired")
    assert hired["section"] == ["Annual Report", "Staff", "Hiring"] and hired["pages"] == ["2"]
    assert _where(doc, "forty dollars")["pages"] == ["1"]


def test_docx_without_page_breaks_has_sections_only(tmp_path):
    doc = load_document(write_docx(tmp_path / "memo.docx", [("h1", "Memo"), ("p", "Lunch is at noon.")]))
    assert _where(doc, "Lunch") == {"file": str(tmp_path / "memo.docx"), "pages": [], "page_numbering": None,
                                    "section": ["Memo"]}


def test_html_table_rows_are_kept_as_text_rows(tmp_path):
    page = tmp_path / "prices.html"
    table = "<table><tr><th>Plan</th><th>Price</th></tr><tr><td>Basic</td><td>5 EUR</td></tr></table>"
    page.write_text(f"<html><body><main><h1>Prices</h1><p>{FILLER}</p>{table}<p>{FILLER}</p></main></body></html>")
    assert "Plan | Price\nBasic | 5 EUR" in load_document(page).text


def test_html_without_main_text_is_refused(tmp_path):
    page = tmp_path / "empty.html"
    page.write_text("<html><head><script>var a = 1;</script></head><body><nav></nav></body></html>")
    with pytest.raises(InputError, match=r"empty\.html: no main text found"):
        load_document(page)


def test_epub_chapters_in_spine_order_with_toc_titles(tmp_path):
    book = write_epub(tmp_path / "voyage.epub", [("The Voyage", ["The ship left Lisbon at dawn."]),
                                                  ("The Storm", ["The mast broke on the third night."])])
    doc = load_document(book)
    assert doc.text.index("Lisbon") < doc.text.index("mast broke")
    assert _where(doc, "mast broke")["section"] == ["The Storm"]
    assert _where(doc, "Lisbon")["section"] == ["The Voyage"]


def test_encrypted_epub_is_refused(tmp_path):
    book = write_epub(tmp_path / "drm.epub", [("One", ["Text."])])
    import zipfile

    with zipfile.ZipFile(book, "a") as z:
        z.writestr("META-INF/encryption.xml", "<encryption/>")
    with pytest.raises(InputError, match=r"drm\.epub: the e-book is encrypted"):
        load_document(book)


def test_markdown_sections_ignore_hashes_in_code(tmp_path):
    md = tmp_path / "notes.md"
    md.write_text("# Setup\n\nRun the installer.\n\n```sh\n# not a heading\nmake\n```\n\n## Network\n\nPort 8080.\n"
                  "\nConfig\n======\n\nEdit the file.\n")
    doc = load_document(md)
    assert _where(doc, "make")["section"] == ["Setup"]
    assert _where(doc, "Port 8080")["section"] == ["Setup", "Network"]
    assert _where(doc, "Edit the file")["section"] == ["Config"]
    assert doc.text == md.read_text()  # Markdown is read as written


def test_plain_text_cites_line_ranges(tmp_path):
    txt = tmp_path / "poem.txt"
    txt.write_text("first line\nsecond line\nthird line\n")
    doc = load_document(txt)
    assert doc.layout is None
    assert _where(doc, "second line\nthird") == {"file": str(txt), "lines": [2, 3]}


def test_a_directory_answers_good_files_and_skips_bad_ones_with_a_count(tmp_path, caplog):
    folder = tmp_path / "docs"
    folder.mkdir()
    write_pdf(folder / "good.pdf", _pages(2, extra={1: "The vault opens at nine."}))
    write_pdf(folder / "scan.pdf", [[]])
    (folder / "notes.md").write_text("# Notes\n\nThe key is under the mat.\n")
    with caplog.at_level(logging.WARNING):
        doc = load_document(folder)
    assert "skipped 1 of 3 file(s)" in caplog.text and "scan.pdf: no text layer" in caplog.text
    assert _where(doc, "vault opens") == {"file": str(folder / "good.pdf"), "pages": ["2"],
                                          "page_numbering": PHYSICAL, "section": []}
    assert _where(doc, "under the mat")["section"] == ["Notes"]
    assert _where(doc, "under the mat")["file"] == str(folder / "notes.md")


def test_a_directory_of_only_bad_files_is_refused(tmp_path):
    folder = tmp_path / "scans"
    folder.mkdir()
    write_pdf(folder / "a.pdf", [[]])
    with pytest.raises(InputError, match=r"none of the 1 file\(s\) in .*scans could be read; the first: .*a\.pdf: no "
                                         r"text layer"):
        load_documents(folder)


def test_the_index_key_follows_the_extractor_version(tmp_path, monkeypatch):
    import lcrag.documents.pdf as pdf_loader

    path = write_pdf(tmp_path / "m.pdf", _pages(2))
    before = load_document(path)
    monkeypatch.setattr(pdf_loader, "CLEANING_VERSION", pdf_loader.CLEANING_VERSION + 1)
    after = load_document(path)
    assert before.text == after.text and before.content_hash != after.content_hash


def test_markdown_before_its_first_heading_cites_lines_and_extracted_text_never_does(tmp_path):
    md = tmp_path / "intro.md"
    md.write_text("A preface line.\nAnother one.\n\n# Body\n\nText.\n")
    assert _where(load_document(md), "Another one") == {"file": str(md), "pages": [], "page_numbering": None,
                                                        "section": [], "lines": [2, 2]}
    page = tmp_path / "flat.html"
    page.write_text(f"<html><body><main><p>The gate opens at dawn. {FILLER}</p></main></body></html>")
    assert "lines" not in _where(load_document(page), "gate opens")
