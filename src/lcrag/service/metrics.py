"""The service's Prometheus metrics: requests by route template and status, latency, reader tokens, cost, routes and
cancelled questions — in a registry of their own (one per app), so that two apps in one process never share counts."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from lcrag.types import Answer


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("lcrag_requests", "HTTP requests", ["path", "status"], registry=self.registry)
        self.latency = Histogram("lcrag_request_seconds", "Request latency", ["path"], registry=self.registry)
        self.tokens = Counter("lcrag_tokens", "Reader tokens", ["kind"], registry=self.registry)
        self.cost = Counter("lcrag_cost_usd", "Money spent on reader calls (when priced)", registry=self.registry)
        self.routes = Counter("lcrag_routes", "Answers by route", ["route"], registry=self.registry)
        self.cancelled = Counter("lcrag_cancelled", "Questions dropped from the queue: their client left",
                                 registry=self.registry)

    def answer(self, answer: Answer, cost: float | None) -> None:
        self.tokens.labels("prompt").inc(answer.prompt_tokens)
        self.tokens.labels("completion").inc(answer.completion_tokens)
        self.tokens.labels("cached_prompt").inc(sum(c.cached_prompt_tokens for c in answer.calls))
        self.routes.labels(answer.route).inc()
        if cost:
            self.cost.inc(cost)

    def watch(self, gate) -> None:
        """The HTTP server's connections (:class:`lcrag.service.server.Gate`): open now, and those refused, pushed
        out or timed out, by reason."""
        self.registry.register(_GateCollector(gate))


class _GateCollector:
    def __init__(self, gate) -> None:
        self.gate = gate

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        yield GaugeMetricFamily("lcrag_connections", "Open HTTP connections", value=len(self.gate.open))
        closed = CounterMetricFamily("lcrag_connections_closed", "HTTP connections refused, pushed out or timed out",
                                     labels=["reason"])
        for reason, n in sorted(self.gate.counts.items()):
            closed.add_metric([reason], n)
        yield closed
