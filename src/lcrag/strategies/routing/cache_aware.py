"""Cache-aware routing (no anchor paper does this): once LC has read a document, the server holds its prompt prefix
(llama.cpp, vLLM with prefix caching, OpenAI's prompt caching), so a follow-up LC call processes and pays for little
more than the question. Then skipping the RAG step and answering with LC directly can cost less than RAG alone —
and LC reads the whole document."""

from __future__ import annotations

from dataclasses import replace

from lcrag.readers import streaming
from lcrag.strategies.base import QueryContext, Strategy
from lcrag.core.types import Answer, LLMCall

# Prompt tokens of an LC call that are not the document (the question and the chat template around it): what a
# follow-up LC call on a cached document still has to process.
QUESTION_ROOM = 128


def uncached_tokens(call: LLMCall) -> int:
    """What a call costs the server beyond its cache: prompt tokens not reused, plus generated tokens."""
    return call.prompt_tokens - call.cached_prompt_tokens + call.completion_tokens


def warm_lc_cheaper(ctx: QueryContext) -> bool:
    """Whether LC on this document, its prefix cached by the last LC call, costs less than the last RAG step."""
    lc, rag = ctx.last_call("lc"), ctx.last_call("rag")
    if lc is None or rag is None:
        return False
    warm = replace(lc, cached_prompt_tokens=max(lc.cached_prompt_tokens, lc.prompt_tokens - QUESTION_ROOM))
    return uncached_tokens(warm) <= uncached_tokens(rag)


class CacheAware(Strategy):
    """``routed`` (RAG first, LC when it says so), except that a document LC has already read goes straight to
    ``lc`` while :func:`warm_lc_cheaper` holds."""

    def __init__(self, routed: Strategy, lc: Strategy):
        self.routed, self.lc, self.name, self.route = routed, lc, routed.name, routed.route

    def run(self, ctx: QueryContext, question: str) -> Answer:
        if warm_lc_cheaper(ctx):
            streaming.emit("routed", fallback=False, route=self.lc.route, decline_probability=None, cache_aware=True)
            return replace(self.lc.run(ctx, question), strategy=self.name)
        return self.routed.run(ctx, question)
