"""Hybrid retrieval: reciprocal-rank fusion (Cormack et al. 2009) of several rankings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lcrag.core.registry import RETRIEVERS
from lcrag.retrieval.base import Retriever
from lcrag.core.types import ScoredChunk

if TYPE_CHECKING:
    from lcrag.retrieval.base import IndexView


class HybridRetriever:
    name = "hybrid"

    def __init__(self, retrievers: list[Retriever], rrf_k: int = 60, depth: int = 100):
        self.retrievers = retrievers
        self.rrf_k = rrf_k
        self.depth = depth

    def run(self, query: str, k: int | None = None) -> list[ScoredChunk]:
        depth = max(self.depth, k or 0) if k else None
        fused: dict[int, float] = {}
        chunks = {}
        for retriever in self.retrievers:
            for rank, hit in enumerate(retriever.run(query, depth), start=1):
                fused[hit.chunk.index] = fused.get(hit.chunk.index, 0.0) + 1.0 / (self.rrf_k + rank)
                chunks[hit.chunk.index] = hit.chunk
        order = sorted(fused, key=lambda i: (-fused[i], i))
        if k:
            order = order[:k]
        return [ScoredChunk(chunks[i], fused[i]) for i in order]


# composes: built only from other retrievers of the index, so it also works over a corpus index's units.
@RETRIEVERS.register("hybrid", help="BM25 and dense rankings fused by reciprocal rank", composes=True)
def hybrid_retriever(index: IndexView) -> HybridRetriever:
    return HybridRetriever([index.retriever("bm25"), index.retriever("dense")])
