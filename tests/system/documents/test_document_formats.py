"""Every format's loader on documents written by the tests: text, pages, sections, cleaning, and the one-line
refusals of documents that cannot be read."""

from __future__ import annotations


from document_fixtures import html_page

from lcrag.documents import load_document
from lcrag.core.provenance import locate

def _where(doc, needle: str) -> dict:
    at = doc.text.index(needle)
    return locate(doc, at, at + len(needle))


def test_html_main_text_only_with_heading_sections(tmp_path):
    page = tmp_path / "garden.html"
    page.write_text(html_page("Gardening Guide", [("Roses", ["Prune roses in March."]),
                                                  ("Tulips", ["Plant tulip bulbs in October."])]), encoding="utf-8")
    doc = load_document(page)
    for boilerplate in ("Log in", "analytics", "font-family", "Cookie settings", "Ten tips", "<"):
        assert boilerplate not in doc.text
    assert _where(doc, "tulip bulbs")["section"] == ["Gardening Guide", "Tulips"]
    assert _where(doc, "Prune roses")["section"] == ["Gardening Guide", "Roses"]
