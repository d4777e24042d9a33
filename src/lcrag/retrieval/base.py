from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from lcrag.core.types import Chunk, Ranking


# A retriever is declared once, with the sources whose indexes make it (lcrag.core.types.Ranking; every kind of
# source's index answers lcrag.core.types.SourceIndex); named here for the retrievers' modules.
Retriever = Ranking


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
