"""/metrics: a learned router's realized LC share, and prompt tokens by call (LC's share of tokens)."""

from __future__ import annotations

from prometheus_client import generate_latest

from lcrag.service.metrics import Metrics
from lcrag.core.types import Answer, LLMCall


def test_a_routers_realized_shares_and_lc_tokens_are_exported():
    metrics = Metrics()
    routing = {"score": 0.4, "threshold": 0.2, "lc_share": 0.3, "realized_lc_share": 0.31,
               "realized_lc_cost_share": 0.8, "questions": 12}
    to_lc = Answer("x", "q", "self-route", route="lc", routing=routing,
                   calls=[LLMCall("m", 300, 5, stage="route"), LLMCall("m", 5000, 5, stage="answer")])
    stayed = Answer("y", "q", "self-route", route="rag", calls=[LLMCall("m", 280, 5, stage="route")])
    metrics.answer(to_lc, None)
    metrics.answer(stayed, None)
    text = generate_latest(metrics.registry).decode()
    assert 'lcrag_router_realized_lc_share{by="questions"} 0.31' in text
    assert 'lcrag_router_realized_lc_share{by="tokens"} 0.8' in text
    # LC's share of prompt tokens is call="lc" over all: 5000 of 5580
    assert 'lcrag_call_prompt_tokens_total{call="lc"} 5000.0' in text
    assert 'lcrag_call_prompt_tokens_total{call="route"} 580.0' in text
