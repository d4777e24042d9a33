"""Issue 42, "everything a parse produces is counted": heading titles are cut (to 500 characters by default) in
every format; each section's path is held once (a table of (parent, title), an index per segment), in memory and in
the parse the sandbox sends and keeps; headings and segments count against the text budget; the recent-parse cache
and a document's memory are counted in real bytes; a source cites a bounded section path."""

from __future__ import annotations

import gc
import json
import tracemalloc

import pytest
from document_fixtures import LONG_HEADING, heading_markdown, html_page, write_docx, write_epub, write_pdf

from lcrag.documents import load_document
from lcrag.documents.limits import ParseLimits
from lcrag.documents.sandbox import _shape_checked, documents_of, encode, outcome_of
from lcrag.core.errors import InputError
from lcrag.core.provenance import ELLIPSIS, MAX_TITLE_CHARS, SOURCE_SECTION_LEVELS, SOURCE_TITLE_CHARS, Sections, locate


def _titles(document) -> list[str]:
    return [title for _, title in document.layout.sections[1:]]


@pytest.mark.parametrize("fmt", ["md", "html", "docx", "epub", "pdf"])
def test_a_long_heading_title_is_cut_with_an_ellipsis_in_every_format(tmp_path, fmt):
    title, body = "Harbour " * (LONG_HEADING // 8), "The crane reset code is 7781."
    path = tmp_path / f"long.{fmt}"
    if fmt == "md":
        path.write_text(f"# {title}\n\n{body}\n")
    elif fmt == "html":
        path.write_text(html_page("Guide", [(title, [body])]))
    elif fmt == "docx":
        write_docx(path, [("h1", title), ("p", body)])
    elif fmt == "epub":
        write_epub(path, [(title, [body])])
    else:
        write_pdf(path, [[body]], outline=[(title, 0)])
    document = load_document(path)
    cut = [t for t in _titles(document) if t.startswith("Harbour Harbour")]
    assert cut and all(len(t) <= MAX_TITLE_CHARS and t.endswith(ELLIPSIS) for t in cut), [len(t) for t in cut]
    assert "7781" in document.text
    at = document.text.index("7781")
    assert locate(document, at, at + 4)["section"][-1].startswith("Harbour")


def test_the_title_bound_is_a_parse_limit(tmp_path):
    path = tmp_path / "notes.md"
    path.write_text("# " + "word " * 100 + "\n\nText.\n")
    (title,) = _titles(load_document(path, ParseLimits(title_chars=40)))
    assert len(title) == 40 and title.endswith(ELLIPSIS)
    assert ParseLimits(title_chars=40).key() != ParseLimits().key()  # a parse under another bound is another parse
    with pytest.raises(InputError, match="title_chars"):
        ParseLimits(title_chars=40.5)


def test_a_title_is_held_and_sent_once_however_many_sections_lie_below_it(tmp_path):
    path = heading_markdown(tmp_path / "headings.md")
    document = load_document(path)
    layout = document.layout
    assert len(layout.segments) == 5001 and len(layout.sections) == 5002  # the root, the top heading, 5,000 below
    last = layout.path(layout.segments[-1].section_id)
    assert len(last[0]) == MAX_TITLE_CHARS and last[1] == "h4999"
    payload = encode(outcome_of([document], path))
    assert payload.count((last[0]).encode()) == 1  # the top title (cut) once, not once per segment
    assert len(payload) < 4 * path.stat().st_size  # the text (its newlines escaped), a few numbers a section
    again = documents_of(json.loads(payload), path)[0]
    assert again.layout.segments == layout.segments and again.layout.sections == layout.sections


@pytest.mark.parametrize("sections", [
    [[0, ""], [1, "loops to itself"]],
    [[0, ""], [2, "under a later one"], [0, "b"]],
    [[0, "not the root"]],
    [[0, ""], [0, 7]],
])
def test_a_section_table_that_could_not_come_from_a_parse_is_a_damaged_parse(tmp_path, sections):
    outcome = json.loads(encode(outcome_of([load_document(heading_markdown(tmp_path / "h.md", 10, 2))], tmp_path)))
    outcome["documents"][0]["layout"]["sections"] = sections
    with pytest.raises(ValueError, match="not a parse"):
        _shape_checked(outcome)


def test_headings_and_segments_count_against_the_text_budget(tmp_path):
    path = heading_markdown(tmp_path / "headings.md", title_chars=10, sections=2000)  # ~17,000 characters of text
    with pytest.raises(InputError, match=r"characters of text and headings \([\d,]+ of headings, sections and "
                                         r"page labels\), over the 100,000 limit .*--max-document-chars"):
        load_document(path, ParseLimits(chars=100_000))
    docx = write_docx(tmp_path / "h.docx", [("h1", "T" * 2000)] * 30)  # 60,000 characters of headings, 60,000 text
    with pytest.raises(InputError, match="of headings"):
        load_document(docx, ParseLimits(chars=100_000, title_chars=2000))
    assert len(load_document(path).layout.sections) == 2002  # at the default limits: read


def test_a_pdfs_page_labels_are_cut_and_counted(tmp_path):
    from lcrag.documents.pdf import _page_texts
    from lcrag.documents.limits import TextBudget

    class Labelled:  # a PDF whose every page label is 100,000 characters (a page-label prefix may be anything)
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return load_pdf[i]

        def get_page_label(self, i):
            return "L" * 100_000

    import pypdfium2 as pdfium

    load_pdf = pdfium.PdfDocument(write_pdf(tmp_path / "p.pdf", [["one"], ["two"], ["three"]]))
    budget = TextBudget(tmp_path / "p.pdf", ParseLimits())
    texts, labels = _page_texts(Labelled(), budget)
    assert [len(label) for label in labels] == [MAX_TITLE_CHARS] * 3 and budget.headings == 3 * MAX_TITLE_CHARS
    load_pdf.close()


def test_a_documents_memory_counts_its_layout_as_measured(tmp_path):
    path = heading_markdown(tmp_path / "headings.md", title_chars=400, sections=3000)
    payload = encode(outcome_of([load_document(path)], path))
    tracemalloc.start()
    document = documents_of(json.loads(payload), path)[0]  # what it holds once the parse's data is gone
    gc.collect()
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    counted = document.memory_bytes()
    assert held / 2 < counted < held * 2, (counted, held)
    assert document.layout.memory_bytes() > counted / 2  # most of it is the layout, not the 30 KB of text


def test_a_source_cites_a_bounded_section_path(tmp_path):
    """The audit's answer case: five nested 40,000-character headings (kept whole here, as a looser limit would)."""
    sections = Sections(max_title_chars=100_000)
    for level in range(1, 6):
        sections.enter(level, chr(ord("A") + level) * 40_000)
    from lcrag.core.provenance import Layout, Segment
    from lcrag.core.types import Document

    document = Document("x" * 100, source="m.md", layout=Layout((Segment(0, 100, None, sections.current),),
                                                                   sections=tuple(sections.table)))
    cited = locate(document, 10, 20)["section"]
    assert cited[0] == ELLIPSIS and len(cited) == SOURCE_SECTION_LEVELS + 1
    assert all(len(t) <= SOURCE_TITLE_CHARS for t in cited) and cited[-1].startswith("FFF")
    assert len(json.dumps(cited)) < 1000
