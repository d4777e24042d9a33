"""MCP sessions over streamable HTTP cost their holders: capped per client address and in all, and a session whose
client never came back after ``initialize`` ends after a short timeout.

The SDK (1.x and 2.x) keeps a session for every ``initialize`` until an idle timeout (30 minutes by default) or its
cap (10,000), whoever asked: one client can fill the cap with sessions it never uses (~60 KB each), and every new
client is then refused for half an hour. :class:`Sessions` stands in front of the SDK's app and keeps its own book
of the sessions, by the ``Mcp-Session-Id`` the SDK answers an ``initialize`` with:

- a session is **complete** once its client sends anything with its id (the ``notifications/initialized`` that
  follows ``initialize``, then its calls); one that is not within ``init_timeout`` seconds is ended;
- a complete session with no request for ``idle_timeout`` seconds is ended (a stream open on it is a request);
- a client address may hold ``max_client_sessions``, the server ``max_sessions``: a new session over either ends
  the oldest incomplete one (the client's own, for the per-client cap), and is refused (429 for the client's cap,
  503 for the server's, JSON-RPC errors naming the flag) only when all are complete.

A session is ended the way a client ends it, with a DELETE carrying its id, so the SDK tears it down as it does
for a client (whichever major). The SDK's own idle timeout and cap stay, set behind these, as a backstop."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

SESSION_HEADER = b"mcp-session-id"
SWEEP_EVERY = 1.0  # seconds between two looks for sessions past a timeout
REPORT_EVERY = 60.0


@dataclass(frozen=True)
class SessionLimits:
    """Each a flag of ``lcrag mcp`` (README: MCP)."""

    max_sessions: int = 1000
    max_client_sessions: int = 32
    init_timeout: float = 10.0
    idle_timeout: float = 600.0

    def __post_init__(self) -> None:
        for name in ("max_sessions", "max_client_sessions", "init_timeout", "idle_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


@dataclass
class _Session:
    client: str
    scope: dict  # the opening request's, to end the session with a request of the same app
    complete: bool = False
    active: int = 0  # requests in progress (an open stream included)
    last: float = 0.0  # when the last request ended (or the session began)


class Sessions:
    """Pure ASGI middleware in front of the SDK's streamable HTTP app (see the module's doc)."""

    def __init__(self, app, limits: SessionLimits | None = None, command: str = "lcrag mcp"):
        self.app, self.limits, self.command = app, limits or SessionLimits(), command
        # The live sessions, oldest first (a dict keeps insertion order). Not a cache: bounded by --max-sessions at
        # admission, and one goes only by being ended (the SDK told), never dropped silently as an LRU would.
        self.sessions: dict[str, _Session] = {}
        self.ended: dict[str, int] = {}  # sessions ended or refused here, by reason
        self._sweeper: asyncio.Task | None = None
        self._reported, self._since = time.monotonic(), 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        session_id = _header(scope, SESSION_HEADER)
        if session_id is None:
            return await self._opening(scope, receive, send)
        session = self.sessions.get(session_id)
        if session is None:
            return await self.app(scope, receive, send)
        session.complete = True
        session.active += 1
        status = {}

        async def sending(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            session.active -= 1
            session.last = time.monotonic()
            ended = status.get("code") == 404 or (scope["method"] == "DELETE" and status.get("code", 500) < 300)
            if ended and self.sessions.get(session_id) is session:
                del self.sessions[session_id]  # the client ended it, or the SDK no longer knows it

    async def _opening(self, scope, receive, send):
        """A request without a session id: an ``initialize`` the SDK may answer with a new session."""
        if scope["method"] != "POST":
            return await self.app(scope, receive, send)
        client = scope["client"][0] if scope.get("client") else "unknown"
        mine = [sid for sid, s in self.sessions.items() if s.client == client]
        if len(mine) >= self.limits.max_client_sessions:
            victim = next((sid for sid in mine if not self.sessions[sid].complete), None)
            if victim is None:
                return await self._refuse(send, 429, f"this address holds {len(mine)} sessions, its most "
                                                     f"({self.command} --max-client-sessions); end one (DELETE)")
            await self._end(victim, "client_cap")
        if len(self.sessions) >= self.limits.max_sessions:
            victim = next((sid for sid, s in self.sessions.items() if not s.complete), None)
            if victim is None:
                return await self._refuse(send, 503, f"the server holds {len(self.sessions)} sessions, its most "
                                                     f"({self.command} --max-sessions)")
            await self._end(victim, "server_cap")
        opened: list[_Session] = []

        async def sending(message):
            if message["type"] == "http.response.start" and message["status"] < 300:
                session_id = _header({"headers": message.get("headers", [])}, SESSION_HEADER)
                if session_id is not None and session_id not in self.sessions:
                    template = {k: v for k, v in scope.items() if k not in ("headers", "method")}
                    opened.append(_Session(client, template, active=1))
                    self.sessions[session_id] = opened[0]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            for session in opened:
                session.active -= 1
                session.last = time.monotonic()

    async def _refuse(self, send, status: int, message: str) -> None:
        self._count(f"refused ({status})")
        body = json.dumps({"jsonrpc": "2.0", "id": "server-error",
                           "error": {"code": -32000, "message": f"too many sessions: {message}"}}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if status == 429:
            headers.append((b"retry-after", b"10"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _end(self, session_id: str, reason: str) -> None:
        """End a session as its client would: a DELETE with its id, through the SDK's own app."""
        session = self.sessions.pop(session_id, None)
        if session is None:
            return
        self._count(reason)
        scope = session.scope | {"method": "DELETE", "headers": [(SESSION_HEADER, session_id.encode()),
                                                                  (b"host", b"localhost")]}
        sent = []

        async def receive():
            if not sent:
                sent.append(True)
                return {"type": "http.request", "body": b"", "more_body": False}
            await asyncio.sleep(30)  # not asked for by the SDK: its answer to a DELETE reads nothing more
            return {"type": "http.disconnect"}

        async def discard(message):
            pass

        try:
            await self.app(scope, receive, discard)
        except Exception:  # noqa: BLE001 - a session that could not be ended here ends by the SDK's own timeout
            log.warning("MCP session %s could not be ended", session_id[:12], exc_info=True)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_EVERY)
            now = time.monotonic()
            due = [(sid, "init_timeout" if not s.complete else "idle_timeout") for sid, s in self.sessions.items()
                   if s.active == 0 and now - s.last > (self.limits.idle_timeout if s.complete
                                                        else self.limits.init_timeout)]
            for session_id, reason in due:
                await self._end(session_id, reason)

    def _count(self, reason: str) -> None:
        self.ended[reason] = self.ended.get(reason, 0) + 1
        self._since += 1
        now = time.monotonic()
        if now - self._reported >= REPORT_EVERY:
            log.warning("MCP sessions ended or refused in the last %.0f s: %d (in all: %s); %d open",
                        now - self._reported, self._since,
                        ", ".join(f"{n:,} {r.replace('_', ' ')}" for r, n in sorted(self.ended.items())),
                        len(self.sessions))
            self._reported, self._since = now, 0


def _header(scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return value.decode("latin-1")
    return None
