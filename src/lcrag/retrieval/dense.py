"""Exact cosine retrieval over unit-norm chunk embeddings (memory-mapped float32 matrix)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from lcrag.core.lazy import lazy_module
from lcrag.readers import streaming
from lcrag.core.registry import RETRIEVERS
from lcrag.retrieval.embedders import Embedder, uncached
from lcrag.retrieval.integrity import ArtifactDamaged
from lcrag.retrieval.topk import top_k
from lcrag.core.types import Chunk, ScoredChunk

if TYPE_CHECKING:
    import numpy as np

    from lcrag.retrieval.base import IndexView
else:  # imported on first use (see lcrag.core.lazy)
    np = lazy_module("numpy")

ProgressFn = Callable[[int], None]


EmbedBatches = Callable[[Iterator[list[str]]], Iterator["np.ndarray"]]


def local_batches(embedder: Embedder) -> EmbedBatches:
    """Embed text batches one after another in this process (bulk: past any query cache)."""
    return lambda batches: (uncached(embedder).embed(texts) for texts in batches)


def embed_rows(
    n: int,
    texts: Callable[[int, int], list[str]],
    embed_batches: EmbedBatches,
    path: str | Path,
    dimension: int = 0,
    batch: int = 64,
    progress: ProgressFn | None = None,
) -> np.ndarray:
    """Embed rows ``0..n-1`` (``texts(lo, hi)`` gives rows lo..hi-1) into ``path`` (.npy) batch by batch, so memory
    stays bounded, and return a memmap. ``embed_batches`` maps batches of texts to vectors in order, in this process
    or on a cluster (:mod:`lcrag.retrieval.executors`); the batches are the same either way, so are the vectors.

    Rows are written to ``*.partial.npy`` with a count of finished rows beside it: an interrupted build resumes
    at the first unfinished batch instead of embedding everything again.
    """
    path = Path(path)
    tmp = path.with_suffix(".partial.npy")
    done_file = path.with_suffix(".partial.rows")
    out: np.memmap | None = None
    first = 0
    if tmp.exists() and done_file.exists():
        out, first = _resumable(tmp, done_file, n, batch)
    if progress and first:
        progress(first)
    starts = range(first, n, batch)
    # A cancelled question stops before its next batch; the rows done are kept, and the next build resumes there.
    batches = embed_batches(texts(lo, min(lo + batch, n)) for lo in starts)
    for lo, vectors in zip(streaming.checked(starts, every=1), batches):
        if out is None:
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, vectors.shape[1]))
        out[lo : lo + len(vectors)] = vectors
        out.flush()
        done_file.write_text(str(lo + len(vectors)))
        if progress:
            progress(len(vectors))
    if out is None:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(0, dimension))
    out.flush()
    del out
    tmp.replace(path)  # atomic: a crash never leaves a half-written index that looks complete
    done_file.unlink(missing_ok=True)
    return np.load(path, mmap_mode="r")


def _resumable(tmp: Path, done_file: Path, n: int, batch: int) -> tuple[np.memmap | None, int]:
    """The partial matrix of an interrupted build and its first unfinished row; (None, 0) when it is unusable."""
    try:
        out = np.load(tmp, mmap_mode="r+")
        first = int(done_file.read_text() or 0)
    except (ValueError, OSError, EOFError):
        return None, 0  # damaged leftovers of an interrupted build: start again
    if out.ndim != 2 or out.shape[0] != n or not 0 <= first <= n:
        return None, 0
    return out, first - first % batch  # batches are aligned, so a resumed run embeds the very same batches


def load_vectors(path: Path, rows: int) -> np.ndarray:
    """A stored matrix of ``rows`` float32 embeddings, memory-mapped; :class:`ArtifactDamaged` when it is not one."""
    try:
        vectors = np.load(path, mmap_mode="r")
    except (ValueError, OSError, EOFError) as error:
        raise ArtifactDamaged(f"{Path(path).name}: {error}") from None
    if vectors.dtype != np.float32 or vectors.ndim != 2 or vectors.shape[0] != rows:
        raise ArtifactDamaged(f"{Path(path).name} holds {vectors.shape} {vectors.dtype}, not {rows} float32 rows")
    return vectors


def embed_chunks(
    chunks: list[Chunk], embedder: Embedder, path: str | Path, batch: int = 64, progress: ProgressFn | None = None
) -> np.ndarray:
    """A document's chunk embeddings (see :func:`embed_rows`)."""
    return embed_rows(len(chunks), lambda lo, hi: [c.text for c in chunks[lo:hi]], local_batches(embedder), path,
                      dimension=getattr(embedder, "dimension", 0), batch=batch, progress=progress)


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
        # Stable order: by score, then by position (see lcrag.retrieval.topk).
        order = top_k(scores, min(k or len(self.chunks), len(self.chunks)))
        return [ScoredChunk(self.chunks[i], float(scores[i])) for i in order]


@RETRIEVERS.register("dense", help="chunks ranked by embedding similarity (--embedder)")
def dense_retriever(index: IndexView) -> DenseRetriever:
    return DenseRetriever(index.chunks, index.chunk_vectors(), index.embedder)
