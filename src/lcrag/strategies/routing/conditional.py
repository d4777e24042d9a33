"""Routing by composition (after FlashRAG's ConditionalPipeline): run a first strategy, ask a condition about its
answer, and run a fallback strategy only when the condition says so.

Self-Route is ``Routed(RAG with the Self-Route prompt, Declined(), LongContext())``; a new condition (a router that
reads the question, a confidence threshold) is a new class with ``__call__(answer) -> bool`` plugged into the same
:class:`Routed`, without copying either strategy.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import replace
from typing import Protocol

from lcrag.readers import streaming
from lcrag.strategies.base import QueryContext, Strategy
from lcrag.core.types import Answer
from lcrag.core.text import normalize_answer
from lcrag.strategies.declines import DECLINE, is_unanswerable

log = logging.getLogger(__name__)


class Condition(Protocol):
    """Decides, from the first strategy's answer (and the query context: the document, the reader), whether the
    fallback strategy must answer instead. ``__call__(answer)`` alone is enough for a condition that needs no more."""

    def __call__(self, answer: Answer, ctx: QueryContext | None = None) -> bool: ...  # or a truthy decision


class Declined:
    """Self-Route's condition: fall back when the first answer is a decline ("unanswerable").

    ``threshold=None``: the written answer decides (the paper's rule). With a threshold T in [0, 1]: fall back when
    the reader's probability of starting with the decline is >= T (T=0: every question; T=1: only certain
    declines), which works with readers that rarely write the decline; a reader that returns no token
    probabilities falls back to the written answer, said once.
    """

    def __init__(self, threshold: float | None = None):
        self.threshold = threshold
        self._said = False

    def __call__(self, answer: Answer, ctx: QueryContext | None = None) -> bool:
        if self.threshold is not None and answer.decline_probability is not None:
            return answer.decline_probability >= self.threshold
        if self.threshold is not None and not self._said:
            self._said = True
            log.warning("the reader returned no token probabilities: --route-threshold falls back to the written "
                        "answer (\"unanswerable\" or not)")
        if is_unanswerable(answer.text):
            return True
        if DECLINE in normalize_answer(answer.text) or "cannot be answered" in answer.text.lower():
            log.info("self-route kept a near-decline as the answer: %r", answer.text)
        return False


def merge_timings(first: dict[str, float], second: dict[str, float]) -> dict[str, float]:
    """Both strategies' stage timings, in order, a stage both ran counted once with both times."""
    merged = dict(first)
    for stage, seconds in second.items():
        merged[stage] = merged.get(stage, 0.0) + seconds
    return merged


class Routed(Strategy):
    """``first``; when ``condition(first's answer)`` holds, ``fallback`` too. The answer is billed for every call
    made, keeps the first answer as ``raw_route_answer`` and the first strategy's chunks, index cost and decline
    probability."""

    def __init__(self, name: str, first: Strategy, condition: Condition, fallback: Strategy):
        self.name = name
        self.first = first
        self.condition = condition
        self.fallback = fallback
        # A condition may read only the answer (``__call__(answer)``), or the query context too.
        self._condition_reads_ctx = len(inspect.signature(condition).parameters) >= 2

    @property
    def route(self) -> str:
        return self.first.route

    def run(self, ctx: QueryContext, question: str) -> Answer:
        with streaming.provisional():  # the fallback may answer instead
            first = self.first.run(ctx, question)
        streaming.check_cancelled()  # a router's features read the whole document: only for a question still asked
        decided = self.condition(first, ctx) if self._condition_reads_ctx else self.condition(first)
        fall_back = bool(decided)
        routing = decided.to_dict() if hasattr(decided, "to_dict") else None  # a decision that explains itself
        streaming.emit("routed", fallback=fall_back, route=self.fallback.route if fall_back else first.route,
                       decline_probability=first.decline_probability, **({"routing": routing} if routing else {}))
        if not fall_back:
            return replace(first, strategy=self.name, raw_route_answer=first.text, routing=routing)
        streaming.check_cancelled()  # the second step: Self-Route's LC, a cascade's wider RAG or LC
        second = self.fallback.run(ctx, question)
        return replace(
            second, strategy=self.name, calls=first.calls + second.calls, chunks=first.chunks,
            answer_chunks=second.answer_chunks if second.answer_chunks is not None else second.chunks,
            timings=merge_timings(first.timings, second.timings), raw_route_answer=first.text,
            index_cost=first.index_cost if first.index_cost is not None else second.index_cost,
            decline_probability=first.decline_probability, routing=routing,
        )
