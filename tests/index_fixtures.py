"""A small document's index over a hashing embedder, shared by the index-integrity tests of the unit tier (damaged
files set aside and rebuilt) and the system tier (processes building one index at once, which import this module)."""

import zlib

import numpy as np
import pytest

from lcrag.chunking import WordChunker
from lcrag.core.types import Document
from lcrag.retrieval import DocumentIndex

TOPICS = ["harbour ships anchor", "violin concert music", "volcano lava eruption", "glacier ice winter",
          "orchard apples harvest", "satellite orbit rocket", "bakery bread flour", "desert camel sand"]
DOC = Document(" ".join(f"Part {i}. The {TOPICS[i % 8]} story number {i} goes on. " + "filler " * 3
                        for i in range(40)))
QUESTIONS = ["Where did the ships anchor?", "Who played the violin?", "What about the volcano?", "camel sand"]


class HashingEmbedder:
    """Deterministic bag of words hashed into 32 unit-normalised dimensions: different text, different vector."""

    name, dimension = "hashing-test", 32

    def embed(self, texts):
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                out[row, zlib.crc32(word.strip(".?").encode()) % self.dimension] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def open_index(cache):
    return DocumentIndex(DOC, WordChunker(10), cache, lambda: HashingEmbedder())


def answers(index):
    hybrid = index.retriever("hybrid")
    return [[(h.chunk.index, h.chunk.text) for h in hybrid.run(q, 5)] for q in QUESTIONS]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """Results from a clean cache, to compare the rebuilt ones with."""
    return answers(open_index(tmp_path_factory.mktemp("clean")))


def embeddings(directory):
    return next(directory.glob("embeddings-*.npy"))


