"""One top-k and one BM25 core for documents and corpora: same rankings, same scores, old corpus indexes still open."""

from __future__ import annotations

import os
import random
from types import SimpleNamespace

import numpy as np
import pytest

from lcrag.retrieval.bm25 import BM25Retriever, bm25_search, open_bm25, query_terms
from lcrag.retrieval.corpus.build import build_bm25
from lcrag.retrieval.corpus.search import UnitBM25
from lcrag.retrieval.topk import top_k
from lcrag.core.types import Chunk

WORDS = "cat mat dog sun rain harbour violin lava glacier revenue growth quarter".split()
QUERIES = ["cat mat", "Which harbour had rain?", 'revenue AND (growth) "quarter"', "lava", "zebra", "???"]


def _texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    # few words from a small vocabulary: many texts score exactly alike, so tie-breaking is exercised
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 4))) for _ in range(n)]


def _assert_matches_full_argsort(scores: np.ndarray, got: list[int], k: int) -> None:
    """``got`` is a full stable argsort's first k, except that which of several positions tied exactly at the cut
    get in is argpartition's choice (as it always was in dense and corpus search); their order is still by position."""
    full = np.argsort(-scores, kind="stable").tolist()
    assert len(got) == min(k, len(scores))
    assert [float(scores[i]) for i in got] == [float(scores[i]) for i in full[:k]]  # same scores, best first
    assert got == sorted(got, key=lambda i: (-float(scores[i]), i))  # ties by position
    cut = float(scores[full[k - 1]]) if k < len(scores) else -np.inf
    assert [i for i in got if scores[i] > cut] == [i for i in full[:k] if scores[i] > cut]
    if k >= len(scores) or scores[full[k - 1]] != scores[full[k]]:
        assert got == full[:k]  # no tie across the cut: exactly the full argsort


@pytest.mark.parametrize("seed", range(5))
def test_top_k_is_a_stable_full_argsort(seed):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 6, size=200).astype(np.float32)  # many ties
    full = np.argsort(-scores, kind="stable").tolist()
    assert top_k(scores, 200) == top_k(scores, 500) == full  # everything: exactly the full stable argsort
    cuts = [k for k in range(1, 200) if scores[full[k - 1]] != scores[full[k]]]  # no tie across the cut
    for k in cuts + [1, 5, 37, 199]:
        _assert_matches_full_argsort(scores, top_k(scores, k), k)
    assert cuts and all(top_k(scores, k) == full[:k] for k in cuts)
    scores[rng.choice(200, size=30, replace=False)] = -np.inf
    for k in (1, 10, 170, 171, 200):
        _assert_matches_full_argsort(scores, top_k(scores, k), k)  # dense keeps non-finite scores
        kept = top_k(scores, k, drop_nonfinite=True)  # corpus search drops them
        assert kept == [i for i in top_k(scores, k) if np.isfinite(scores[i])]


def _corpus_stub(tmp_path, texts: list[str]):
    """Just what build_bm25 reads from a CorpusIndex; records the unit ranges asked for."""
    asked: list[range] = []

    def unit_texts(kind, units):
        asked.append(units)
        return [texts[u] for u in units]

    stub = SimpleNamespace(dir=tmp_path / "corpus", units=lambda kind: range(len(texts)), unit_texts=unit_texts)
    return stub, asked


def test_documents_and_corpus_units_rank_alike(tmp_path):
    texts = _texts(2500)
    chunks = [Chunk(i, 0, len(t), t) for i, t in enumerate(texts)]
    document = BM25Retriever.build(chunks, tmp_path / "doc-bm25")
    stub, asked = _corpus_stub(tmp_path, texts)
    progress: list[int] = []
    build_bm25(stub, "passage", progress.append)
    assert progress == [1000, 1000, 500]  # streamed in batches, as before
    assert asked == [range(0, 1000), range(1000, 2000), range(2000, 2500)]
    units = UnitBM25(stub.dir / "units" / "passage" / "bm25")
    for query in QUERIES:
        doc_hits = [(h.chunk.index, h.score) for h in document.run(query, len(texts))]
        unit_hits = [(h.unit, h.score) for h in units.search(query, len(texts))]
        assert doc_hits == unit_hits
        assert unit_hits == bm25_search(units.searcher, units.schema, query, len(texts))
        assert unit_hits == sorted(unit_hits, key=lambda hit: (-hit[1], hit[0]))
        assert bool(unit_hits) == any(t in WORDS for t in query_terms(query))


def _old_style_corpus_index(directory, texts: list[str]) -> None:
    """A unit BM25 index written exactly as build_bm25 wrote it before the core was shared."""
    import tantivy

    directory.mkdir(parents=True)
    builder = tantivy.SchemaBuilder()
    builder.add_integer_field("idx", stored=True, indexed=False)
    builder.add_text_field("text", stored=False, tokenizer_name="default", index_option="freq")
    bm25 = tantivy.Index(builder.build(), path=str(directory))
    writer = bm25.writer(heap_size=256_000_000, num_threads=min(4, os.cpu_count() or 1))
    for lo in range(0, len(texts), 1000):
        for u in range(lo, min(lo + 1000, len(texts))):
            writer.add_document(tantivy.Document(idx=u, text=texts[u]))
    writer.commit()
    writer.wait_merging_threads()


def _old_unit_search(path, query: str, k: int) -> list[tuple[int, float]]:
    """UnitBM25.search as it was before the core was shared."""
    import tantivy

    index = tantivy.Index.open(str(path))
    schema, searcher = index.schema, index.searcher()
    terms = query_terms(query)
    if not terms:
        return []
    q = tantivy.Query.boolean_query([(tantivy.Occur.Should, tantivy.Query.term_query(schema, "text", t)) for t in terms])
    hits = [(searcher.doc(addr)["idx"][0], float(score)) for score, addr in searcher.search(q, k).hits]
    hits.sort(key=lambda h: (-h[1], h[0]))
    return hits


def test_old_style_corpus_index_still_opens_and_ranks_the_same(tmp_path):
    texts = _texts(1500, seed=1)
    old_dir = tmp_path / "old-bm25"
    _old_style_corpus_index(old_dir, texts)
    units = UnitBM25(old_dir)
    schema, searcher = open_bm25(old_dir)
    assert searcher.num_docs == len(texts)
    for query in QUERIES:
        for k in (3, len(texts)):
            expected = _old_unit_search(old_dir, query, k)
            assert [(h.unit, h.score) for h in units.search(query, k)] == expected
            assert bm25_search(searcher, schema, query, k) == expected
    # and an index the shared core writes is one the old reader opens and ranks alike
    stub, _ = _corpus_stub(tmp_path, texts)
    build_bm25(stub, "passage", lambda n: None)
    new_dir = stub.dir / "units" / "passage" / "bm25"
    for query in QUERIES:
        assert _old_unit_search(new_dir, query, len(texts)) == _old_unit_search(old_dir, query, len(texts))
