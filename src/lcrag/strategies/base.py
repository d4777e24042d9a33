"""What every strategy shares: the query context, timed LLM calls, retrieval and long-context prompting."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Hashable
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from lcrag.assembly import (
    AssembledContext,
    ContextAssembler,
    TruncatedText,
    truncate_middle,
)
from lcrag.core.errors import InputError
from lcrag.readers import streaming
from lcrag.readers.base import Completion, GenerationParams, Reader
from lcrag.readers.call_context import Asking
from lcrag.strategies.prompts import PromptSet
from lcrag.core.registry import RETRIEVERS, PartSpec
from lcrag.core.types import Answer, LLMCall, LongRead, QuestionSource, SourceIndex


@dataclass
class QueryContext:
    """Everything a strategy needs to answer questions over one document."""

    document: QuestionSource  # a document, a collection, or a corpus index (no text: read through ``index``)
    reader: Reader
    # Built on first use (LC and closed-book never need it): the source's index (a corpus index's: its units).
    index: Callable[[], SourceIndex]
    # The retriever, name and options, as every kind of source makes it (lcrag.pipeline.specs.RetrieverSpec).
    retriever: PartSpec = field(default_factory=lambda: RETRIEVERS.get("bm25").spec())
    assembler: ContextAssembler = field(default_factory=ContextAssembler)
    prompts: PromptSet = field(default_factory=PromptSet)
    params: GenerationParams = field(default_factory=GenerationParams)
    # What LC reads when it is not the source's text cut in the middle (a corpus's best units, a collection's best
    # files): the source's long_read; (question, tokenizer, limit) -> the text.
    long_text: LongRead | None = None
    # What retrieval searches for when it is not the question the reader is asked (a follow-up whose conversation
    # is written out for the reader: lcrag.strategies.conversation); None: the question.
    query: str | None = None
    # Values worked out once per context and shared by the questions answered with it, from any thread (the
    # document as LC sends it per tokenizer and limit; a router's document features): see :meth:`memo`.
    _memo: dict[Hashable, Any] = field(default_factory=dict, repr=False)
    # The last answering call of each route ("rag", "lc") on this document: what a cache-aware router compares.
    last_calls: dict[str, LLMCall] = field(default_factory=dict)
    # Where a learned router holding an LC share at run time keeps its state (the pipeline's cache); None: its own.
    share_ledgers: Any = None
    # The question being answered, its document and the strategy's route (set by Pipeline.ask): what each answering
    # call is for, given to the reader in its GenerationParams (read_completion). None: answering no question.
    asking: Asking | None = None
    # One lock for this context's shared state; a shallow copy (``replace``) shares it with its memo.
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    def memo(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """``make()``, kept under ``key``: made once however many threads ask at once (they wait for the first)."""
        with self._lock:
            if key in self._memo:
                return self._memo[key]
            value = self._memo[key] = make()
            return value

    def remember_call(self, route: str, call: LLMCall) -> None:
        with self._lock:
            self.last_calls[route] = call

    def last_call(self, route: str) -> LLMCall | None:
        with self._lock:
            return self.last_calls.get(route)

    def memo_bytes(self) -> int:
        """What the kept values weigh (texts and word sets), for a memory bound."""
        with self._lock:
            values = list(self._memo.values())
        return sum(sys.getsizeof(getattr(v, "text", v)) for v in values)


class Timer:
    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - started


def call_reader(ctx: QueryContext, stage: str, messages: list[dict[str, str]], timer: Timer,
                route: str | None = None) -> tuple[str, LLMCall]:
    """The reader's stripped answer and the call's accounting (the interface plugins use). ``route``: what the
    prompt holds, "lc" (the whole document) or "rag" (retrieved chunks); None: the running strategy's route
    (given to the reader with the question, see :mod:`lcrag.readers.call_context`)."""
    text, call, _ = read_completion(ctx, stage, messages, timer, route=route)
    return text, call


def read_completion(ctx: QueryContext, stage: str, messages: list[dict[str, str]], timer: Timer,
                    top_logprobs: int = 0, *, route: str | None = None) -> tuple[str, LLMCall, Completion]:
    """As :func:`call_reader`, plus the completion itself: its token probabilities when ``top_logprobs`` asks."""
    params = replace(ctx.params, top_logprobs=top_logprobs) if top_logprobs else ctx.params
    if ctx.asking is not None:
        params = replace(params, asking=ctx.asking.on_route(route))
    with timer.stage(f"llm:{stage}"), streaming.answering_call(stage) as live:
        completion = ctx.reader.complete(messages, params)
        if live is not None and not live.streamed:  # from the completion cache, or a reader that cannot stream
            live.token(completion.text)
    return completion.text.strip(), LLMCall.from_completion(stage, completion), completion


def retrieve_context(ctx: QueryContext, question: str, assembler: ContextAssembler, timer: Timer,
                     calls: list[LLMCall] | None = None) -> AssembledContext:
    """Retrieve and assemble; LLM calls the retriever makes per question (tree navigation) go to ``calls``. A prompt
    set with a ``chunk_format`` (LaRA's) writes the chunks its own way."""
    if ctx.prompts.chunk_format:
        assembler = replace(assembler, chunk_format=ctx.prompts.chunk_format)
    streaming.check_cancelled()  # each step starts only for a question still asked
    with timer.stage("index"):  # a summary retriever is built here, on first use
        index = ctx.index()
        index.retriever(ctx.retriever)
    depth = None if assembler.budget is not None else assembler.k
    streaming.check_cancelled()
    with timer.stage("retrieval"):
        found = index.search(ctx.retriever, ctx.query or question, depth)
    if calls is not None:
        calls.extend(found.calls)
    streaming.check_cancelled()
    with timer.stage("assembly"):
        context = assembler.run(found.chunks, ctx.document.text,
                                lambda chunks: index.chunk_tokens(chunks, ctx.reader.tokenizer))
    known = all(c.tokens is not None for c in context.chunks)  # top-k selection does not count them
    streaming.emit("retrieved", tokens=context.chunk_tokens if known else None, chunks=context.chunks)
    if found.build is not None:
        context.index_cost = found.build | {"document": ctx.document.content_hash}
    return context


def lc_document_limit(window: int, max_tokens: int, overhead: int) -> int:
    """Reader tokens left for the document in an LC prompt, rounded down to a step of up to 256 tokens.

    Rounding makes questions of slightly different lengths cut the document at the same place, so their prompts
    share the whole document as a prefix and the server reuses its KV cache (measured with SmolLM2 on a
    36K-token text: 48 s without rounding, ~2 s with it, for a second question); it costs at most 1/16 of the room.
    """
    limit = window - max_tokens - overhead
    if limit <= 0:
        raise InputError(f"the prompt alone fills the reader's {window}-token window")
    step = min(256, 1 << (max(1, limit // 16).bit_length() - 1))  # a power of two, about 1/16 of the room
    return limit - limit % step


def long_context(ctx: QueryContext, question: str, template: str, timer: Timer) -> tuple[list[dict[str, str]], TruncatedText]:
    """The LC prompt for ``question``: the document cut in the middle (by reader tokens) if it exceeds the window,
    or, for a source that is not one text (a corpus index), what its ``long_text`` reads for the question."""
    streaming.check_cancelled()
    with timer.stage("truncation"):
        overhead = ctx.reader.count_prompt_tokens(ctx.prompts.messages(template, question, context=""))
        limit = lc_document_limit(ctx.reader.context_window, ctx.params.max_tokens, overhead)
        tokenizer = ctx.reader.tokenizer
        if ctx.long_text is not None:
            return _fitted(ctx, question, template, lambda n: ctx.long_text(ctx.query or question, tokenizer, n), limit, True)
        # Kept per limit: a long text is tokenized once for all questions.
        kept = ctx.memo(("lc", ctx.document.content_hash, tokenizer.name, limit), lambda: _fitted(
            ctx, question, template, lambda n: truncate_middle(ctx.document.text, tokenizer, n), limit, False)[1])
    return ctx.prompts.messages(template, question, context=kept.text), kept


def _fitted(ctx: QueryContext, question: str, template: str, cut: Callable[[int], TruncatedText], limit: int,
            always_check: bool) -> tuple[list[dict[str, str]], TruncatedText]:
    """``cut(limit)``, shrunk until the whole prompt fits the window. Decoding two halves and re-tokenising can merge
    differently at the seam (measured: +1 token with SmolLM2), and joined pieces may count differently from their
    parts; shrinking here means the server never has to cut the prompt again."""
    kept = cut(limit)
    allowed = ctx.reader.context_window - ctx.params.max_tokens
    for _ in range(4):
        if not kept.cut_tokens and not always_check:
            break
        excess = ctx.reader.count_prompt_tokens(ctx.prompts.messages(template, question, kept.text)) - allowed
        if excess <= 0:
            break
        kept = cut(kept.kept_tokens - excess)
    return ctx.prompts.messages(template, question, context=kept.text), kept


class Strategy:
    """Answers one question over one document."""

    name: str = ""
    route: str = ""  # the route its answers take ("lc", "rag", ...; a routed strategy: its first step's)

    def run(self, ctx: QueryContext, question: str) -> Answer:
        raise NotImplementedError
