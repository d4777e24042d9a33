"""A cascade beyond the papers (after FrugalGPT): RAG, then RAG over more chunks, then LC, each step taken only
when the one before declines. Built from the same parts as Self-Route (:class:`Routed`, :class:`Declined`), so the
gate is the written decline or, with ``route_threshold``, the reader's probability of declining."""

from __future__ import annotations

from lcrag.core.registry import STRATEGIES, Option
from lcrag.strategies.base import Strategy
from lcrag.strategies.declines import DECLINE
from lcrag.strategies.routing.conditional import Declined, Routed
from lcrag.strategies.lc_and_rag import EVERY_SOURCE, RAG, LongContext, order_option

# The widest second step: past a few times the chunks a wider RAG is LC by another name (and costs its tokens).
MAX_WIDEN = 64


@STRATEGIES.register(
    "cascade", help="RAG, then RAG over WIDEN times the chunks, then LC, each when the step before declines",
    reads=EVERY_SOURCE,
    options=(order_option("score"),
             Option("route_threshold", float, None, "take the next step when P(decline) >= this (None: the written answer "
                    "decides)", min=0.0, max=1.0),
             Option("widen", int, 3, "the second step reads this many times the chunks (or the budget)", min=2,
                    max=MAX_WIDEN)))
def cascade(order: str = "score", route_threshold: float | None = None, widen: int = 3) -> Strategy:
    def step(stage: str, times: int, route: str) -> RAG:
        return RAG(order, name="cascade", template="self_route", stage=stage, decline=DECLINE, widen=times, route=route)

    wider = Routed("cascade", step("route-wide", widen, "rag-wide"), Declined(route_threshold), LongContext())
    return Routed("cascade", step("route", 1, "rag"), Declined(route_threshold), wider)
