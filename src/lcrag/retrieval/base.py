from __future__ import annotations

from typing import Protocol

from lcrag.types import ScoredChunk


class Retriever(Protocol):
    """Ranks a document's chunks for a query, best first."""

    name: str

    def run(self, query: str, k: int | None = None) -> list[ScoredChunk]:
        """At most ``k`` chunks (all ranked chunks when ``k`` is None)."""
        ...
