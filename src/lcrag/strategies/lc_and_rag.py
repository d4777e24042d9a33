"""The strategies that read once: closed-book, LC, RAG and OP-RAG, behind one ``run(ctx, question)`` (Self-Route and
the cascade compose them: :mod:`lcrag.strategies.routing`)."""

from __future__ import annotations

import hashlib
from dataclasses import replace

from lcrag.assembly.context import ORDERS
from lcrag.core.registry import STRATEGIES, Option
from lcrag.strategies.base import (
    QueryContext,
    Strategy,
    Timer,
    call_reader,
    read_completion,
    long_context,
    retrieve_context,
)
from lcrag.strategies.declines import decline_probability, is_unanswerable
from lcrag.core.types import CORPUS, DOCUMENT, Answer, LLMCall

EVERY_SOURCE = (DOCUMENT, CORPUS)  # a strategy that reads a document or a corpus index
# Candidates per position asked for when a decline is measured (OpenAI allows at most 20).
TOP_LOGPROBS = 20

__all__ = ["RAG", "ClosedBook", "LongContext", "is_unanswerable", "make_strategy"]


@STRATEGIES.register("closed-book", help="the question only (the reader's own knowledge)", needs="question",
                     reads=EVERY_SOURCE)
class ClosedBook(Strategy):
    """No context: what the reader knows on its own (the LC-vs-RAG study's question filter)."""

    name = "closed-book"

    def run(self, ctx: QueryContext, question: str) -> Answer:
        timer = Timer()
        text, call = call_reader(ctx, "answer", ctx.prompts.messages(ctx.prompts.closed_book, question), timer)
        return Answer(text, question, self.name, route="closed-book", calls=[call], timings=timer.timings)


def prefix_key(ctx: QueryContext, kept_tokens: int) -> str:
    """The LC prompt's document prefix named by what makes it: model, document, where it was cut, prompt (for
    readers that keep its KV state on disk)."""
    reader = getattr(ctx.reader, "identity", ctx.reader.model)
    prefix = f"{reader}\n{ctx.document.content_hash}\n{kept_tokens}\n{ctx.prompts.lc}"
    return hashlib.sha256(prefix.encode("utf-8")).hexdigest()[:32]


# Over a corpus index, LC reads the best units that fit (the pipeline's ``long_text``), RAG its units.
@STRATEGIES.register("lc", help="the whole document, cut in the middle when it exceeds the window", needs="document",
                     reads=EVERY_SOURCE)
class LongContext(Strategy):
    """The whole document in the prompt, cut in the middle by reader tokens when it exceeds the window."""

    name = "lc"
    route = "lc"

    def run(self, ctx: QueryContext, question: str) -> Answer:
        timer = Timer()
        messages, kept = long_context(ctx, question, ctx.prompts.lc, timer)
        ctx = replace(ctx, params=replace(ctx.params, prefix_key=prefix_key(ctx, kept.kept_tokens)))
        text, call = call_reader(ctx, "answer", messages, timer, route=self.route)
        ctx.remember_call("lc", call)
        return Answer(
            text, question, self.name, route="lc", calls=[call], timings=timer.timings, truncated_tokens=kept.cut_tokens,
            context=kept.text,
        )


class RAG(Strategy):
    """Retrieved chunks only. ``order`` overrides the assembler's: score (Self-Route's baseline) or document (OP-RAG).
    ``template`` names the prompt (a :class:`PromptSet` field) and ``stage`` the LLM call: Self-Route's first step is
    this strategy with its own prompt, called "route"."""

    def __init__(self, order: str | None = None, name: str = "rag", template: str = "rag", stage: str = "answer",
                 decline: str | None = None, widen: int = 1, route: str = "rag"):
        self.order = order
        self.name = name
        self.template = template
        self.stage = stage
        self.decline = decline  # a word the answer may start with to decline: its probability is measured
        self.widen = widen  # read this many times the configured k (or budget): a cascade's wider step
        self.route = route

    def assembler(self, ctx: QueryContext):
        a = replace(ctx.assembler, order=self.order) if self.order else ctx.assembler
        if self.widen > 1:
            a = replace(a, k=a.k * self.widen if a.k else a.k, budget=a.budget * self.widen if a.budget else a.budget)
        return a

    def run(self, ctx: QueryContext, question: str) -> Answer:
        timer = Timer()
        assembler = self.assembler(ctx)
        calls: list[LLMCall] = []
        context = retrieve_context(ctx, question, assembler, timer, calls)
        messages = ctx.prompts.messages(getattr(ctx.prompts, self.template), question, context.text)
        text, call, completion = read_completion(ctx, self.stage, messages, timer, TOP_LOGPROBS if self.decline else 0,
                                                route=self.route)
        declined = decline_probability(completion.logprobs, self.decline) if self.decline else None
        ctx.remember_call("rag", call)
        return Answer(text, question, self.name, route=self.route, calls=calls + [call], chunks=context.chunks,
                      timings=timer.timings, index_cost=context.index_cost, decline_probability=declined)


def order_option(default: str) -> Option:
    return Option("order", str, default, "chunks in score or document order", choices=ORDERS)


@STRATEGIES.register("rag", help="top-k chunks ordered by score", options=(order_option("score"),), reads=EVERY_SOURCE)
def rag(order: str = "score") -> Strategy:
    return RAG(order=order, name="rag")


@STRATEGIES.register("op-rag", help="top-k chunks kept in document order (OP-RAG)", options=(order_option("document"),),
                     chunking="tokens:128", reads=EVERY_SOURCE)  # the paper's chunking, when the user names none
def op_rag(order: str = "document") -> Strategy:
    return RAG(order=order, name="op-rag")


def make_strategy(name: str, order: str | None = None, **options: object) -> Strategy:
    """A strategy by name; ``order`` (score or document) overrides the retrieval strategies' default ordering, and
    other ``options`` (e.g. ``route_threshold``) are passed to the parts that declare them (others ignore them). Unknown
    names get the registered ones."""
    part = STRATEGIES.get(name)
    given = {key: value for key, value in {"order": order, **options}.items()
             if value is not None and part.option(key)}
    return part.create(**part.check_options(given))
