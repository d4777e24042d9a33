"""Retrieval units over a corpus (LongRAG): passages, whole documents, or groups of related documents.

Every document is cut into *pieces* of about ``piece_words`` words (balanced, never across documents). Pieces are
what gets embedded, once: a passage unit is one piece, a document unit is its pieces, a group is its documents'
pieces, and a unit's dense score is the maximum over its pieces (MaxP). All three granularities therefore share one
embedding pass.

Grouping is the paper's Algorithm 1 (documents by ascending degree; each joins the related groups, smallest first,
while the group stays within ``max_tokens``). The relation comes from the corpus's ``links`` when it has them, or,
for corpora without hyperlinks (the limitation the paper names), from title mentions (document A names document B's
title in its text) or from embedding neighbours. Everything is ordered by position or by explicit keys, never by set
or dict iteration over hashed values, so the same corpus gives the same units on every run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
import re
from array import array
from collections.abc import Callable
from dataclasses import dataclass

from lcrag.documents.corpus import CorpusDocument, CorpusStore
from lcrag.core.errors import InputError
from lcrag.core.text import CHUNK_WORD
from lcrag.core.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use (see lcrag.core.lazy)
    np = lazy_module("numpy")

UNIT_KINDS = ("passage", "document", "grouped")
GROUPINGS = ("auto", "links", "mentions", "neighbours")
_PARENTHETICAL = re.compile(r"\s*\([^()]*\)\s*$")


def passage_spans(text: str, words: int) -> list[tuple[int, int]]:
    """Character spans of balanced passages of about ``words`` words (a 105-word text gives one passage, not
    100 + 5; a 250-word text gives three of ~83)."""
    spans = [m.span() for m in CHUNK_WORD.finditer(text)]
    if not spans:
        return []
    n = max(1, int(len(spans) / words + 0.5))  # half up: 150 words make two passages of 75
    bounds = np.linspace(0, len(spans), n + 1).round().astype(int)
    return [(spans[a][0], spans[b - 1][1]) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def render_document(doc: CorpusDocument, start: int = 0, end: int | None = None) -> str:
    """The text a unit shows for a document (or a piece of one): its title, then the text."""
    body = doc.text[start:end] if end is not None or start else doc.text
    return f"{doc.title}\n{body}" if doc.title else body


@dataclass
class Pieces:
    """Piece ``i`` is ``docs[doc[i]].text[start[i]:end[i]]``; pieces of one document are consecutive."""

    doc: np.ndarray  # int32
    start: np.ndarray  # int32
    end: np.ndarray  # int32

    def __len__(self) -> int:
        return len(self.doc)


def cut_pieces(store: CorpusStore, words: int, progress: Callable[[int], None] | None = None) -> Pieces:
    # array('i') keeps 4 bytes per number: 1M pieces cost 12 MB, not the ~100 MB of Python int lists.
    doc, start, end = array("i"), array("i"), array("i")
    for i, d in enumerate(store.iter()):
        for a, b in passage_spans(d.text, words) or [(0, len(d.text))]:
            doc.append(d.idx)
            start.append(a)
            end.append(b)
        if progress and i % 1000 == 999:
            progress(1000)
    if progress:
        progress(len(store) % 1000)
    return Pieces(*(np.frombuffer(a, dtype=np.int32).copy() for a in (doc, start, end)))


# -- relation graphs (CSR, undirected, no self loops) -----------------------------------------------------------------
@dataclass
class Graph:
    indptr: np.ndarray  # int64, len n + 1
    indices: np.ndarray  # int32

    @classmethod
    def from_edges(cls, n: int, src: np.ndarray, dst: np.ndarray) -> Graph:
        keep = src != dst
        a = np.concatenate([src[keep], dst[keep]]).astype(np.int64)
        b = np.concatenate([dst[keep], src[keep]]).astype(np.int64)
        if len(a):
            pairs = np.unique(a * n + b)  # sorted, de-duplicated
            a, b = pairs // n, pairs % n
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.add.at(indptr, a + 1, 1)
        return cls(np.cumsum(indptr), b.astype(np.int32))

    def neighbours(self, i: int) -> np.ndarray:
        return self.indices[self.indptr[i] : self.indptr[i + 1]]

    @property
    def degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    @property
    def edges(self) -> int:
        return len(self.indices) // 2


def links_graph(store: CorpusStore, batch: int = 2000) -> Graph:
    """Edges from each document's ``links`` (titles or ids of other documents; unknown ones are ignored)."""
    src, dst = array("i"), array("i")
    pending: list[tuple[int, tuple[str, ...]]] = []

    def resolve() -> None:
        keys = sorted({k for _, links in pending for k in links})
        where = store.lookup(keys)
        for idx, links in pending:
            for key in links:
                if key in where:
                    src.append(idx)
                    dst.append(where[key])
        pending.clear()

    for doc in store.iter():
        if doc.links:
            pending.append((doc.idx, doc.links))
            if len(pending) >= batch:
                resolve()
    if pending:
        resolve()
    return Graph.from_edges(len(store), np.frombuffer(src, np.int32), np.frombuffer(dst, np.int32))


def mention_key(title: str) -> str:
    """The surface form a title is mentioned by: "Kiss and Tell (1945 film)" -> "Kiss and Tell"."""
    return _PARENTHETICAL.sub("", title).strip()


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def mentions_graph(store: CorpusStore, min_chars: int = 4) -> Graph:
    """Edges between a document and every document whose title it names (case-sensitive, whole words).

    An Aho-Corasick automaton over all titles finds every mention in one pass per document. Titles shorter than
    ``min_chars`` are left out: they match everywhere and say little.
    """
    import ahocorasick

    automaton = ahocorasick.Automaton()
    for idx, title in store.iter_titles():
        key = mention_key(title)
        if len(key) >= min_chars and key not in automaton:  # the first document with a title keeps it
            automaton.add_word(key, (idx, len(key)))
    src, dst = array("i"), array("i")
    if len(automaton):
        automaton.make_automaton()
        for doc in store.iter():
            text = doc.text
            for end, (target, length) in automaton.iter(text):
                start = end - length + 1
                before = text[start - 1] if start > 0 else " "
                after = text[end + 1] if end + 1 < len(text) else " "
                if not _is_word_char(before) and not _is_word_char(after):
                    src.append(doc.idx)
                    dst.append(target)
    return Graph.from_edges(len(store), np.frombuffer(src, np.int32), np.frombuffer(dst, np.int32))


def neighbours_graph(doc_vectors: np.ndarray, neighbours: int = 5, min_similarity: float = 0.6,
                     block: int = 4096) -> Graph:
    """Edges from each document to its ``neighbours`` most similar documents (cosine of unit-norm vectors, at
    least ``min_similarity``); exact, in blocks so memory stays at ``block`` x N scores."""
    n = len(doc_vectors)
    src, dst = [], []
    take = min(neighbours + 1, n)
    for lo in range(0, n, block):
        hi = min(lo + block, n)
        scores = np.asarray(doc_vectors[lo:hi]) @ np.asarray(doc_vectors).T
        scores[np.arange(hi - lo), np.arange(lo, hi)] = -np.inf  # no self loops
        top = np.argpartition(-scores, take - 1, axis=1)[:, :take]
        rows = np.repeat(np.arange(lo, hi), take)
        cols = top.reshape(-1)
        keep = scores[rows - lo, cols] >= min_similarity
        src.append(rows[keep])
        dst.append(cols[keep])
    empty = np.zeros(0, np.int64)
    return Graph.from_edges(n, np.concatenate(src) if src else empty, np.concatenate(dst) if dst else empty)


def group_documents(graph: Graph, sizes: np.ndarray, max_size: int) -> list[list[int]]:
    """LongRAG Algorithm 1. ``sizes[d]`` is document d's size (tokens); a group never exceeds ``max_size`` unless
    one document alone does. Returns groups of positions, each sorted, ordered by their first document."""
    n = len(sizes)
    degree = graph.degree
    order = np.lexsort((np.arange(n), degree))  # ascending degree, ties by position
    group_of = np.full(n, -1, dtype=np.int64)
    members: dict[int, list[int]] = {}
    group_size: dict[int, int] = {}
    for gid, d in enumerate(order.tolist()):
        related = sorted({int(g) for g in group_of[graph.neighbours(d)] if g >= 0},
                         key=lambda g: (group_size[g], g))
        new, size = [d], int(sizes[d])
        for g in related:
            if size + group_size[g] <= max_size:
                new.extend(members.pop(g))
                size += group_size.pop(g)
        members[gid] = new
        group_size[gid] = size
        group_of[new] = gid
    groups = [sorted(m) for m in members.values()]
    groups.sort(key=lambda m: m[0])
    return groups


@dataclass
class Units:
    """One granularity: unit ``u`` holds documents ``docs[ptr[u]:ptr[u+1]]`` (or, for passages, piece ``u``)."""

    kind: str
    ptr: np.ndarray  # int64, len units + 1
    docs: np.ndarray  # int32
    piece_unit: np.ndarray  # int32, the unit of every piece

    def __len__(self) -> int:
        return len(self.ptr) - 1

    def unit_docs(self, u: int) -> np.ndarray:
        return self.docs[self.ptr[u] : self.ptr[u + 1]]


def make_units(kind: str, pieces: Pieces, n_docs: int, groups: list[list[int]] | None = None) -> Units:
    if kind == "passage":
        ids = np.arange(len(pieces), dtype=np.int32)
        return Units(kind, np.arange(len(pieces) + 1, dtype=np.int64), pieces.doc.copy(), ids)
    if kind == "document":
        return Units(kind, np.arange(n_docs + 1, dtype=np.int64), np.arange(n_docs, dtype=np.int32), pieces.doc.copy())
    if kind == "grouped":
        if groups is None:
            raise ValueError("grouped units need groups")
        lengths = np.array([len(g) for g in groups], dtype=np.int64)
        ptr = np.concatenate([[0], np.cumsum(lengths)])
        docs = np.fromiter((d for g in groups for d in g), dtype=np.int32, count=int(ptr[-1]))
        doc_unit = np.empty(n_docs, dtype=np.int32)
        doc_unit[docs] = np.repeat(np.arange(len(groups), dtype=np.int32), lengths)
        return Units(kind, ptr, docs, doc_unit[pieces.doc])
    raise InputError(f"unknown unit {kind!r}; choose one of {', '.join(UNIT_KINDS)}")
