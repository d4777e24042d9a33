"""Self-Route (Li et al. 2024): RAG with the option to answer "unanswerable", then LC for the declined questions only;
or, with a learned router, LC for the questions it predicts LC answers better."""

from __future__ import annotations

from lcrag.core.errors import OptionError
from lcrag.core.registry import STRATEGIES, Option
from lcrag.strategies.base import Strategy
from lcrag.strategies.lc_and_rag import EVERY_SOURCE, RAG, LongContext, order_option
from lcrag.strategies.routing.cache_aware import CacheAware
from lcrag.strategies.declines import DECLINE
from lcrag.strategies.routing.conditional import Declined, Routed
from lcrag.strategies.routing.learned import Router, RouterCondition
from lcrag.strategies.routing.share_control import TOKENS, ShareTarget


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



@STRATEGIES.register("self-route", help="RAG that may decline; declined questions go to LC", reads=EVERY_SOURCE,
                     options=(order_option("score"),
                              Option("route_threshold", float, None, "go to LC when P(decline) >= this (None: the written "
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
def self_route(order: str = "score", route_threshold: float | None = None, router: Router | None = None,
               lc_share: float | None = None, lc_cost_share: float | None = None, declines_to_lc: bool = False,
               cache_aware: bool = False) -> Strategy:
    if declines_to_lc and router is None:
        raise OptionError("declines_to_lc needs a router (--router lara, or a file from `lcrag route fit`): without "
                          "one, Self-Route's own decline test decides every route")
    routed = SelfRoute(order=order, threshold=route_threshold, router=router, lc_share=lc_share, lc_cost_share=lc_cost_share,
                       declines_to_lc=declines_to_lc)
    return CacheAware(routed, routed.fallback) if cache_aware else routed
