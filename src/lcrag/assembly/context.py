"""Turn ranked chunks into the context a reader sees: top-k or a token budget, in score or document order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from lcrag.errors import InputError
from lcrag.types import Chunk, ChunkUsed, ScoredChunk

ORDERS = ("score", "document")


@dataclass
class AssembledContext:
    text: str
    chunks: list[ChunkUsed] = field(default_factory=list)
    index_cost: dict | None = None  # set by retrieve_context for retrievers that spend LLM calls on indexing

    @property
    def chunk_tokens(self) -> int:
        return sum(c.tokens or 0 for c in self.chunks)


@dataclass(frozen=True)
class ContextAssembler:
    """Selects and orders chunks.

    - selection: the top ``k`` chunks, or, with ``budget``, the best chunks while their summed token counts
      stay within ``budget`` (the retrieved-token budget of OP-RAG's curves; separators and labels not counted);
    - ``order="score"``: best first, each prefixed by its chunk index (Self-Route's RAG baseline, after Xu et al. 2023);
    - ``order="document"``: by position in the document, no labels (OP-RAG).
    """

    k: int | None = 5
    budget: int | None = None
    order: str = "score"
    separator: str = "\n\n"
    score_label: str = "[Chunk {index}] "
    document_label: str = ""

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise InputError(f"unknown order {self.order!r}; choose score or document")
        if self.budget is None and (self.k is None or self.k < 1):
            raise InputError("-k must be at least 1")
        if self.budget is not None and self.budget < 1:
            raise InputError("--budget must be at least 1 token")

    def select(self, ranked: list[ScoredChunk], token_counts: Callable[[list[Chunk]], list[int]] | None) -> list[ChunkUsed]:
        if self.budget is None:
            # Top-k needs no token counts (the reader reports the prompt's); readers without a tokenizer still work.
            return [_used(s) for s in ranked[: self.k]]
        if token_counts is None:
            raise InputError("a token budget needs the reader's tokenizer")
        chosen: list[ChunkUsed] = []
        total = 0
        # Count in small batches: only the chunks that can still fit are ever tokenized.
        for start in range(0, len(ranked), 8):
            batch = ranked[start : start + 8]
            for scored, n in zip(batch, token_counts([s.chunk for s in batch])):
                if total + n > self.budget:
                    return chosen
                chosen.append(_used(scored, n))
                total += n
        return chosen

    def run(
        self,
        ranked: list[ScoredChunk],
        document_text: str,
        token_counts: Callable[[list[Chunk]], list[int]] | None = None,
    ) -> AssembledContext:
        chosen = self.select(ranked, token_counts)
        # Summary nodes carry generated text; the document's own pieces are cut from the document, unless there is
        # no document text (a corpus index's units carry their own).
        texts = {(s.chunk.index, s.chunk.layer): s.chunk.text for s in ranked if s.chunk.layer or not document_text}
        if self.order == "document":
            # Summaries sit at the start of the span they cover, after the text itself (higher layers later).
            chosen = sorted(chosen, key=lambda c: (c.start, c.layer, c.end))
            label = self.document_label
        else:
            label = self.score_label
        parts = [label.format(index=c.index) + texts.get((c.index, c.layer), document_text[c.start : c.end])
                 for c in chosen]
        return AssembledContext(text=self.separator.join(parts), chunks=chosen)


def _used(scored: ScoredChunk, tokens: int | None = None) -> ChunkUsed:
    c = scored.chunk
    return ChunkUsed(c.index, c.start, c.end, scored.score, tokens, c.layer)
