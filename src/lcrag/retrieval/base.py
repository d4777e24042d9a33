from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from lcrag.core.types import Chunk, ScoredChunk


class Retriever(Protocol):
    """Ranks a document's chunks for a query, best first."""

    name: str

    def run(self, query: str, k: int | None = None) -> list[ScoredChunk]:
        """At most ``k`` chunks (all ranked chunks when ``k`` is None)."""
        ...


class RetrievalIndex(Protocol):
    """What a strategy asks of the index it answers over: a document's (:class:`lcrag.retrieval.index.DocumentIndex`,
    which also has its ``chunks``) or a corpus index's units (:class:`lcrag.retrieval.corpus.source.CorpusUnits`)."""

    def retriever(self, spec: Any) -> Retriever: ...  # a name, or a RetrieverSpec

    def chunk_tokens(self, chunks: list[Chunk], tokenizer: Any) -> list[int]: ...

    def sentence_spans(self, start: int, end: int) -> tuple[tuple[int, int], ...]: ...  # relative to start


class IndexView(Protocol):
    """What a retriever's factory reads of the index it is built over (:class:`lcrag.retrieval.index.DocumentIndex`
    has it all). Retrievers name this, not the index class: the index builds them through the registry, so naming
    the class back would tie every retriever and the index into one import circle."""

    document: Any
    chunks: list[Chunk]
    dir: Path
    cache_dir: Path
    store: Any  # lcrag.retrieval.integrity.ArtifactStore: checked files, set aside and rebuilt when damaged
    options: Any  # lcrag.retrieval.index.SummaryIndexConfig: how summary structures are built

    @property
    def embedder(self) -> Any: ...

    @property
    def reader(self) -> Any: ...

    @property
    def summary_reader(self) -> Any: ...

    def chunk_vectors(self) -> Any: ...

    def retriever(self, spec: Any) -> Retriever: ...  # a name, or a RetrieverSpec
