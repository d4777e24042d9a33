"""Issue 14, defect 12, end to end: four `lcrag index -r hybrid` processes (bundled MiniLM embedder, tantivy BM25)
on one new document and one cache directory all succeed, and leave the index a single build leaves."""

import subprocess
import sys

import pytest

from lcrag.chunking import WordChunker
from lcrag.documents.loaders import load_document
from lcrag.retrieval import DocumentIndex
from lcrag.documents.synthetic import needle_document

QUESTIONS = ["What is the passkey?", "the city and the river", "Which year was it?"]


def index_processes(document, cache, n):
    command = [sys.executable, "-m", "lcrag.cli", "index", str(document), "-r", "hybrid", "--cache-dir", str(cache)]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(n)]
    return [(p.returncode, out, err.strip()) for p in procs for out, err in [p.communicate(timeout=600)]]


@pytest.mark.slow
def test_four_concurrent_index_builds_succeed_and_match_a_single_build(tmp_path):
    document = tmp_path / "doc.txt"
    document.write_text(needle_document(12000, seed=5)[0].text)
    assert [(code, err) for code, _, err in index_processes(document, tmp_path / "single", 1)] == [(0, "")]
    results = index_processes(document, tmp_path / "shared", 4)
    assert [(code, err) for code, _, err in results] == [(0, "")] * 4  # no traceback, no error, no warning
    # One process built the index; the three that waited for its lock reused it.
    assert sorted("loaded from cache" in " ".join(out.split()) for _, out, _ in results) == [False, True, True, True]
    [single] = [p for p in (tmp_path / "single" / "indexes").iterdir() if p.is_dir()]
    [shared] = [p for p in (tmp_path / "shared" / "indexes").iterdir() if p.is_dir()]
    assert sorted(p.name for p in shared.iterdir()) == sorted(p.name for p in single.iterdir())
    for name in ["chunks.jsonl", "meta.json", *(p.name for p in single.glob("embeddings-*.npy"))]:
        assert (shared / name).read_bytes() == (single / name).read_bytes(), name
    # tantivy names its segment files by random ids, so BM25 is compared by what it answers
    searches = []
    for cache in ("single", "shared"):
        bm25 = DocumentIndex(load_document(document), WordChunker(300), tmp_path / cache).retriever("bm25")
        searches.append([[(h.chunk.index, h.score) for h in bm25.run(q, 5)] for q in QUESTIONS])
    assert searches[0] == searches[1] and all(searches[0])
