"""Turn ranked chunks into the context a reader sees: top-k or a token budget, in score or document order."""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass, field

from lcrag.core.errors import InputError
from lcrag.readers import streaming
from lcrag.core.types import Chunk, ChunkUsed, ScoredChunk

ORDERS = ("score", "document")
CHUNK_FORMAT_FIELDS = ("text", "rank", "index")


def check_chunk_format(template: str) -> None:
    """A chunk format uses ``{text}`` and may use ``{rank}`` and ``{index}``, plain (no format spec or conversion)."""
    if not isinstance(template, str):
        raise InputError(f"chunk_format must be a string, not {type(template).__name__}")
    if not template:
        return
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise InputError(f"chunk_format is not a valid template ({exc}); write literal braces as {{{{ and }}}}") from None
    used = {name for _, name, _, _ in parsed if name is not None}
    if any(name is not None and (name not in CHUNK_FORMAT_FIELDS or spec or conversion)
           for _, name, spec, conversion in parsed) or "text" not in used:
        raise InputError(f"chunk_format must use {{text}} and may use {{rank}} (0, 1, ... as shown) and {{index}} (the "
                         f"chunk's number in the document), plain; got {template!r}")


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
    - ``order="document"``: by position in the document, no labels (OP-RAG);
    - ``chunk_format``, when set, writes every chunk instead of the labels and the separator: ``{text}``, ``{rank}``
      (0, 1, ... in the order shown) and ``{index}``, each chunk's own separator included (LaRA's
      ``"chunk {rank}: {text}.\n\n"``); a prompt set selects one with its ``chunk_format``.
    """

    k: int | None = 5
    budget: int | None = None
    order: str = "score"
    separator: str = "\n\n"
    score_label: str = "[Chunk {index}] "
    document_label: str = ""
    chunk_format: str = ""

    def __post_init__(self) -> None:
        check_chunk_format(self.chunk_format)
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
        for start in streaming.checked(range(0, len(ranked), 8), every=8):
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
        document_text: str | None,
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
        pieces = [texts[c.index, c.layer] if (c.index, c.layer) in texts else document_text[c.start : c.end]
                  for c in chosen]
        if self.chunk_format:
            text = "".join(self.chunk_format.format(text=piece, rank=rank, index=c.index)
                           for rank, (c, piece) in enumerate(zip(chosen, pieces)))
        else:
            text = self.separator.join(label.format(index=c.index) + piece for c, piece in zip(chosen, pieces))
        return AssembledContext(text=text, chunks=chosen)


def _used(scored: ScoredChunk, tokens: int | None = None) -> ChunkUsed:
    c = scored.chunk
    return ChunkUsed(c.index, c.start, c.end, scored.score, tokens, c.layer)
