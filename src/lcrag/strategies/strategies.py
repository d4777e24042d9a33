"""The strategies: closed-book, LC, RAG, OP-RAG and Self-Route, behind one ``run(ctx, question)``."""

from __future__ import annotations

import logging
from dataclasses import replace

from lcrag.errors import InputError
from lcrag.evaluation.metrics import normalize_answer
from lcrag.strategies.base import (
    QueryContext,
    Strategy,
    Timer,
    call_reader,
    long_context,
    retrieve_context,
)
from lcrag.types import Answer, LLMCall

log = logging.getLogger(__name__)


class ClosedBook(Strategy):
    """No context: what the reader knows on its own (the LC-vs-RAG study's question filter)."""

    name = "closed-book"

    def run(self, ctx: QueryContext, question: str) -> Answer:
        timer = Timer()
        text, call = call_reader(ctx, "answer", ctx.prompts.messages(ctx.prompts.closed_book, question), timer)
        return Answer(text, question, self.name, route="closed-book", calls=[call], timings=timer.timings)


class LongContext(Strategy):
    """The whole document in the prompt, cut in the middle by reader tokens when it exceeds the window."""

    name = "lc"

    def run(self, ctx: QueryContext, question: str) -> Answer:
        timer = Timer()
        messages, kept = long_context(ctx, question, ctx.prompts.lc, timer)
        text, call = call_reader(ctx, "answer", messages, timer)
        return Answer(
            text, question, self.name, route="lc", calls=[call], timings=timer.timings, truncated_tokens=kept.cut_tokens
        )


class RAG(Strategy):
    """Retrieved chunks only. ``order`` overrides the assembler's: score (Self-Route's baseline) or document (OP-RAG)."""

    def __init__(self, order: str | None = None, name: str = "rag"):
        self.order = order
        self.name = name

    def run(self, ctx: QueryContext, question: str) -> Answer:
        timer = Timer()
        assembler = replace(ctx.assembler, order=self.order) if self.order else ctx.assembler
        calls: list[LLMCall] = []
        context = retrieve_context(ctx, question, assembler, timer, calls)
        text, call = call_reader(ctx, "answer", ctx.prompts.messages(ctx.prompts.rag, question, context.text), timer)
        return Answer(text, question, self.name, route="rag", calls=calls + [call], chunks=context.chunks,
                      timings=timer.timings, index_cost=context.index_cost)


def is_unanswerable(text: str) -> bool:
    """Self-Route's decline test: the answer normalises (LongBench ``normalize_answer``) to "unanswerable"."""
    return normalize_answer(text) == "unanswerable"


class SelfRoute(Strategy):
    """Step 1: RAG with the option to answer "unanswerable"; step 2, only for declined questions: LC.

    ``order="document"`` gives Self-Route over order-preserving retrieval (OP-RAG's assembly).
    """

    name = "self-route"

    def __init__(self, order: str | None = None):
        self.order = order

    def run(self, ctx: QueryContext, question: str) -> Answer:
        timer = Timer()
        assembler = replace(ctx.assembler, order=self.order) if self.order else ctx.assembler
        calls: list[LLMCall] = []
        context = retrieve_context(ctx, question, assembler, timer, calls)
        route_text, route_call = call_reader(
            ctx, "route", ctx.prompts.messages(ctx.prompts.self_route, question, context.text), timer
        )
        if not is_unanswerable(route_text):
            if "unanswerable" in normalize_answer(route_text) or "cannot be answered" in route_text.lower():
                log.info("self-route kept a near-decline as the answer: %r", route_text)
            return Answer(
                route_text, question, self.name, route="rag", calls=calls + [route_call], chunks=context.chunks,
                timings=timer.timings, raw_route_answer=route_text, index_cost=context.index_cost,
            )
        messages, kept = long_context(ctx, question, ctx.prompts.lc, timer)
        text, lc_call = call_reader(ctx, "answer", messages, timer)
        return Answer(
            text, question, self.name, route="lc", calls=calls + [route_call, lc_call], chunks=context.chunks,
            timings=timer.timings, truncated_tokens=kept.cut_tokens, raw_route_answer=route_text,
            index_cost=context.index_cost,
        )


STRATEGY_NAMES = ("closed-book", "lc", "rag", "op-rag", "self-route")


def make_strategy(name: str, order: str | None = None) -> Strategy:
    """A strategy by name; ``order`` (score or document) overrides the retrieval strategies' default ordering."""
    if name == "closed-book":
        return ClosedBook()
    if name == "lc":
        return LongContext()
    if name == "rag":
        return RAG(order=order or "score", name="rag")
    if name == "op-rag":
        return RAG(order=order or "document", name="op-rag")
    if name == "self-route":
        return SelfRoute(order=order or "score")
    raise InputError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGY_NAMES)}")
