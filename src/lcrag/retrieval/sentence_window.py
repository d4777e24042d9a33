"""Sentence-window retrieval (LlamaIndex's SentenceWindowNodeParser + MetadataReplacementPostProcessor).

Single sentences (syntok) are embedded and matched against the query; each hit is returned as the window of
``window`` sentences either side of it, cut from the document. A hit whose window would overlap one returned
before is skipped, so the context never repeats text (LlamaIndex returns overlapping windows as they come).
"""

from __future__ import annotations

import bisect
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from lcrag.chunking import SentenceChunker
from lcrag.core.errors import InputError
from lcrag.core.lazy import lazy_module
from lcrag.readers import streaming
from lcrag.core.registry import RETRIEVERS, Option
from lcrag.retrieval.dense import embed_rows, load_vectors, local_batches
from lcrag.retrieval.embedders import Embedder
from lcrag.retrieval.integrity import ArtifactDamaged, ArtifactStore
from lcrag.core.files import atomic_write_text
from lcrag.core.types import Chunk, Document, ScoredChunk

if TYPE_CHECKING:
    import numpy as np

    from lcrag.retrieval.base import IndexView
else:  # imported on first use (see lcrag.core.lazy)
    np = lazy_module("numpy")

# The most sentences either side of a hit: LlamaIndex's default is 3; past a few dozen a window is a chapter, and
# k of them the document (read it with lc instead).
MAX_WINDOW = 64


def _write_spans(document: Document, path: Path) -> None:
    spans = SentenceChunker.sentence_spans(document.text)
    if not spans:
        raise InputError(f"document {document.id or document.source!r} has no sentences")
    atomic_write_text(path, json.dumps(spans))


def _read_spans(path: Path, length: int) -> list[tuple[int, int]]:
    try:
        spans = [(int(s), int(e)) for s, e in json.loads(path.read_text(encoding="utf-8"))]
    except (ValueError, TypeError, UnicodeDecodeError) as error:
        raise ArtifactDamaged(f"spans.json: {error}") from None
    if not spans or not all(0 <= s <= e <= length for s, e in spans):
        raise ArtifactDamaged("spans.json does not fit the document")
    return spans


class SentenceWindowRetriever:
    name = "sentence-window"

    def __init__(self, document: Document, spans: list[tuple[int, int]], vectors: np.ndarray, embedder: Embedder,
                 window: int = 3):
        if not 0 <= window <= MAX_WINDOW:
            raise InputError(f"--window must be 0 to {MAX_WINDOW} sentences, got {window}")
        self.document = document
        self.spans = spans
        self.vectors = vectors
        self.embedder = embedder
        self.window = window

    @classmethod
    def open(cls, document: Document, embedder: Embedder, cache_dir: str | Path, window: int = 3) -> SentenceWindowRetriever:
        """Sentences and their embeddings from ``cache_dir`` (computed and stored on first use).

        Both are checked before use and rebuilt when damaged, under the same lock and manifest as a document's
        index (:class:`~lcrag.retrieval.integrity.ArtifactStore`).
        """
        key = hashlib.sha256(f"{document.content_hash}\n{embedder.name}".encode()).hexdigest()[:24]
        store = ArtifactStore(Path(cache_dir) / "sentences" / key)
        spans_file, path = store.dir / "spans.json", store.dir / "vectors.npy"
        text = document.text
        spans = store.open("spans", ["spans.json"], lambda: _read_spans(spans_file, len(text)),
                           lambda: _write_spans(document, spans_file))
        vectors = store.open(
            "vectors", ["vectors.npy"], lambda: load_vectors(path, len(spans)),
            lambda: embed_rows(len(spans), lambda lo, hi: [text[s:e] for s, e in spans[lo:hi]],
                               local_batches(embedder), path, dimension=getattr(embedder, "dimension", 0)))
        return cls(document, spans, vectors, embedder, window)

    def _bounds(self, i: int) -> tuple[int, int]:
        """The first and last sentence of hit ``i``'s window (index arithmetic: a window is never listed)."""
        return max(0, i - self.window), min(len(self.spans) - 1, i + self.window)

    def _window(self, i: int) -> Chunk:
        lo, hi = self._bounds(i)
        start, end = self.spans[lo][0], self.spans[hi][1]
        return Chunk(i, start, end, self.document.text[start:end])

    def run(self, query: str, k: int | None = None) -> list[ScoredChunk]:
        if not self.spans:
            return []
        scores = np.asarray(self.vectors @ self.embedder.embed([query])[0], dtype=np.float32)
        order = np.lexsort((np.arange(len(scores)), -scores))  # best first, ties by position
        results: list[ScoredChunk] = []
        covered = DisjointSpans()
        for i in streaming.checked(order.tolist()):  # every sentence, when windows keep overlapping
            lo, hi = self._bounds(i)
            if covered.overlaps(lo, hi):
                continue  # its window would repeat text already returned
            results.append(ScoredChunk(self._window(i), float(scores[i])))
            covered.add(lo, hi)
            if k and len(results) >= k:
                break
        return results


class DisjointSpans:
    """Closed intervals of sentence numbers that never overlap, kept sorted: whether a new one overlaps any, in
    O(log n) whatever their widths."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def overlaps(self, lo: int, hi: int) -> bool:
        at = bisect.bisect_right(self.starts, hi)  # the intervals starting at or before hi: the last may reach lo
        return at > 0 and self.ends[at - 1] >= lo

    def add(self, lo: int, hi: int) -> None:
        at = bisect.bisect_left(self.starts, lo)
        self.starts.insert(at, lo)
        self.ends.insert(at, hi)


@RETRIEVERS.register("sentence-window", help="single sentences matched, returned with their neighbours",
                     embeds_sentences=True,  # every sentence embedded: several times the chunks' work at ingestion
                     options=(Option("window", int, 3, "sentences either side of a hit", min=0, max=MAX_WINDOW),))
def sentence_window_retriever(index: IndexView, window: int = 3) -> SentenceWindowRetriever:
    return SentenceWindowRetriever.open(index.document, index.embedder, index.cache_dir, window)
