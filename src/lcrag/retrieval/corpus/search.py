"""Searching a corpus index's units: MaxP over piece embeddings (exact, or through faiss) and BM25 (tantivy)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lcrag.core.errors import InputError
from lcrag.core.lazy import lazy_module
from lcrag.readers import streaming
from lcrag.retrieval.bm25 import bm25_search, open_bm25
from lcrag.retrieval.topk import top_k

if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use (see lcrag.core.lazy)
    np = lazy_module("numpy")


@dataclass
class UnitHit:
    unit: int
    score: float


def piece_layout(piece_unit: np.ndarray) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """How to reduce piece scores to unit scores: an order that puts each unit's pieces together (None when they
    already are, as for passages and documents), where each unit's run starts in that order, and the run's unit."""
    order = None if np.all(piece_unit[1:] >= piece_unit[:-1]) else np.argsort(piece_unit, kind="stable")
    ordered = piece_unit if order is None else piece_unit[order]
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]])) if len(ordered) else ordered
    return order, starts, ordered[starts]


def maxp_search(vectors: np.ndarray, piece_unit: np.ndarray, qv: np.ndarray, k: int, block: int = 32768,
                layout: tuple | None = None) -> list[list[UnitHit]]:
    """MaxP: a unit's score is the best score of its pieces. Exact: piece scores are computed streaming the
    (memory-mapped) matrix in blocks, then each unit's maximum is one ``reduceat`` over its run of pieces.
    One list of hits per query. ``layout`` (from :func:`piece_layout`) saves re-deriving the runs per call."""
    order, starts, unit_ids = layout if layout is not None else piece_layout(piece_unit)
    n = len(vectors)
    out: list[list[UnitHit]] = []
    per_call = max(1, min(len(qv), (1 << 25) // max(1, n)))  # the piece score matrix stays <= 128 MB
    for q0 in range(0, len(qv), per_call):
        q = np.asarray(qv[q0 : q0 + per_call], dtype=np.float32)
        scores = np.empty((n, len(q)), dtype=np.float32)
        for lo in streaming.checked(range(0, n, block), every=1):  # a block: 32,768 pieces of a large corpus
            scores[lo : lo + block] = np.asarray(vectors[lo : lo + block]) @ q.T
        if order is not None:
            scores = scores[order]
        best = np.maximum.reduceat(scores, starts, axis=0) if n else scores  # (units, queries)
        for j in range(len(q)):
            column = best[:, j]
            out.append([UnitHit(int(unit_ids[u]), float(column[u])) for u in top_k(column, k, drop_nonfinite=True)])
    return out


def import_faiss():
    try:
        import faiss
    except ImportError:
        raise InputError("faiss is not installed: pip install -e '.[faiss]' in lcrag's checkout") from None
    faiss.omp_set_num_threads(1)  # one query per call: threads only add overhead (measured here)
    return faiss


def faiss_search(index, piece_unit: np.ndarray, qv: np.ndarray, k: int) -> list[list[UnitHit]]:
    """The top ``k`` units per query from a faiss index over the pieces: a unit scores its best piece found."""
    depth = min(index.ntotal, max(100, 20 * k))  # pieces fetched to find k distinct units
    scores, ids = index.search(np.ascontiguousarray(qv, dtype=np.float32), depth)
    out = []
    for row_scores, row_ids in zip(scores, ids):
        best: dict[int, float] = {}
        for s, p in zip(row_scores.tolist(), row_ids.tolist()):
            if p >= 0:
                u = int(piece_unit[p])
                if u not in best or s > best[u]:
                    best[u] = s
        ranked = sorted(best.items(), key=lambda item: (-item[1], item[0]))[:k]
        out.append([UnitHit(u, float(s)) for u, s in ranked])
    return out


class UnitBM25:
    """The tantivy index over one unit kind's text (built by :func:`lcrag.retrieval.corpus.build.build_bm25`),
    searched by the same BM25 core as a document's chunks (:func:`lcrag.retrieval.bm25.bm25_search`)."""

    def __init__(self, path: Path):
        self.schema, self.searcher = open_bm25(path)

    def search(self, query: str, k: int) -> list[UnitHit]:
        return [UnitHit(unit, score) for unit, score in bm25_search(self.searcher, self.schema, query, k)]
