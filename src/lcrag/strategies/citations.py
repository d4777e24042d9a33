"""Sources for an answer: where the text it was read from came from (file, pages, section, a quoted snippet).

A RAG answer cites the chunks the reader saw, best first. An LC answer saw the whole document, so it cites the
chunks that best match the question and its answer in the document's BM25 index, marked ``located``; Self-Route's
and the cascade's sources follow the route they took."""

from __future__ import annotations

from lcrag.core.provenance import Source, quote
from lcrag.strategies.base import QueryContext
from lcrag.core.types import CORPUS, Answer, ChunkUsed

LOCATED = 2  # chunks cited for an LC answer
_NO_SOURCES = ("closed-book",)


def _located(ctx: QueryContext, answer: Answer, query: str) -> list[ChunkUsed]:
    """The chunks best matching ``query`` (question and answer), among those the reader saw: when LC cut the middle
    of a long document, a passage from the cut part cannot have supported the answer, so it is not cited."""
    retriever = ctx.index().retriever("bm25")
    seen = answer.context if answer.truncated_tokens and answer.context else None
    ranked = retriever.run(query, LOCATED if seen is None else LOCATED * 20)
    if seen is not None:
        ranked = [s for s in ranked if _inside(s.chunk.text, seen)]
    return [ChunkUsed(s.chunk.index, s.chunk.start, s.chunk.end, s.score) for s in ranked[:LOCATED]]


def _inside(text: str, seen: str) -> bool:
    """Whether a chunk's text is in what the reader saw (its start and end; the cut may split it, by tokens)."""
    flat = text.strip()
    return flat[:60] in seen and flat[-60:] in seen


def cite(ctx: QueryContext, answer: Answer, question: str | None = None) -> list[Source]:
    """The answer's sources; none for a closed-book answer or a source that is not one text (a corpus index).
    ``question``: the question as it stands alone, when it differs from the one asked (a follow-up: "What date?"
    says nothing of where the date is; the conversation it was made to stand alone with does)."""
    if answer.route in _NO_SOURCES or ctx.document.kind == CORPUS or not answer.text.strip():
        return []
    query = f"{question or answer.question} {answer.text}"
    read = answer.answer_chunks if answer.answer_chunks is not None else answer.chunks
    located = answer.route == "lc" or not read
    chunks = _located(ctx, answer, query) if located else [c for c in read if c.layer == 0 or c.end > c.start]
    index = ctx.index() if chunks else None
    return [Source(how="located" if located else "retrieved", chunk=c.index, score=round(c.score, 4),
                   **quote(ctx.document, c.start, c.end, index.sentence_spans(c.start, c.end), query)) for c in chunks]
