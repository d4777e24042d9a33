"""Exact cosine retrieval over unit-norm chunk embeddings (memory-mapped float32 matrix)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from lcrag.retrieval.embedders import Embedder
from lcrag.types import Chunk, ScoredChunk

ProgressFn = Callable[[int], None]


def embed_chunks(
    chunks: list[Chunk], embedder: Embedder, path: str | Path, batch: int = 64, progress: ProgressFn | None = None
) -> np.ndarray:
    """Embed chunks into ``path`` (.npy) batch by batch, so memory stays bounded, and return a memmap.

    Rows are written to ``*.partial.npy`` with a count of finished rows beside it: an interrupted build resumes
    at the first unfinished batch instead of embedding everything again.
    """
    path = Path(path)
    tmp = path.with_suffix(".partial.npy")
    done_file = path.with_suffix(".partial.rows")
    out: np.memmap | None = None
    first = 0
    if tmp.exists() and done_file.exists():
        out = np.load(tmp, mmap_mode="r+")
        if out.shape[0] == len(chunks):
            first = int(done_file.read_text() or 0)
        else:
            out = None
    if progress and first:
        progress(first)
    for start in range(first, len(chunks), batch):
        vectors = embedder.embed([c.text for c in chunks[start : start + batch]])
        if out is None:
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(len(chunks), vectors.shape[1]))
        out[start : start + len(vectors)] = vectors
        out.flush()
        done_file.write_text(str(start + len(vectors)))
        if progress:
            progress(len(vectors))
    if out is None:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(0, getattr(embedder, "dimension", 0)))
    out.flush()
    del out
    tmp.replace(path)  # atomic: a crash never leaves a half-written index that looks complete
    done_file.unlink(missing_ok=True)
    return np.load(path, mmap_mode="r")


class DenseRetriever:
    name = "dense"

    def __init__(self, chunks: list[Chunk], vectors: np.ndarray, embedder: Embedder):
        if len(vectors) != len(chunks):
            raise ValueError(f"{len(chunks)} chunks but {len(vectors)} vectors")
        self.chunks = chunks
        self.vectors = vectors
        self.embedder = embedder

    def run(self, query: str, k: int | None = None) -> list[ScoredChunk]:
        if not self.chunks:
            return []
        q = self.embedder.embed([query])[0]
        scores = np.asarray(self.vectors @ q, dtype=np.float32)
        k = min(k or len(self.chunks), len(self.chunks))
        if k < len(scores):
            top = np.argpartition(-scores, k - 1)[:k]
        else:
            top = np.arange(len(scores))
        # Stable order: by score, then by position.
        order = sorted(top.tolist(), key=lambda i: (-float(scores[i]), i))
        return [ScoredChunk(self.chunks[i], float(scores[i])) for i in order]
