"""A corpus index as the source every strategy reads: its retrieval units are the chunks (LongRAG's corpus
retrieval as a retriever), and its long context is the best units filling the reader's window.

``lcrag ask INDEX QUESTION`` and ``lcrag eval --corpus INDEX`` (for questions without their own context) answer
with RAG, OP-RAG, Self-Route or LC over a corpus built by ``lcrag corpus build``:

- retrieval: ``bm25`` (tantivy over the units' text) and ``dense`` (MaxP over piece embeddings) search the units
  with the index's own search (:meth:`CorpusIndex.search_many`); retrievers that only combine other retrievers
  (registered with ``composes=True``, e.g. ``hybrid``) work on top of them. Retrievers that read a single
  document's text (sentence windows, summary trees) are refused with a one-line error;
- a unit is a :class:`~lcrag.core.types.Chunk` whose ``start``/``end`` are its position in the corpus's sequence of
  units (``unit``, ``unit + 1``), so "document order" (OP-RAG) means corpus order;
- long context: a whole corpus does not fit any window, so LC reads the best-ranked units, whole, while they fit
  the reader's window (cut in the middle only when the best unit alone is longer), in corpus order
  (:func:`lcrag.assembly.truncation.fill_with_chunks`, given :meth:`CorpusUnits.ranked`). This is
  LongRAG's long reader; Self-Route over a corpus is then short RAG first and that long read for declined questions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lcrag.assembly.truncation import TruncatedText, fill_with_chunks
from lcrag.core.errors import InputError
from lcrag.core.registry import RETRIEVERS, PartSpec
from lcrag.retrieval.corpus.settings import SCORERS
from lcrag.core.tokenization import Tokenizer, count_tokens
from lcrag.core.types import Chunk, Ranked, ScoredChunk

if TYPE_CHECKING:
    from lcrag.retrieval.base import Retriever
    from lcrag.retrieval.corpus.index import CorpusIndex
    from lcrag.retrieval.embedders import Embedder

# Units ranked when a strategy asks for "all" (a token budget, or filling the LC window): enough for any window
# with passage units, without reading a whole corpus's text for one question.
RANKED_DEPTH = 256


class UnitRetriever:
    """LongRAG's unit search as a :class:`~lcrag.retrieval.base.Retriever`: ranked units as chunks."""

    def __init__(self, units: CorpusUnits, scorer: str):
        self.units, self.scorer, self.name = units, scorer, scorer

    def run(self, query: str, k: int | None = None) -> list[ScoredChunk]:
        hits = self.units.index.search(query, self.units.kind, self.scorer, k or RANKED_DEPTH)
        texts = self.units.index.unit_texts(self.units.kind, [h.unit for h in hits])
        return [ScoredChunk(Chunk(h.unit, h.unit, h.unit + 1, text), h.score) for h, text in zip(hits, texts)]


@dataclass
class CorpusUnits:
    """What strategies ask of an index (``retriever(name)``, ``chunk_tokens``), answered by a corpus index."""

    index: CorpusIndex
    kind: str
    embedder: Callable[[], Embedder] | None = None
    _retrievers: dict[PartSpec, Retriever] = field(default_factory=dict)
    _tokens: dict[tuple[str, int], int] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)

    @classmethod
    def open(cls, directory: str, unit: str | None = None,
             embedder: Callable[[], Embedder] | None = None) -> CorpusUnits:
        """The units of kind ``unit`` (None: the smallest built) of the corpus index in ``directory``."""
        from lcrag.retrieval.corpus.index import CorpusIndex

        index = CorpusIndex(directory)
        built = index.unit_kinds
        if not built:
            raise InputError(f"{directory} has no retrieval units yet; finish it with `lcrag corpus build`")
        kind = unit or built[0]  # UNIT_KINDS order: the smallest units built, as RAG's chunks
        index.units(kind)  # a unit kind that was not built: one line naming those that were
        return cls(index, kind, embedder)

    def retriever(self, spec: PartSpec | str) -> Retriever:
        """``bm25`` or ``dense`` over the units, or a registered retriever that composes others (``hybrid``), made
        from its spec: its options reach it, as over a document (a name: its defaults)."""
        if isinstance(spec, str):
            spec = RETRIEVERS.get(spec).spec()  # unknown: an OptionError listing the registered ones
        with self._lock:
            if spec not in self._retrievers:
                self._retrievers[spec] = self._make(spec)
            return self._retrievers[spec]

    def _make(self, spec: PartSpec) -> Retriever:
        if spec.name == "dense":
            if self.embedder is None:
                raise InputError("dense search needs the embedder the index was built with")
            self.index.embedder = self.embedder()
        if spec.name in SCORERS:
            return UnitRetriever(self, spec.name)
        part = RETRIEVERS.get(spec.name)
        if not part.meta.get("composes"):
            composing = [p for p in RETRIEVERS.names() if RETRIEVERS.get(p).meta.get("composes")]
            raise InputError(f"retriever {spec.name!r} reads a single document's text; over a corpus index use "
                             f"{', '.join([*SCORERS, *composing])}")
        return part.create(self, **spec.kwargs)

    def sentence_spans(self, start: int, end: int) -> tuple[tuple[int, int], ...]:
        """A corpus has no one text to split (its answers cite no sentence): the span whole."""
        return ((0, end - start),)

    def chunk_tokens(self, chunks: list[Chunk], tokenizer: Tokenizer) -> list[int]:
        """Each unit's length in ``tokenizer`` tokens (counted once per unit and tokenizer)."""
        with self._lock:
            out = []
            for chunk in chunks:
                key = (tokenizer.name, chunk.index)
                if key not in self._tokens:
                    self._tokens[key] = count_tokens(tokenizer, chunk.text)
                out.append(self._tokens[key])
            return out

    def ranked(self, retriever: PartSpec | str, question: str) -> list[ScoredChunk]:
        """Units best first by ``retriever`` (at most :data:`RANKED_DEPTH`); when none shares a word with the
        question, the corpus's first units, so a long read always has text."""
        ranked = self.retriever(retriever).run(question, None)
        if ranked:
            return ranked
        texts = self.index.unit_texts(self.kind, range(min(RANKED_DEPTH, len(self.index.units(self.kind)))))
        return [ScoredChunk(Chunk(u, u, u + 1, t), 0.0) for u, t in enumerate(texts)]

    def search(self, spec: PartSpec | str, query: str, depth: int | None) -> Ranked:
        """The units the retriever ``spec`` ranks best for ``query`` (a corpus builds no summaries, asks no reader)."""
        return Ranked(self.retriever(spec).run(query, depth))

    def read_best(self, question: str, retriever: PartSpec, tokenizer: Tokenizer, limit: int) -> TruncatedText:
        """LC over a corpus: the units ranked best for ``question``, whole, while they fit ``limit`` tokens, in
        corpus order (the best one cut in the middle when it alone is longer)."""
        return fill_with_chunks(self.ranked(retriever, question), lambda chunks: self.chunk_tokens(chunks, tokenizer),
                                tokenizer, limit)

    def close(self) -> None:
        self.index.close()
