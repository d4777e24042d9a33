"""What the service lets one client ask of it, and whom it answers: each value is a flag of ``lcrag serve`` and
``lcrag mcp`` with a sane default, and a request beyond one is refused with a JSON 4xx that names the limit and its
flag."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from lcrag.core.errors import InputError

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
# The largest answer the answer cache keeps, as written (--max-kept-answer-kb): a short text and its sources, with
# room for a long one; a store keeps --kept-answers of them per collection version.
MAX_KEPT_ANSWER_BYTES = 64 << 10
# How long a shutdown (SIGTERM) lets the requests in progress finish before it stops the questions still running
# (--shutdown-seconds; lcrag.service.http.server), and its most: an hour, past which a stop is a hang to whoever stops it.
SHUTDOWN_SECONDS = 10.0
MAX_SHUTDOWN_SECONDS = 3600.0


class OverLimit(InputError):
    """A request over one of the operator's limits (HTTP 400; 413 for sizes)."""


@dataclass(frozen=True)
class Limits:
    # Sizes: an upload is a document (a book PDF is tens of MB); a JSON body is a question and its options.
    max_upload_bytes: int = 512 << 20
    max_body_bytes: int = 1 << 20
    # An MCP resource (a file's extracted text) is answered whole, in one message: a book is ~1 MB of text.
    max_resource_bytes: int = 8 << 20
    # Cost: a question is a sentence or a paragraph, not a document; an answer is short (a cap holds the reader,
    # which serves one question at a time, for at most so many tokens).
    max_question_chars: int = 16_000
    max_tokens: int = 4096
    strategies: tuple[str, ...] | None = None  # those a client may choose; None: every registered strategy
    # The retrievers a client may choose; None: every registered one. lcrag serve's default leaves out those that
    # call the reader to build their summaries (tree, raptor: minutes of generation on a book).
    retrievers: tuple[str, ...] | None = None
    # Whom: the Host names answered (DNS rebinding: a page on attacker.example resolving to 127.0.0.1 sends
    # Host: attacker.example); "*" answers any. Origins allowed to write cross-site (CORS), none by default.
    allowed_hosts: tuple[str, ...] = LOOPBACK_NAMES
    cors_origins: tuple[str, ...] = field(default=())

    def check(self, question: str, options: dict[str, Any]) -> None:
        """Refuse a question over the limits before any work is done for it."""
        if len(question) > self.max_question_chars:
            raise OverLimit(f"the question is {len(question):,} characters; this server takes at most "
                            f"{self.max_question_chars:,} (its --max-question-chars flag)")
        if options.get("max_tokens", 0) > self.max_tokens:
            raise OverLimit(f"max_tokens {options['max_tokens']:,} is over this server's {self.max_tokens:,} "
                            "(its --max-tokens flag)")
        strategy = options.get("strategy")
        if strategy is not None and self.strategies is not None and strategy not in self.strategies:
            raise OverLimit(f"strategy {strategy[:40]!r} is not offered here; allowed: {', '.join(self.strategies)} "
                            "(its --strategies flag)")
        retriever = options.get("retriever")
        if retriever is not None and self.retrievers is not None and retriever not in self.retrievers:
            raise OverLimit(f"retriever {retriever[:40]!r} is not offered here; allowed: {', '.join(self.retrievers)} "
                            "(its --retrievers flag)")

    def host_allowed(self, host_header: str) -> bool:
        """Whether a request's Host header (``name[:port]``, ``[v6]:port``) names this server."""
        if "*" in self.allowed_hosts:
            return True
        name = host_header.rsplit("]", 1)[0].lstrip("[") if host_header.startswith("[") else \
            host_header.rsplit(":", 1)[0]
        return name.lower() in {h.lower() for h in self.allowed_hosts}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def hosts_for(bind: str, extra: list[str]) -> tuple[str, ...]:
    """The Host names a server bound to ``bind`` answers: loopback names for a loopback bind, the bound address,
    and the operator's ``--allowed-host`` names; any name for a wildcard bind with none given (the key guards it)."""
    if bind in ("0.0.0.0", "::", "") and not extra:
        return ("*",)
    base = LOOPBACK_NAMES if is_loopback(bind) else ()
    return tuple(dict.fromkeys((*base, bind, *extra)))
