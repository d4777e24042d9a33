"""The query-vector cache: a question seen before is answered from disk without creating the embedder."""

from __future__ import annotations

import logging
import sqlite3
import zlib

import numpy as np
import pytest

from lcrag.chunking import WordChunker
from lcrag.retrieval import DocumentIndex
from lcrag.retrieval.embedders import EMBEDDERS, OpenAIEmbedder, minilm_name, openai_name, uncached
from lcrag.retrieval.query_cache import FILE_NAME, CachedQueryEmbedder, QueryVectorCache, cached_query_embedder
from lcrag.retrieval.summaries import embed_texts
from lcrag.core.types import Document

DOC = Document(" ".join(f"Part {i}. The {w} story number {i} goes on." for i, w in
                        enumerate(["harbour ships", "violin concert", "volcano lava", "glacier ice"] * 5)))


class HashingEmbedder:
    """Deterministic bag of words hashed into 16 unit-normalised dimensions; records every call."""

    dimension = 16

    def __init__(self, name: str = "hashing-test", salt: int = 0):
        self.name, self.salt, self.calls = name, salt, []

    def embed(self, texts):
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                out[row, (zlib.crc32(word.encode()) + self.salt) % self.dimension] += 1
            out[row, 0] += 1e-3
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class Factory:
    """Makes the wrapped embedder, counting how often."""

    def __init__(self, **kwargs):
        self.made: list[HashingEmbedder] = []
        self.kwargs = kwargs

    def __call__(self) -> HashingEmbedder:
        self.made.append(HashingEmbedder(**self.kwargs))
        return self.made[-1]


def wrapped(tmp_path, name="hashing-test", **kwargs):
    factory = Factory(name=name, **kwargs)
    return CachedQueryEmbedder(factory, QueryVectorCache(tmp_path / FILE_NAME), name, HashingEmbedder.dimension), factory


def test_a_hit_returns_the_same_vector_without_creating_the_embedder(tmp_path):
    first, factory = wrapped(tmp_path)
    vector = first.embed(["Who played the violin?"])
    assert len(factory.made) == 1 and first.misses == 1
    first.close()

    second, factory = wrapped(tmp_path)  # a new process: a fresh wrapper over the same file
    again = second.embed(["Who played the violin?"])
    assert factory.made == [] and not second.created and second.hits == 1
    assert again.dtype == np.float32 and again.shape == (1, 16)
    assert again.tobytes() == vector.tobytes()  # identical, bit for bit
    assert second.name == "hashing-test" and second.dimension == 16 and factory.made == []

    # A batch of queries: hits read, misses embedded in one call, the order kept.
    both = second.embed(["new question", "Who played the violin?"])
    assert len(factory.made) == 1 and factory.made[0].calls == [["new question"]]
    assert both[1].tobytes() == vector[0].tobytes()
    assert both[0].tobytes() == HashingEmbedder().embed(["new question"])[0].tobytes()


def test_different_embedder_names_do_not_share_vectors(tmp_path):
    one, _ = wrapped(tmp_path, name="embedder-a")
    other, factory = wrapped(tmp_path, name="embedder-b", salt=5)
    a = one.embed(["the same question"])
    b = other.embed(["the same question"])
    assert len(factory.made) == 1  # a miss for b although a stored the same text
    assert a.tobytes() != b.tobytes()
    assert len(one.cache) == 2


def test_a_damaged_file_is_set_aside_and_recreated(tmp_path, caplog):
    first, _ = wrapped(tmp_path)
    first.embed(["a question"])
    first.close()
    path = tmp_path / FILE_NAME
    path.write_bytes(b"this is not a database" * 100)
    with caplog.at_level(logging.WARNING, logger="lcrag"):
        second, factory = wrapped(tmp_path)
    assert "damaged" in caplog.text
    assert list(tmp_path.glob(f"{FILE_NAME}.damaged-*"))
    assert len(second.cache) == 0
    second.embed(["a question"])  # a miss now, stored again
    assert len(factory.made) == 1 and len(second.cache) == 1


def test_a_damaged_entry_is_a_miss_and_replaced(tmp_path):
    first, _ = wrapped(tmp_path)
    vector = first.embed(["a question"])
    with sqlite3.connect(tmp_path / FILE_NAME) as db:
        db.execute("UPDATE vectors SET vector = ?", (b"\x00\x01\x02",))
    first.close()
    second, factory = wrapped(tmp_path)
    assert second.embed(["a question"]).tobytes() == vector.tobytes()
    assert len(factory.made) == 1
    third, factory = wrapped(tmp_path)
    third.embed(["a question"])
    assert factory.made == []  # replaced by a good entry


def test_bulk_chunk_embedding_bypasses_the_cache(tmp_path):
    embedder, factory = wrapped(tmp_path / "cache")
    index = DocumentIndex(DOC, WordChunker(10), tmp_path / "cache", lambda: embedder)
    index.chunk_vectors()
    inner = factory.made[0]
    assert inner.calls and sum(len(c) for c in inner.calls) == len(index.chunks)
    assert len(embedder.cache) == 0  # no chunk text was cached
    embed_texts(embedder, ["one summary"])  # summaries (RAPTOR, tree index): bulk too, even a single one
    assert len(embedder.cache) == 0 and uncached(embedder) is inner

    hits = index.retriever("dense").run("violin concert", 3)
    assert hits and len(embedder.cache) == 1  # the query is
    assert embedder.name == "hashing-test"  # on-disk names unchanged: the wrapped embedder's
    assert len(list((index.dir).glob("embeddings-*.npy"))) == 1

    # A new process: the dense retriever finds the stored chunk vectors and the cached query; nothing is created.
    again, factory = wrapped(tmp_path / "cache")
    reopened = DocumentIndex(DOC, WordChunker(10), tmp_path / "cache", lambda: again)
    assert [h.chunk.index for h in reopened.retriever("dense").run("violin concert", 3)] == [h.chunk.index for h in hits]
    assert factory.made == []


def test_many_texts_are_not_queries(tmp_path):
    embedder, factory = wrapped(tmp_path)
    embedder.embed([f"text {i}" for i in range(40)])
    assert len(factory.made) == 1 and len(embedder.cache) == 0


def test_registered_identities_match_the_embedders_names(tmp_path, monkeypatch):
    monkeypatch.delenv("LCRAG_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert EMBEDDERS.get("minilm").meta["identity"]("") == minilm_name() == "onnx:all-MiniLM-L6-v2-int8:max256"
    url = "http://user:secret@localhost:8000/v1/"
    assert openai_name("m", url, "key") == OpenAIEmbedder("m", base_url=url, api_key="key").name
    assert "secret" not in openai_name("m", url)


def test_the_pipeline_wraps_only_registered_identities(tmp_path):
    made = []
    embedder = cached_query_embedder("minilm", lambda: made.append(1), tmp_path)
    assert isinstance(embedder, CachedQueryEmbedder) and embedder.name == minilm_name() and embedder.dimension == 384
    assert made == [] and (tmp_path / FILE_NAME).exists()


def test_an_embedder_without_identity_is_not_wrapped(tmp_path):
    EMBEDDERS.register("plain-test", help="test", prefixes=("plain-test",))(lambda name, **_: HashingEmbedder())
    try:
        embedder = cached_query_embedder("plain-test:x", lambda: HashingEmbedder(), tmp_path)
        assert isinstance(embedder, HashingEmbedder)
    finally:
        EMBEDDERS.remove("plain-test")


@pytest.mark.parametrize("cache", [True, False])
def test_pipeline_embedder_follows_the_cache_setting(tmp_path, cache):
    from lcrag.pipeline.pipeline import Pipeline, Settings

    pipeline = Pipeline(Settings(cache=cache, cache_dir=tmp_path, embedder="openai:m", base_url="http://localhost:1/v1"))
    embedder = pipeline.embedder
    assert isinstance(embedder, CachedQueryEmbedder) == cache
    assert embedder.name == "openai:m@http://localhost:1/v1"
