"""Real documents end to end with the bundled reader and embedder: `lcrag ask` on a PDF, a DOCX, an HTML page and an
EPUB written by the test answers from the right place and cites its page or section; an LC answer cites located
pages; a directory with a scanned PDF among good files answers and reports the skipped file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from document_fixtures import html_page, write_docx, write_epub, write_pdf

TOPICS = "pumps valves gauges hoses filters belts seals bearings cables winches".split()
FACT = "The reset code for the harbour crane is 7781."
QUESTION = "What is the reset code for the harbour crane?"


def _pages():
    pages = [[f"Routine notes about the {t} open this page.", f"The {t} are inspected weekly by the day shift.",
              f"Worn {t} are replaced from stores, and the {t} log is signed."] for t in TOPICS]
    pages[6][1] = FACT
    return pages


def ask(path, *args, cache_dir) -> dict:
    done = subprocess.run([sys.executable, "-m", "lcrag.cli", "ask", str(path), QUESTION, "--json", "--cache-dir",
                           str(cache_dir), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def manual(tmp_path_factory):
    folder = tmp_path_factory.mktemp("docs")
    return write_pdf(folder / "crane.pdf", _pages(), labels=("r", 2),
                     outline=[("Preface", 0), ("Maintenance", 2), ("Crane Controls", 6)])


def test_rag_over_a_pdf_answers_and_cites_the_printed_page(manual, tmp_path):
    answer = ask(manual, "--strategy", "rag", "-k", "2", "--chunking", "words:40", cache_dir=tmp_path)
    top = answer["sources"][0]
    assert top["pages"] == ["5"] and top["page_numbering"] == "printed"  # physical page 7 is printed page 5
    assert top["section"] == ["Crane Controls"] and "7781" in top["snippet"] and top["how"] == "retrieved"
    assert "7781" in answer["text"]


def test_lc_over_a_pdf_cites_located_pages(manual, tmp_path):
    answer = ask(manual, "--strategy", "lc", "--chunking", "words:40", cache_dir=tmp_path)
    assert answer["route"] == "lc" and answer["sources"]
    assert {s["how"] for s in answer["sources"]} == {"located"}
    assert "5" in {p for s in answer["sources"] for p in s["pages"]}


def test_docx_html_and_epub_answers_cite_their_sections(tmp_path):
    filler = [f"Notes about the {t} are kept in the blue binder." for t in TOPICS]
    docx = write_docx(tmp_path / "ops.docx", [("h1", "Maintenance"), *[("p", f) for f in filler[:5]],
                                              ("h1", "Crane Controls"), ("p", FACT), *[("p", f) for f in filler[5:]]])
    page = tmp_path / "ops.html"
    page.write_text(html_page("Operations", [("Maintenance", filler[:5]), ("Crane Controls", [FACT])]))
    book = write_epub(tmp_path / "ops.epub", [("Maintenance", filler), ("Crane Controls", [FACT])])
    for path in (docx, page, book):
        answer = ask(path, "--strategy", "rag", "-k", "1", "--chunking", "sentences:30", cache_dir=tmp_path / "cache")
        top = answer["sources"][0]
        assert top["section"][-1] == "Crane Controls" and "7781" in top["snippet"], (path, top)


def test_a_directory_skips_a_scanned_pdf_and_cites_the_good_file(manual, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "crane.pdf").write_bytes(manual.read_bytes())
    write_pdf(folder / "scan.pdf", [[], []])
    done = subprocess.run([sys.executable, "-m", "lcrag.cli", "ask", str(folder), QUESTION, "--strategy", "rag", "-k",
                           "2", "--chunking", "words:40", "--cache-dir", str(tmp_path / "c")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "scan.pdf: no text layer" in done.stderr and "skipped 1 of 2 file(s)" in done.stderr
    assert "Sources: crane.pdf p. 5 (§ Crane Controls)" in done.stdout
