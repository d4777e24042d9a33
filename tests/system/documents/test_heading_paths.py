"""Issue 42, "everything a parse produces is counted": heading titles are cut (to 500 characters by default) in
every format; each section's path is held once (a table of (parent, title), an index per segment), in memory and in
the parse the sandbox sends and keeps; headings and segments count against the text budget; the recent-parse cache
and a document's memory are counted in real bytes; a source cites a bounded section path."""

from __future__ import annotations

import json
import tracemalloc

from document_fixtures import heading_markdown

from lcrag.documents import load_document
from lcrag.documents.sandbox import Sandbox, encode, outcome_of


def test_the_recent_parse_cache_counts_the_bytes_a_parse_holds(tmp_path):
    path = heading_markdown(tmp_path / "headings.md", title_chars=5000, sections=2000)
    box = Sandbox()
    try:
        box.load(path)
        counted = box._recent.bytes
        payload = encode(outcome_of([load_document(path)], path))
        tracemalloc.start()
        outcome = json.loads(payload)
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert outcome["documents"] and held / 2 < counted < held * 2, (counted, held)
    finally:
        box.close()
