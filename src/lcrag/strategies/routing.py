"""Routing by composition (after FlashRAG's ConditionalPipeline): run a first strategy, ask a condition about its
answer, and run a fallback strategy only when the condition says so.

Self-Route is ``Routed(RAG with the Self-Route prompt, Declined(), LongContext())``; a new condition (a router that
reads the question, a confidence threshold) is a new class with ``__call__(answer) -> bool`` plugged into the same
:class:`Routed`, without copying either strategy.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Protocol

from lcrag.strategies.base import QueryContext, Strategy
from lcrag.text import normalize_answer
from lcrag.types import Answer

log = logging.getLogger(__name__)


class Condition(Protocol):
    """Decides, from the first strategy's answer, whether the fallback strategy must answer instead."""

    def __call__(self, answer: Answer) -> bool: ...


def is_unanswerable(text: str) -> bool:
    """Self-Route's decline test: the answer normalises (LongBench ``normalize_answer``) to "unanswerable"."""
    return normalize_answer(text) == "unanswerable"


class Declined:
    """Self-Route's condition: fall back when the first answer is a decline ("unanswerable")."""

    def __call__(self, answer: Answer) -> bool:
        if is_unanswerable(answer.text):
            return True
        if "unanswerable" in normalize_answer(answer.text) or "cannot be answered" in answer.text.lower():
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
    made, keeps the first answer as ``raw_route_answer`` and the first strategy's chunks and index cost."""

    def __init__(self, name: str, first: Strategy, condition: Condition, fallback: Strategy):
        self.name = name
        self.first = first
        self.condition = condition
        self.fallback = fallback

    def run(self, ctx: QueryContext, question: str) -> Answer:
        first = self.first.run(ctx, question)
        if not self.condition(first):
            return replace(first, strategy=self.name, raw_route_answer=first.text)
        second = self.fallback.run(ctx, question)
        return replace(
            second, strategy=self.name, calls=first.calls + second.calls, chunks=first.chunks,
            timings=merge_timings(first.timings, second.timings), raw_route_answer=first.text,
            index_cost=first.index_cost if first.index_cost is not None else second.index_cost,
        )
