"""Loaders do work bounded by what a file holds (issue 34, items 1-4), read in this process: every file here is a few
to a few hundred kilobytes that the loaders of 5281a3b took 10 s to hours and up to gigabytes to read (each test's
file is sized so that the old code fails within about a minute). The text is counted as it is read, against the
document's limits, so a file over one is refused at the limit, never after."""

from __future__ import annotations

import pytest

from lcrag.documents import load_document, load_documents
from lcrag.documents.limits import ParseLimits, TextBudget
from lcrag.core.errors import InputError

from hostile_documents import (blank_page_tree_pdf, emphasis_markdown, merged_docx, page_tree_pdf, prose,
                               spanned_docx, spine_epub)


def outcome(load, *args):
    """What reading a file gives: its documents, or the error refusing it (how long it takes is the benchmarks')."""
    try:
        return load(*args)
    except InputError as exc:
        return exc


# -- item 1: a table cell spanning millions of grid columns, a cell merged down thousands of rows ------------------
def test_a_docx_cell_spanning_a_million_columns_is_read_once(tmp_path):
    path = spanned_docx(tmp_path / "span.docx", span=1_000_000)  # 5281a3b: 33 s (300,000,000: hours, 2.4 GB)
    document = outcome(load_document, path)
    assert document.text.count("one cell, spanned") == 1 and document.text.startswith("A table follows.")


def test_a_docx_cell_merged_down_thousands_of_rows_shows_in_each_row(tmp_path):
    path = merged_docx(tmp_path / "merged.docx", rows=2000)  # 5281a3b: quadratic, then a RecursionError
    document = outcome(load_document, path)
    lines = document.text.splitlines()
    assert lines[0] == "merged | row 0" and lines[1999] == "merged | row 1999"  # a merged cell shows in each row


# -- item 2: a PDF page tree listing one page a thousand times a thousand -------------------------------------------
def test_a_pdf_page_tree_listing_one_page_many_times_is_refused_at_once(tmp_path):
    small = page_tree_pdf(tmp_path / "tree.pdf", fan_out=100)  # 10,000 pages in 3 KB; 5281a3b: 9 s, 22.6M chars
    refused = outcome(load_documents, small)
    assert isinstance(refused, InputError)
    assert str(refused).startswith("tree.pdf: 10,000 pages in a file of ") and "amplification" in str(refused)
    big = page_tree_pdf(tmp_path / "million.pdf")  # 1,000,000 pages in 16 KB; 5281a3b: half an hour, gigabytes
    refused = outcome(load_documents, big)
    assert isinstance(refused, InputError) and "1,000,000 pages" in str(refused)
    blank = blank_page_tree_pdf(tmp_path / "blank.pdf")  # no text to count; 5281a3b: 20 s, then "no text layer"
    refused = outcome(load_documents, blank)
    assert isinstance(refused, InputError) and "1,000,000 pages" in str(refused)


def test_a_pdf_is_counted_page_by_page_against_the_text_a_file_may_yield(tmp_path):
    path = page_tree_pdf(tmp_path / "tree.pdf", fan_out=30)  # 900 pages listed (within the page rule), 2 MB of text
    refused = outcome(load_documents, path, ParseLimits(chars=100_000))
    assert isinstance(refused, InputError)
    assert "over the 100,000 limit for one document (--max-document-chars" in str(refused)
    refused = outcome(load_documents, path)  # the default limits: 700 characters per byte of a 3 KB file
    assert isinstance(refused, InputError) and "(--max-chars-per-byte)" in str(refused)


# -- item 3: an EPUB spine listing one 900 KB chapter hundreds of times --------------------------------------------
def test_an_epub_chapter_listed_many_times_in_the_spine_is_read_once(tmp_path):
    path = spine_epub(tmp_path / "spine.epub", repeats=60)  # 5281a3b: 60 chapters read, 54M chars, then refused
    document = outcome(load_document, path)
    assert 850_000 < len(document.text) < 950_000
    aliased = spine_epub(tmp_path / "aliased.epub", repeats=60, aliases=60)  # 60 manifest items naming one file
    document = outcome(load_document, aliased)
    assert len(document.text) < 950_000


def test_an_epub_is_counted_chapter_by_chapter(tmp_path):
    from document_fixtures import write_epub

    path = write_epub(tmp_path / "book.epub", [(f"Chapter {i}", [prose(2000, seed=i)] * 10) for i in range(20)])
    refused = outcome(load_documents, path, ParseLimits(chars=30_000))
    assert isinstance(refused, InputError) and "over the 30,000 limit for one document" in str(refused)
    assert int(str(refused).split(": ")[1].split(" ")[0].replace(",", "")) < 60_000  # stopped near it, not at 400K


# -- item 4: Markdown whose inline parse is hundreds of times its size --------------------------------------------
def test_markdown_headings_come_from_the_block_parse_alone(tmp_path):
    path = emphasis_markdown(tmp_path / "emphasis.md")  # 4.5 MB of "*a_"; 5281a3b: 21.6 s and 1.7 GB
    document = outcome(load_document, path)
    layout = document.layout
    assert layout.path(layout.segments[0].section_id) == ("Title",) and len(document.text) > 4_500_000


def test_markdown_headings_are_found_as_before(tmp_path):
    path = tmp_path / "notes.md"
    path.write_text("# Top *level*\n\nText.\n\n```\n# not a heading\n```\n\nSetext\n======\n\n## Below\n\nMore.\n")
    layout = load_document(path).layout
    sections = [layout.path(s.section_id) for s in layout.segments]
    assert sections == [("Top *level*",), ("Setext",), ("Setext", "Below")]


# -- every format: the document's characters, and characters per byte ---------------------------------------------
@pytest.mark.parametrize("suffix", [".txt", ".md", ".jsonl"])
def test_text_formats_are_held_to_the_document_limit(tmp_path, suffix):
    path = tmp_path / f"long{suffix}"
    text = prose(20_000)
    path.write_text(f'{{"text": "{text}"}}\n' if suffix == ".jsonl" else text)
    with pytest.raises(InputError, match=rf"^long\{suffix}: 20,000 characters of text, over the 10,000 limit for "
                                         r"one document \(--max-document-chars"):
        load_documents(path, ParseLimits(chars=10_000))
    assert len(load_document(path).text) == 20_000


def test_the_ratio_spares_every_document_up_to_a_million_characters(tmp_path):
    budget = TextBudget(tmp_path / "tiny.pdf", ParseLimits(), file_bytes=100)
    budget.add(1_000_000)  # 10,000 per byte, but no more than a long book: never refused for its ratio
    with pytest.raises(InputError, match=r"over the 100 per byte a document may yield \(--max-chars-per-byte\)"):
        budget.add(1)
    roomy = TextBudget(tmp_path / "big.pdf", ParseLimits(chars_per_byte=2), file_bytes=1_000_000)
    roomy.add(2_000_000)
    with pytest.raises(InputError, match="--max-chars-per-byte"):
        roomy.add(1)


def test_ordinary_documents_read_as_before(tmp_path):
    from document_fixtures import crane_manual, write_docx

    pdf = load_document(crane_manual(tmp_path))
    assert "7781" in pdf.text and pdf.layout.path(pdf.layout.segments[-1].section_id) == ("Crane Controls",)
    docx = load_document(write_docx(tmp_path / "t.docx", [("h1", "Parts"), ("table", [["Part", "Code"],
                                                                                       ["valve", "V-12"]])]))
    assert docx.text.endswith("Part | Code\nvalve | V-12")
