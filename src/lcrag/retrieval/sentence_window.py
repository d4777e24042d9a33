"""Sentence-window retrieval (LlamaIndex's SentenceWindowNodeParser + MetadataReplacementPostProcessor).

Single sentences (syntok) are embedded and matched against the query; each hit is returned as the window of
``window`` sentences either side of it, cut from the document. A hit whose window would overlap one returned
before is skipped, so the context never repeats text (LlamaIndex returns overlapping windows as they come).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from lcrag.chunking import SentenceChunker
from lcrag.errors import InputError
from lcrag.retrieval.dense import embed_rows, local_batches
from lcrag.retrieval.embedders import Embedder
from lcrag.types import Chunk, Document, ScoredChunk


class SentenceWindowRetriever:
    name = "sentence-window"

    def __init__(self, document: Document, spans: list[tuple[int, int]], vectors: np.ndarray, embedder: Embedder,
                 window: int = 3):
        if window < 0:
            raise InputError("--window must be 0 or more sentences")
        self.document = document
        self.spans = spans
        self.vectors = vectors
        self.embedder = embedder
        self.window = window

    @classmethod
    def open(cls, document: Document, embedder: Embedder, cache_dir: str | Path, window: int = 3) -> SentenceWindowRetriever:
        """Sentences and their embeddings from ``cache_dir`` (computed and stored on first use)."""
        key = hashlib.sha256(f"{document.content_hash}\n{embedder.name}".encode()).hexdigest()[:24]
        directory = Path(cache_dir) / "sentences" / key
        directory.mkdir(parents=True, exist_ok=True)
        spans_file = directory / "spans.json"
        if spans_file.exists():
            spans = [tuple(s) for s in json.loads(spans_file.read_text())]
        else:
            spans = SentenceChunker.sentence_spans(document.text)
            if not spans:
                raise InputError(f"document {document.id or document.source!r} has no sentences")
            tmp = spans_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(spans))
            tmp.replace(spans_file)
        path = directory / "vectors.npy"
        if path.exists():
            vectors = np.load(path, mmap_mode="r")
        else:
            text = document.text
            vectors = embed_rows(len(spans), lambda lo, hi: [text[s:e] for s, e in spans[lo:hi]],
                                 local_batches(embedder), path, dimension=getattr(embedder, "dimension", 0))
        return cls(document, spans, vectors, embedder, window)

    def _window(self, i: int) -> Chunk:
        lo, hi = max(0, i - self.window), min(len(self.spans) - 1, i + self.window)
        start, end = self.spans[lo][0], self.spans[hi][1]
        return Chunk(i, start, end, self.document.text[start:end])

    def run(self, query: str, k: int | None = None) -> list[ScoredChunk]:
        if not self.spans:
            return []
        scores = np.asarray(self.vectors @ self.embedder.embed([query])[0], dtype=np.float32)
        order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
        results: list[ScoredChunk] = []
        covered: set[int] = set()
        for i in order:
            span = range(max(0, i - self.window), i + self.window + 1)
            if any(j in covered for j in span):
                continue  # its window would repeat text already returned
            results.append(ScoredChunk(self._window(i), float(scores[i])))
            covered.update(span)
            if k and len(results) >= k:
                break
        return results
