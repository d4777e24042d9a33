"""The service's Prometheus metrics: requests by route template and status, latency, reader tokens, cost, routes and
cancelled questions — in a registry of their own (one per app), so that two apps in one process never share counts."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from lcrag.readers.openai_compat import cached_share
from lcrag.core.types import Answer


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("lcrag_requests", "HTTP requests", ["path", "status"], registry=self.registry)
        self.latency = Histogram("lcrag_request_seconds", "Request latency", ["path"], registry=self.registry)
        self.tokens = Counter("lcrag_tokens", "Reader tokens", ["kind"], registry=self.registry)
        self.cost = Counter("lcrag_cost_usd", "Money spent on reader calls (when priced)", registry=self.registry)
        self.routes = Counter("lcrag_routes", "Answers by route", ["route"], registry=self.registry)
        self.route_tokens = Counter("lcrag_call_prompt_tokens", "Prompt tokens by call: an answering call by its "
                                    "answer's route (lc, rag, ...), another by its stage (route: Self-Route's RAG "
                                    "step); LC's share of tokens is call=lc over all", ["call"], registry=self.registry)
        self.realized = Gauge("lcrag_router_realized_lc_share", "A learned router's realized LC share over its recent "
                              "questions, of the questions (by=questions) or of the prompt tokens (by=tokens)",
                              ["by"], registry=self.registry)
        self.cancelled = Counter("lcrag_cancelled", "Questions dropped from the queue: their client left",
                                 registry=self.registry)

    def answer(self, answer: Answer, cost: float | None) -> None:
        self.tokens.labels("prompt").inc(answer.prompt_tokens)
        self.tokens.labels("completion").inc(answer.completion_tokens)
        self.tokens.labels("cached_prompt").inc(sum(c.cached_prompt_tokens for c in answer.calls))
        self.routes.labels(answer.route).inc()
        for call in answer.calls:
            self.route_tokens.labels(answer.route if call.stage == "answer" else call.stage).inc(call.prompt_tokens)
        if answer.routing:
            self.realized.labels("questions").set(answer.routing["realized_lc_share"])
            self.realized.labels("tokens").set(answer.routing["realized_lc_cost_share"])
        if cost:
            self.cost.inc(cost)

    def watch(self, gate) -> None:
        """The HTTP server's connections (:class:`lcrag.service.http.server.Gate`): open now, and those refused, pushed
        out or timed out, by reason."""
        self.registry.register(_GateCollector(gate))

    def watch_readers(self, servers: Callable[[], list[dict]]) -> None:
        """The reader's servers (``servers()``: :func:`lcrag.readers.server_stats`' dicts): per server, its
        completions, prompt tokens and cached prompt tokens as it reported them, their share, and for a pool of
        servers whether each is up, its calls in progress and its failures; the cached share of all of them."""
        self.registry.register(_ReaderCollector(servers))


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


# A reader server's counts: (metric, help, kind), each a field of lcrag.readers.server_stats' dicts.
_SERVER_COUNTS = (
    ("completions", "Completions a reader server answered", "counter"),
    ("prompt_tokens", "Prompt tokens a reader server reported", "counter"),
    ("cached_prompt_tokens", "Prompt tokens a reader server reported its prefix cache held", "counter"),
    ("failures", "Calls a reader server of a pool failed (the pool retried them on another)", "counter"),
    ("outstanding", "Calls in progress on a reader server of a pool", "gauge"),
    ("up", "1 while a reader server of a pool is in use, 0 while it is skipped after failing", "gauge"),
)


class _ReaderCollector:
    """``lcrag_reader_*{server=URL}`` from the reader's own counts at each scrape, and
    ``lcrag_reader_cached_token_share``: per server, and over all of them as ``server="all"``."""

    def __init__(self, servers: Callable[[], list[dict]]) -> None:
        self.servers = servers

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        servers = self.servers()
        for field, help_text, kind in _SERVER_COUNTS:
            family = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(
                f"lcrag_reader_{field}", help_text, labels=["server"])
            for server in servers:
                if field in server:
                    family.add_metric([server["server"]], float(server[field]))
            yield family
        share = GaugeMetricFamily("lcrag_reader_cached_token_share", "Share of the prompt tokens a reader server "
                                  "reported its prefix cache held (server=\"all\": of every server)", labels=["server"])
        total = {"prompt_tokens": sum(s["prompt_tokens"] for s in servers),
                 "cached_prompt_tokens": sum(s["cached_prompt_tokens"] for s in servers)}
        for name, counts in [*((s["server"], s) for s in servers), ("all", total)]:
            value = cached_share(counts)
            if value is not None:
                share.add_metric([name], value)
        yield share
