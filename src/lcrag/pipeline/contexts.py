"""Answering contexts: what a strategy answers with over one source (its index, made when a strategy first reads
it; its retriever, assembler and prompts; what LC reads of it), made once per source and per set of choices that
shape it, and kept in the pipeline's memory beside its indexes. Every kind of source is asked the same two things
(:class:`lcrag.core.types.QuestionSource`): its index, and what LC reads of it."""

from __future__ import annotations

from collections.abc import Callable

from lcrag.core.lru import SizedLRU
from lcrag.core.types import IndexParts, QuestionSource
from lcrag.pipeline.specs import QuestionSpec
from lcrag.readers import GenerationParams, Reader
from lcrag.strategies import QueryContext
from lcrag.strategies.routing.share_control import ShareLedgers


class AnsweringContexts:
    """One pipeline's answering contexts, kept in a memory it may share with other pipelines: a context holds its
    pipeline's reader, so each pipeline's are keyed apart (``_owner``), and by the source's content hash (what
    :meth:`lcrag.pipeline.pipeline.Pipeline.forget` drops them by) and :attr:`QuestionSpec.context_key`."""

    def __init__(self, memory: SizedLRU, reader: Callable[[], Reader], share_ledgers: ShareLedgers):
        self._memory, self._reader, self._share_ledgers = memory, reader, share_ledgers
        self._owner = object()

    def made_for(self, source: QuestionSource, spec: QuestionSpec, parts: IndexParts) -> QueryContext:
        """The context for ``spec`` over ``source``, made once; its index is made by ``parts`` when first read."""
        def made() -> QueryContext:
            index = lambda: source.open_index(parts)  # noqa: E731 - LC and closed-book never make it
            return QueryContext(document=source, reader=self._reader(), index=index, retriever=spec.retriever,
                                assembler=spec.assembler, prompts=spec.prompts,
                                params=GenerationParams(max_tokens=spec.max_tokens),
                                long_text=source.long_read(index, spec.retriever), share_ledgers=self._share_ledgers)

        return self._memory.get_or_put(("context", source.content_hash, self._owner, spec.context_key), made)
