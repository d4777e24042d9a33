"""The strategies: closed-book, LC, RAG, OP-RAG and Self-Route, behind one ``run(ctx, question)``."""

from __future__ import annotations

import hashlib
from dataclasses import replace

from lcrag.assembly.context import ORDERS
from lcrag.errors import OptionError
from lcrag.registry import STRATEGIES, Option
from lcrag.strategies.base import (
    QueryContext,
    Strategy,
    Timer,
    call_reader,
    read_completion,
    long_context,
    retrieve_context,
)
from lcrag.strategies.cache_aware import CacheAware
from lcrag.strategies.learned_router import Router, RouterCondition
from lcrag.strategies.routing import DECLINE, Declined, Routed, decline_probability, is_unanswerable
from lcrag.strategies.share_control import TOKENS, ShareTarget
from lcrag.types import CORPUS, DOCUMENT, Answer, LLMCall

EVERY_SOURCE = (DOCUMENT, CORPUS)  # a strategy that reads a document or a corpus index
# Candidates per position asked for when a decline is measured (OpenAI allows at most 20).
TOP_LOGPROBS = 20

__all__ = ["RAG", "ClosedBook", "LongContext", "SelfRoute", "is_unanswerable", "make_strategy"]


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


class SelfRoute(Routed):
    """Step 1: RAG with the option to answer "unanswerable"; step 2, only for declined questions: LC.

    ``order="document"`` gives Self-Route over order-preserving retrieval (OP-RAG's assembly).
    """

    def __init__(self, order: str | None = None, threshold: float | None = None, router: Router | None = None,
                 lc_share: float | None = None, lc_cost_share: float | None = None, declines_to_lc: bool = False):
        self.order = order
        target = (ShareTarget(lc_share) if lc_share is not None
                  else ShareTarget(lc_cost_share, TOKENS) if lc_cost_share is not None else None)
        condition = (Declined(threshold) if router is None
                     else RouterCondition(router, threshold, target, declines_to_lc=declines_to_lc))
        super().__init__("self-route", RAG(order, name="self-route", template="self_route", stage="route",
                                           decline=DECLINE), condition, LongContext())


def order_option(default: str) -> Option:
    return Option("order", str, default, "chunks in score or document order", choices=ORDERS)


@STRATEGIES.register("rag", help="top-k chunks ordered by score", options=(order_option("score"),), reads=EVERY_SOURCE)
def rag(order: str = "score") -> Strategy:
    return RAG(order=order, name="rag")


@STRATEGIES.register("op-rag", help="top-k chunks kept in document order (OP-RAG)", options=(order_option("document"),),
                     chunking="tokens:128", reads=EVERY_SOURCE)  # the paper's chunking, when the user names none
def op_rag(order: str = "document") -> Strategy:
    return RAG(order=order, name="op-rag")


@STRATEGIES.register("self-route", help="RAG that may decline; declined questions go to LC", reads=EVERY_SOURCE,
                     options=(order_option("score"),
                              Option("threshold", float, None, "go to LC when P(decline) >= this (None: the written "
                                     "answer decides); with a router, when P(LC better) >= this", min=0.0, max=1.0),
                              Option("router", object, None, "a learned router (lcrag route fit) instead of the decline"),
                              Option("lc_share", float, None, "with a router: hold this share of the questions "
                                     "answered going to LC, per reader, at run time", min=0.0, max=1.0),
                              Option("lc_cost_share", float, None, "with a router: hold LC's share of the prompt "
                                     "tokens at this, per reader, at run time", min=0.0, max=1.0),
                              Option("declines_to_lc", bool, False, "with a router: a RAG answer that declines goes to "
                                     "LC whatever its score (counted in a held share)"),
                              Option("cache_aware", bool, False, "once LC has read a document, go straight to LC while "
                                     "its cached prefix makes that cheaper than the RAG step")))
def self_route(order: str = "score", threshold: float | None = None, router: Router | None = None,
               lc_share: float | None = None, lc_cost_share: float | None = None, declines_to_lc: bool = False,
               cache_aware: bool = False) -> Strategy:
    if declines_to_lc and router is None:
        raise OptionError("declines_to_lc needs a router (--router lara, or a file from `lcrag route fit`): without "
                          "one, Self-Route's own decline test decides every route")
    routed = SelfRoute(order=order, threshold=threshold, router=router, lc_share=lc_share, lc_cost_share=lc_cost_share,
                       declines_to_lc=declines_to_lc)
    return CacheAware(routed, routed.fallback) if cache_aware else routed


def make_strategy(name: str, order: str | None = None, **options: object) -> Strategy:
    """A strategy by name; ``order`` (score or document) overrides the retrieval strategies' default ordering, and
    other ``options`` (e.g. ``threshold``) are passed to the parts that declare them (others ignore them). Unknown
    names get the registered ones."""
    part = STRATEGIES.get(name)
    given = {key: value for key, value in {"order": order, **options}.items()
             if value is not None and part.option(key)}
    return part.create(**part.check_options(given))
