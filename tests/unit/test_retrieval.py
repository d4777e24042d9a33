import numpy as np
import pytest

from lcrag.chunking import WordChunker
from lcrag.core.errors import InputError
from lcrag.retrieval import (
    BM25Retriever,
    DenseRetriever,
    DocumentIndex,
    HybridRetriever,
)
from lcrag.retrieval.bm25 import query_terms
from lcrag.core.types import Chunk, Document, ScoredChunk

CHUNKS = [
    Chunk(0, 0, 30, "the cat sat on the warm mat"),
    Chunk(1, 31, 70, "dogs chase cats across the garden"),
    Chunk(2, 71, 110, "quarterly revenue grew by ten percent"),
    Chunk(3, 111, 150, "the mat was red and the cat was grey"),
]


def test_query_terms_match_tantivy_default_analyzer():
    assert query_terms('What is "AND" (the) cat_mat? cat OR dog-food') == ["what", "is", "and", "the", "cat", "mat", "or", "dog", "food"]


def test_bm25_ranks_and_survives_query_syntax(tmp_path):
    bm25 = BM25Retriever.build(CHUNKS, tmp_path / "bm25")
    hits = bm25.run("Which colour was the cat's mat?", 2)
    assert [h.chunk.index for h in hits] == [3, 0]
    assert hits[0].score >= hits[1].score
    assert bm25.run('revenue AND (growth) "quarterly" OR NOT', 1)[0].chunk.index == 2
    assert bm25.run("???", 3) == []
    assert [h.chunk.index for h in BM25Retriever(CHUNKS, tmp_path / "bm25").run("revenue")] == [2]  # reopened from disk


class KeywordEmbedder:
    """Test embedder: one dimension per keyword."""

    name, dimension = "keywords", 3
    words = ("cat", "mat", "revenue")

    def embed(self, texts):
        v = np.array([[t.count(w) for w in self.words] for t in texts], dtype=np.float32) + 1e-3
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_dense_ranks_by_cosine_with_stable_ties():
    emb = KeywordEmbedder()
    dense = DenseRetriever(CHUNKS, emb.embed([c.text for c in CHUNKS]), emb)
    hits = dense.run("revenue", 2)
    assert hits[0].chunk.index == 2
    all_hits = dense.run("cat mat")
    assert len(all_hits) == 4 and all_hits[0].chunk.index in (0, 3)
    assert [h.score for h in all_hits] == sorted((h.score for h in all_hits), reverse=True)


class Fixed:
    def __init__(self, name, order):
        self.name, self.order = name, order

    def run(self, query, k=None):
        return [ScoredChunk(CHUNKS[i], 1.0 / (r + 1)) for r, i in enumerate(self.order[:k])]


def test_reciprocal_rank_fusion():
    hybrid = HybridRetriever([Fixed("a", [0, 1, 2]), Fixed("b", [2, 0, 3])], rrf_k=60)
    hits = hybrid.run("q", 3)
    assert [h.chunk.index for h in hits] == [0, 2, 1]
    assert hits[0].score == pytest.approx(1 / 61 + 1 / 62)


def test_index_persists_and_rejects_unknown_retriever(tmp_path):
    doc = Document("word " * 50 + "needle here " + "word " * 50)
    first = DocumentIndex(doc, WordChunker(10), tmp_path, lambda: KeywordEmbedder())
    first.retriever("bm25")
    second = DocumentIndex(doc, WordChunker(10), tmp_path, lambda: KeywordEmbedder())
    assert second.chunks == first.chunks and second.dir == first.dir
    assert second.retriever("bm25").run("needle", 1)[0].chunk.text.count("needle") == 1
    other = DocumentIndex(doc, WordChunker(20), tmp_path)
    assert other.dir != first.dir
    with pytest.raises(InputError, match="unknown retriever"):
        first.retriever("tfidf")
    with pytest.raises(InputError, match="needs an embedder"):
        other.retriever("dense")


def test_interrupted_embedding_resumes(tmp_path):
    from lcrag.retrieval.dense import embed_chunks

    chunks = [Chunk(i, 0, 1, f"cat {i} " + "mat " * (i % 3)) for i in range(10)]

    class Failing(KeywordEmbedder):
        def __init__(self, fail_after):
            self.calls, self.fail_after = [], fail_after

        def embed(self, texts):
            if len(self.calls) == self.fail_after:
                raise KeyboardInterrupt
            self.calls.append(len(texts))
            return super().embed(texts)

    with pytest.raises(KeyboardInterrupt):
        embed_chunks(chunks, Failing(2), tmp_path / "e.npy", batch=3)
    assert not (tmp_path / "e.npy").exists()
    resumed = Failing(99)
    vectors = embed_chunks(chunks, resumed, tmp_path / "e.npy", batch=3)
    assert resumed.calls == [3, 1]  # rows 6..9 only
    assert np.allclose(vectors, KeywordEmbedder().embed([c.text for c in chunks]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.npy"]


def test_bm25_finds_chinese_and_japanese_text_by_its_character_pairs(tmp_path):
    texts = ["今天天气很好，我们去公园散步。", "金库的密码是七三九一，只有馆长知道。", "東京は日本の首都です。", "Revenue rose 12%."]
    chunks = [Chunk(i, 0, len(t), t) for i, t in enumerate(texts)]
    bm25 = BM25Retriever.build(chunks, tmp_path / "bm25")
    assert bm25.run("金库的密码是什么？", 1)[0].chunk.index == 1  # a question sharing no whole run with the text
    assert bm25.run("日本の首都はどこ", 1)[0].chunk.index == 2
    assert bm25.run("revenue", 1)[0].chunk.index == 3  # spaced text as before
