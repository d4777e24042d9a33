"""The HTTP server under `lcrag serve` and `lcrag mcp --transport http`: uvicorn, with what it has no option for.

uvicorn's options are used where they exist: ``timeout_keep_alive`` (an idle connection between requests is closed),
``h11_max_incomplete_event_size`` (the request line and headers are bounded in size), ``timeout_graceful_shutdown``.
What uvicorn lacks is added by a small subclass of its h11 protocol (:class:`GuardedProtocol`) and a connection
:class:`Gate` it reports to:

- a **header read timeout**: a connection must deliver its request line and headers within ``header_timeout``
  seconds of connecting (or of its previous response), however it trickles them (slowloris): else 408 and closed;
- a **body read timeout**: a request body must arrive within ``body_timeout`` seconds plus one second per
  ``body_min_rate`` bytes received (Apache's mod_reqtimeout rule: a slow but steady upload goes on, a trickle is cut
  off); time the server itself holds the body back (flow control) is not counted;
- a **connection cap** and a **per-client cap** (by peer address): a connection over either pushes out another
  (of that client, for the per-client cap) that is waiting for its request headers — first the longest-stalled of
  those that sent part of their headers and stopped, else the longest idle of those idle for over 0.25 s — so
  that a connection that only holds a socket open costs its holder the socket, never a client that asks something
  (whose headers come at once); the new connection is refused with 503 when no other can go;
- uvicorn's plain-text 400 for a malformed request is JSON like every other error;
- connections are accepted :data:`ACCEPT_BATCH` at a time in each turn of the event loop (:class:`GuardedLoop`;
  asyncio's loop accepts as many as the listen backlog, each a task, before anything else runs); one the caps have
  no room for is answered its 503 before a protocol and a transport are made for it, and one that could only come
  in by pushing out another waits in a :class:`Lobby`, a bare socket, until its request headers are in, so that a
  flood of connections that never finish their headers costs a ``recv`` and a ``close`` each.

``uvicorn.Config(limit_concurrency=...)`` is not used: it accepts every connection and answers 503 (in plain text)
only once a request has arrived, so idle and trickling connections still hold their sockets.

At start the process's soft limit on open files is raised to its hard limit, the caps are fitted under it, and
``accept()`` failures for want of descriptors (EMFILE, which asyncio logs with a traceback per attempt) are logged
once a minute with a count, as are the connections refused, pushed out and timed out (also in ``/metrics``).

On SIGTERM (or Ctrl-C) uvicorn stops accepting connections and drains the requests in progress; after
``shutdown_seconds`` (``--shutdown-seconds``) the questions still running are told to stop (``stop_work``: each
stops at its next step boundary and answers 503), and uvicorn's ``timeout_graceful_shutdown``, a little later,
cancels whatever request is left. Then ``close`` closes the answering engine (its pools, the parse sandbox's
processes, the store), and only then does the process end by the signal."""

from __future__ import annotations

import asyncio
import asyncio.selector_events as selector_events
import ctypes
import ctypes.util
import errno
import gc
import json
import logging
import signal
import socket
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from lcrag.service.limits import MAX_SHUTDOWN_SECONDS, SHUTDOWN_SECONDS

log = logging.getLogger("lcrag.service.http.server")

REPORT_EVERY = 60.0  # seconds between two summary lines of refused or timed-out connections
RESERVED_FILES = 256  # descriptors kept for everything but client connections (indexes, caches, the reader)
BACKLOG = 1024  # the listen queue, and the most connections asyncio accepts in one go
SWITCH_INTERVAL = 0.0005  # seconds a thread holds the interpreter while another waits for it (Python: 0.005)
IDLE_GRACE = 0.25  # seconds a new (or newly idle) connection is not pushed out: its request may be on its way
ACCEPT_BATCH = 32  # connections accepted in one turn of the event loop (GuardedLoop; asyncio's: the backlog, 1024)
LOBBY = "lobby"  # Gate.placement: wait in the Lobby for the request headers
CUT_BATCH = 32  # timed-out connections answered and closed in one turn of the event loop
MMAP_THRESHOLD = 1 << 20  # bytes: a block this large is mapped apart by malloc, and unmapped when freed
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
LOBBY_BYTES = 8 << 10  # what a connection in the Lobby may send before it is let in (then h11's limits apply)
LOOP = "lcrag.service.http.server:GuardedLoop"  # uvicorn's loop factory, by name
OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)  # accept() failing for want of them
# Seconds after the drain for the questions told to stop to reach a step boundary and answer 503, before uvicorn
# cancels the requests still in progress (a stream cut without its last event).
STOP_GRACE = 2.0


@dataclass(frozen=True)
class ConnectionLimits:
    """What one connection may hold, each a flag of ``lcrag serve`` and ``lcrag mcp`` (README: Limits)."""

    max_connections: int = 1024  # open connections in all
    max_client_connections: int = 128  # open connections from one address
    header_timeout: float = 10.0  # seconds to deliver the request line and headers
    body_timeout: float = 30.0  # seconds to deliver a body, plus a second per body_min_rate bytes
    body_min_rate: int = 1024  # bytes per second a body must keep up beyond body_timeout
    keep_alive: float = 5.0  # seconds an idle connection is kept between requests (uvicorn's timeout_keep_alive)
    max_header_bytes: int = 64 << 10  # request line and headers (h11's incomplete event size)

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_client_connections", "header_timeout", "body_timeout",
                     "body_min_rate", "keep_alive", "max_header_bytes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


def _raw_response(status: int, reason: str, message: str, kind: str, extra: str = "") -> bytes:
    """A whole JSON error response, written straight to a connection that is closed after it."""
    body = json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"connection: close\r\n{extra}\r\n").encode() + body


class Gate:
    """Every open connection, by client address, and those waiting for their request headers, oldest first: idle
    (nothing received since they opened or since their last response) and stalled (part of the headers received),
    in all and by client, so that the connection to push out is found at once however many a client holds.

    Runs on the server's event loop only (no locks). ``counts`` tallies connections refused, pushed out and timed
    out by reason, for /metrics and the once-a-minute summary line."""

    def __init__(self, limits: ConnectionLimits, command: str = "lcrag serve"):
        self.limits, self.command = limits, command
        self.open: dict[object, str] = {}
        # Ordered sets of open connections, oldest first (a dict keeps insertion order). Not caches: bounded by
        # --max-connections at admission, and one leaves only by closing, never dropped silently as an LRU would.
        self.waiting: dict[object, float] = {}  # idle, with when they began to be
        self.stalled: dict[object, None] = {}  # part of their headers in, the rest not
        self.clients: dict[str, Client] = {}
        self.counts: Counter[str] = Counter()
        self._since: Counter[str] = Counter()
        self._reported = time.monotonic()
        self._cuts: deque[Callable[[], None]] = deque()  # connections timed out, waiting their turn to be closed
        self._cutting: asyncio.AbstractEventLoop | None = None  # the loop that closes them, while there are some

    def admit(self, conn, client: str) -> bool:
        """Take ``conn`` in, pushing out a waiting connection when a cap is reached; False: refused."""
        mine = self.clients.get(client)
        idle_since = time.monotonic() - IDLE_GRACE  # a newer idle connection may be one whose request is on its way
        if mine is not None and len(mine.open) >= self.limits.max_client_connections:
            victim = mine.victim(idle_since)
            if victim is None:
                return self._refuse(conn, "client_cap", self._client_full(mine))
            self._push_out(victim, "client_cap")
        if len(self.open) >= self.limits.max_connections:
            victim = self._victim(idle_since)
            if victim is None:
                return self._refuse(conn, "server_cap", self._server_full())
            self._push_out(victim, "server_cap")
        self.open[conn] = client
        self.clients.setdefault(client, Client()).open[conn] = None
        self.wait(conn)
        return True

    def placement(self, client: str) -> bytes | str | None:
        """Where a new connection from ``client`` goes, before a transport and a protocol are made for it
        (:class:`GuardedLoop`): None, in (both caps have room); :data:`LOBBY`, to wait there for its request headers
        (a cap is reached, but :meth:`admit` could push out a waiting connection for it); else the 503 that
        :meth:`admit` would refuse it with (a cap is reached, and none can go)."""
        mine = self.clients.get(client)
        idle_since = time.monotonic() - IDLE_GRACE
        placed = None
        if mine is not None and len(mine.open) >= self.limits.max_client_connections:
            if mine.victim(idle_since) is None:
                return self._refused("client_cap", self._client_full(mine))
            placed = LOBBY
        if len(self.open) >= self.limits.max_connections:
            if self._victim(idle_since) is None:
                return self._refused("server_cap", self._server_full())
            placed = LOBBY
        return placed

    def _victim(self, idle_since: float):
        return _victim(self.stalled, self.waiting, idle_since)

    def _client_full(self, mine: Client) -> str:
        return f"this address has {len(mine.open)} connections open, its most ({self.command} --max-client-connections)"

    def _server_full(self) -> str:
        return f"the server has {len(self.open)} connections open, its most ({self.command} --max-connections)"

    def wait(self, conn) -> None:
        """``conn`` waits for a request (new, or between two): it may be pushed out."""
        client = self.open.get(conn)
        if client is not None:
            now = time.monotonic()
            self._leave(conn, client)
            self.waiting[conn] = now
            self.clients[client].waiting[conn] = now

    def stall(self, conn) -> None:
        """``conn`` sent part of its request headers and not the rest: the first to be pushed out."""
        if self.waiting.pop(conn, None) is not None:
            self.stalled[conn] = None
            mine = self.clients[self.open[conn]]
            mine.waiting.pop(conn, None)
            mine.stalled[conn] = None

    def busy(self, conn) -> None:
        """``conn`` has a request in progress: it is never pushed out."""
        self._leave(conn, self.open.get(conn))

    def release(self, conn) -> None:
        client = self.open.pop(conn, None)
        self._leave(conn, client)
        if client is not None:
            mine = self.clients.get(client)
            if mine is not None:
                mine.open.pop(conn, None)
                if not mine.open:
                    del self.clients[client]

    def _leave(self, conn, client: str | None) -> None:
        """``conn`` neither waiting nor stalled any more."""
        self.waiting.pop(conn, None)
        self.stalled.pop(conn, None)
        mine = self.clients.get(client) if client is not None else None
        if mine is not None:
            mine.waiting.pop(conn, None)
            mine.stalled.pop(conn, None)

    def cut(self, loop: asyncio.AbstractEventLoop, cut_off: Callable[[], None]) -> None:
        """Call ``cut_off`` (a connection's timeout: it answers and closes it) in the next turn of ``loop``, at most
        :data:`CUT_BATCH` in a turn: connections that time out together (a flood's, let in together) are closed a
        few at a time, not a thousand in one turn while every other client waits."""
        self._cuts.append(cut_off)
        if self._cutting is None or self._cutting.is_closed():
            self._cutting = loop
            loop.call_soon(self._cut_some, loop)

    def _cut_some(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            for _ in range(min(CUT_BATCH, len(self._cuts))):
                self._cuts.popleft()()
        finally:
            if self._cuts:
                loop.call_soon(self._cut_some, loop)
            else:
                self._cutting = None

    def count(self, reason: str) -> None:
        self.counts[reason] += 1
        self._since[reason] += 1
        now = time.monotonic()
        if now - self._reported >= REPORT_EVERY:
            self.report(now)

    def report(self, now: float | None = None) -> None:
        """One line for everything refused or cut off since the last one (never a line per connection)."""
        if self._since:
            log.warning("connections in the last %.0f s: %s (%d open)", (now or time.monotonic()) - self._reported,
                        ", ".join(f"{n:,} {reason.replace('_', ' ')}" for reason, n in sorted(self._since.items())),
                        len(self.open))
            self._since.clear()
        self._reported = now or time.monotonic()

    def _refuse(self, conn, reason: str, message: str) -> bool:
        conn.transport.write(self._refused(reason, message))
        conn.transport.close()
        return False

    def _refused(self, reason: str, message: str) -> bytes:
        """The 503 a refused connection is answered with, counted."""
        self.count(f"refused_{reason}")
        return _raw_response(503, "Service Unavailable", f"too many connections: {message}", "overloaded_error",
                             "retry-after: 5\r\n")

    def _push_out(self, conn, reason: str) -> None:
        self.count(f"pushed_out_{reason}")
        self.release(conn)
        conn.close_now()


@dataclass
class Client:
    """One address's open connections, and those of them waiting for their request headers (idle, with when they
    began to be, and stalled), oldest first."""

    open: dict = field(default_factory=dict)
    waiting: dict = field(default_factory=dict)
    stalled: dict = field(default_factory=dict)

    def victim(self, idle_since: float):
        return _victim(self.stalled, self.waiting, idle_since)


def _victim(stalled: dict, waiting: dict, idle_since: float):
    """The connection to push out for another: the longest stalled, else the longest idle if idle since before
    ``idle_since``; None."""
    victim = next(iter(stalled), None)
    if victim is None:
        oldest = next(iter(waiting.items()), None)
        victim = oldest[0] if oldest is not None and oldest[1] < idle_since else None
    return victim


class GuardedProtocol(H11Protocol):
    """uvicorn's h11 protocol with header and body read timeouts and the connection caps of its :attr:`gate`."""

    gate: Gate  # set on the subclass :func:`protocol_for` makes

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self._timer: asyncio.TimerHandle | None = None
        self._seen = None  # the request cycle whose headers were seen last
        self._body: list[float] | None = None  # [start, bytes] while a request body is being read
        self._head, self._tail = 0, b""  # bytes of the request line and headers so far, and the last three
        super().connection_made(transport)
        client = self.client[0] if self.client else "unknown"
        if self.gate.admit(self, client):
            self._arm(self.gate.limits.header_timeout, self._header_expired)

    def connection_lost(self, exc) -> None:
        self._cancel()
        self.gate.release(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._body is not None:
            self._body[1] += len(data)
        elif self.conn.their_state is h11.IDLE and self._header_over(data):
            return
        super().data_received(data)
        self._track()

    def _header_over(self, data: bytes) -> bool:
        """Count a request's line and headers as they come (h11 bounds only what it holds unparsed, so a whole
        request in one packet would pass): over ``max_header_bytes``, a JSON 431 and the connection closed."""
        seen = self._tail + data
        end = seen.find(b"\r\n\r\n")
        size = self._head + (len(data) if end < 0 else end + 4 - len(self._tail))
        if size > self.gate.limits.max_header_bytes:
            self.gate.count("headers_too_large")
            self._cancel()
            self.gate.release(self)
            self.transport.write(_raw_response(431, "Request Header Fields Too Large", "the request line and "
                                               f"headers are over {self.gate.limits.max_header_bytes:,} bytes "
                                               f"({self.gate.command} --max-header-kb)", "invalid_request_error"))
            self.transport.close()
            return True
        self._head, self._tail = (0, b"") if end >= 0 else (size, seen[-3:])
        return False

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self.cycle is self._seen:  # no pipelined request began: wait for the next one
            self._body = None
            self.gate.wait(self)
            limits = self.gate.limits
            self._arm(limits.keep_alive + limits.header_timeout, self._header_expired)
        else:
            self._track()

    def send_400_response(self, msg: str) -> None:
        """A malformed request (bad syntax, headers over the size limit) gets JSON like every other error."""
        self.gate.count("malformed")
        self._cancel()
        self.transport.write(_raw_response(400, "Bad Request", "the request is not valid HTTP/1.1 (or its headers "
                                           f"are over {self.gate.limits.max_header_bytes:,} bytes: "
                                           f"{self.gate.command} --max-header-kb)", "invalid_request_error"))
        self.transport.close()

    def close_now(self) -> None:
        self._cancel()
        if not self.transport.is_closing():
            self.transport.close()

    # -- timeouts ------------------------------------------------------------------------------------------------
    def _track(self) -> None:
        """Note what the last bytes completed: a request's headers (the connection is busy; its body, if any, is
        timed), or its body."""
        cycle = self.cycle
        if cycle is self._seen and self._body is None and not self.transport.is_closing():
            self.gate.stall(self)  # bytes came, and still no whole request line and headers
        elif cycle is not None and cycle is not self._seen:
            self._seen = cycle
            self.gate.busy(self)
            if self.conn.their_state is h11.SEND_BODY:
                self._body = [time.monotonic(), 0]
                self._arm(self.gate.limits.body_timeout, self._body_check)
            else:
                self._body = None
                self._cancel()
        elif self._body is not None and self.conn.their_state is not h11.SEND_BODY:
            self._body = None  # the body is in
            self._cancel()

    def _arm(self, seconds: float, then) -> None:
        self._cancel()
        self._timer = self.loop.call_later(seconds, then)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _header_expired(self) -> None:
        self._timer = None
        self.gate.cut(self.loop, self._header_expiry)

    def _header_expiry(self) -> None:
        if self.transport.is_closing() or self.cycle is not self._seen:
            return  # (its headers came, or it went, while it waited its turn)
        self._expire("header_timeout", f"the request headers did not arrive within "
                                       f"{self.gate.limits.header_timeout:g} s ({self.gate.command} --header-timeout)")

    def _body_check(self) -> None:
        self._timer = None
        if self._body is None or self.transport.is_closing():
            return
        now, limits = time.monotonic(), self.gate.limits
        if self.flow.read_paused:  # the server holds the body back, not the client: that time is not the client's
            self._body[0] += 1.0
            self._arm(1.0, self._body_check)
            return
        deadline = self._body[0] + limits.body_timeout + self._body[1] / limits.body_min_rate
        if now < deadline:
            self._arm(deadline - now, self._body_check)
            return
        self.gate.cut(self.loop, self._body_expiry)

    def _body_expiry(self) -> None:
        if self._body is None or self.transport.is_closing():
            return  # (its body came, or it went, while it waited its turn)
        limits = self.gate.limits
        self._expire("body_timeout", f"the request body came slower than {limits.body_min_rate:,} bytes a second "
                                     f"after {limits.body_timeout:g} s ({self.gate.command} --body-timeout, "
                                     "--body-min-rate)")

    def _expire(self, reason: str, message: str) -> None:
        self.gate.count(reason)
        self.gate.release(self)
        cycle = self.cycle
        if cycle is None or cycle.response_complete or not cycle.response_started:  # nothing of ours half-sent
            self.transport.write(_raw_response(408, "Request Timeout", message, "timeout_error"))
        self.transport.close()


def protocol_for(gate: Gate) -> type[GuardedProtocol]:
    return type("GuardedProtocol", (GuardedProtocol,), {"gate": gate})


class GuardedLoop(asyncio.SelectorEventLoop):
    """asyncio's event loop, accepting connections a few at a time and cheaply. asyncio accepts as many as the listen
    backlog (1024) in one turn of the loop, each then a task that makes its protocol and transport, all before
    anything else runs: under a flood of connections (audit 34.7: 21,000 slow ones, reconnecting) a turn took
    hundreds of milliseconds, and a new client's request waited for it. Here a turn accepts at most
    :data:`ACCEPT_BATCH`, and where the gate (:meth:`guard`) places each: refused with its 503, or into the
    :class:`Lobby` (a cap is reached), before a protocol and a transport are made; else given both at once (no task).

    Everything else is asyncio's own: TLS (not served here) and running out of descriptors included."""

    gate: Gate | None = None
    lobby: Lobby | None = None

    def guard(self, gate: Gate) -> None:
        self.gate, self.lobby = gate, Lobby(self, gate)

    def _accept_connection(self, protocol_factory, sock, sslcontext=None, server=None, backlog=100, *rest):
        if sslcontext is not None:
            return super()._accept_connection(protocol_factory, sock, sslcontext, server, backlog, *rest)
        for _ in range(min(backlog, ACCEPT_BATCH)):
            try:
                conn, address = sock.accept()
                conn.setblocking(False)
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return None  # none left
            except OSError as exc:
                if exc.errno in OUT_OF_RESOURCES:  # asyncio's way: logged, accepting paused a while
                    return super()._accept_connection(protocol_factory, sock, sslcontext, server, backlog, *rest)
                raise
            self._place(conn, address, lambda data, conn=conn, address=address: self._admit(
                protocol_factory, conn, address, server, data))
        return None

    def _place(self, conn: socket.socket, address, admit: Callable[[bytes], None]) -> None:
        placed = self.gate.placement(address[0]) if self.gate is not None and isinstance(address, tuple) else None
        if placed is None:
            admit(b"")
        elif placed is LOBBY:
            self.lobby.enter(conn, address, admit)
        else:
            _answer_and_close(conn, placed)

    def _make_socket_transport(self, sock, protocol, waiter=None, *, extra=None, server=None):
        return _Transport(self, sock, protocol, waiter, extra, server)

    def _admit(self, protocol_factory, conn: socket.socket, address, server, data: bytes) -> None:
        """``conn`` given its protocol and transport, and then ``data`` (what it sent in the lobby) as received."""
        try:
            protocol = protocol_factory()
            transport = self._make_socket_transport(conn, protocol, extra={"peername": address}, server=server)
        except Exception as exc:  # noqa: BLE001 - as asyncio: reported, the connection closed, the server goes on
            conn.close()
            self.call_exception_handler({"message": "Error on transport creation for incoming connection",
                                         "exception": exc})
            return
        if data:  # after connection_made, which the transport has just scheduled (and which may refuse it)
            self.call_soon(lambda: transport.is_closing() or protocol.data_received(data))


class _Transport(selector_events._SelectorSocketTransport):
    """asyncio's socket transport without the reference cycle it keeps to itself (its read callback is a bound method
    of its own, kept after its connection is lost): let go when its connection is lost, not left to the cyclic
    collector, whose full passes over a flood's thousands of dead transports paused every client ~100 ms."""

    def _call_connection_lost(self, exc) -> None:
        try:
            super()._call_connection_lost(exc)
        finally:
            self._read_ready_cb = None


class Lobby:
    """Connections that came while a cap was reached, each a bare socket (no protocol, no transport) until its
    request line and headers are in, then let in (:meth:`Gate.admit` pushing out a stalled or idle connection for
    it) with what it sent. A connection that only holds a socket open and trickles its headers (slowloris) is cheap
    here, and cheaply let go: at most ``max_connections`` wait, the oldest pushed out for a new one, and none past
    the header timeout (408). Each reads at most :data:`LOBBY_BYTES` here: more, and it is let in as it is, for the
    protocol's own limits to judge."""

    def __init__(self, loop: asyncio.AbstractEventLoop, gate: Gate):
        self.loop, self.gate = loop, gate
        self.waiting: dict[socket.socket, Waiting] = {}  # oldest first; bounded by --max-connections, as the gate's
        self._sweep: asyncio.TimerHandle | None = None

    def enter(self, conn: socket.socket, address, admit: Callable[[bytes], None]) -> None:
        if len(self.waiting) >= self.gate.limits.max_connections:
            self._drop(next(iter(self.waiting)), "pushed_out_lobby")
        self.waiting[conn] = Waiting(address, admit, time.monotonic())
        self.loop.add_reader(conn.fileno(), self._readable, conn)
        if self._sweep is None:
            self._sweep = self.loop.call_later(1.0, self._swept)

    def _readable(self, conn: socket.socket) -> None:
        waiting = self.waiting.get(conn)
        if waiting is None:
            return
        try:
            data = conn.recv(LOBBY_BYTES - len(waiting.data))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client went
            return self._drop(conn)
        waiting.data += data
        if b"\r\n\r\n" in waiting.data or len(waiting.data) >= LOBBY_BYTES:
            self._leave(conn).admit(bytes(waiting.data))

    def _leave(self, conn: socket.socket) -> Waiting:
        self.loop.remove_reader(conn.fileno())
        return self.waiting.pop(conn)

    def _drop(self, conn: socket.socket, reason: str | None = None, answer: bytes = b"") -> None:
        self._leave(conn)
        if reason is not None:
            self.gate.count(reason)
        _answer_and_close(conn, answer)

    def _swept(self) -> None:
        """The connections that waited past the header timeout answered 408 and closed, :data:`CUT_BATCH` in a
        turn of the loop (then the rest in the next turns), once a second."""
        self._sweep = None
        limits = self.gate.limits
        expired = time.monotonic() - limits.header_timeout
        for _ in range(CUT_BATCH):
            if not self.waiting or next(iter(self.waiting.values())).since > expired:
                break
            self._drop(next(iter(self.waiting)), "header_timeout", _raw_response(
                408, "Request Timeout", f"the request headers did not arrive within {limits.header_timeout:g} s "
                f"({self.gate.command} --header-timeout)", "timeout_error"))
        if self.waiting:
            more = next(iter(self.waiting.values())).since <= expired
            self._sweep = self.loop.call_soon(self._swept) if more else self.loop.call_later(1.0, self._swept)

    def close(self) -> None:
        """Every waiting connection closed (the server is stopping)."""
        for conn in list(self.waiting):
            self._drop(conn)
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None


@dataclass
class Waiting:
    """A connection in the :class:`Lobby`: from where, how to let it in, since when, and what it sent so far."""

    address: object
    admit: Callable[[bytes], None]
    since: float
    data: bytearray = field(default_factory=bytearray)


def _answer_and_close(conn: socket.socket, answer: bytes) -> None:
    """``answer`` written to a bare socket (as much as its buffer takes at once: never waited for), which is closed."""
    if answer:
        try:
            conn.send(answer)
        except OSError:
            pass
    conn.close()


class _QuietLogs(logging.Filter):
    """uvicorn's one-line warnings that a hostile client can repeat at will (a malformed request), passed on at most
    once a minute."""

    FLOODS = ("Invalid HTTP request received.",)

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message not in self.FLOODS:
            return True
        now = time.monotonic()
        if now - self._last.get(message, -REPORT_EVERY) < REPORT_EVERY:
            return False
        self._last[message] = now
        return True


def quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """asyncio logs ``accept()`` failing for want of descriptors (EMFILE) with a traceback per attempt, thousands a
    second under a connection flood: log it as one line a minute with a count instead."""
    state = {"last": -REPORT_EVERY, "missed": 0}
    previous = loop.get_exception_handler()

    def handler(loop, context) -> None:
        if context.get("message") != "socket.accept() out of system resource":
            return previous(loop, context) if previous else loop.default_exception_handler(context)
        state["missed"] += 1
        now = time.monotonic()
        if now - state["last"] >= REPORT_EVERY:
            exc = context.get("exception")
            log.warning("accept() failed %d time(s): %s; new connections wait (raise ulimit -n, or lower "
                        "--max-connections)", state["missed"], getattr(exc, "strerror", None) or exc)
            state["last"], state["missed"] = now, 0

    loop.set_exception_handler(handler)


def raise_file_limit() -> int:
    """Raise the soft limit on open files to the hard one; the limit now in force (0 where there is none)."""
    try:
        import resource
    except ImportError:  # not POSIX
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return 0 if soft == resource.RLIM_INFINITY else soft


def backlog_for(files: int) -> int:
    """The listen backlog (also how many connections asyncio accepts at once) for an open-file limit of ``files``."""
    return min(BACKLOG, max(64, files // 8)) if files else BACKLOG


def fitted(limits: ConnectionLimits, files: int, command: str) -> ConnectionLimits:
    """``limits`` with the connection cap lowered, with a one-line warning, where the open-file limit cannot hold it
    (connections, those accepted at once and not yet let go, and the files the server itself opens)."""
    room = files - RESERVED_FILES - 2 * backlog_for(files) if files else limits.max_connections
    if room >= limits.max_connections:
        return limits
    lowered = max(16, room)
    log.warning("%s --max-connections %d lowered to %d: this process may open %d files (ulimit -n)", command,
                limits.max_connections, lowered, files)
    return replace(limits, max_connections=lowered,
                   max_client_connections=min(limits.max_client_connections, lowered))


class Server(uvicorn.Server):
    """uvicorn's server, with accept() failures logged once a minute, what start-up made frozen for the collector,
    and the work in progress told to stop once a shutdown has drained for ``drain_seconds``."""

    drain_seconds: float = SHUTDOWN_SECONDS
    stop_work: Callable[[], None] | None = None

    async def startup(self, sockets=None) -> None:
        loop = asyncio.get_running_loop()
        quiet_accept_errors(loop)
        if isinstance(loop, GuardedLoop) and getattr(self, "gate", None) is not None:
            loop.guard(self.gate)
        await super().startup(sockets)
        # What start-up made (the app, its models and libraries) lives as long as the server: out of the cyclic
        # collector's scans, whose full passes otherwise grow with it and pause every connection.
        gc.collect()
        gc.freeze()

    async def shutdown(self, sockets=None) -> None:
        """uvicorn's shutdown (no new connections; those in progress drained within its
        ``timeout_graceful_shutdown``, then cancelled), with :attr:`stop_work` called after :attr:`drain_seconds`
        of it, a little before uvicorn's timeout, so that the questions still running end with an answer (503)."""
        stop, loop = self.stop_work, asyncio.get_running_loop()
        timer = loop.call_later(self.drain_seconds, stop) if stop is not None else None
        if isinstance(loop, GuardedLoop) and loop.lobby is not None:
            loop.lobby.close()  # (uvicorn closes the connections it knows, which these are not yet)
        try:
            await super().shutdown(sockets)
        finally:
            if timer is not None:
                timer.cancel()


def make_server(app, host: str, port: int, limits: ConnectionLimits | None = None, log_level: str = "warning",
                command: str = "lcrag serve", gate: Gate | None = None, backlog: int = BACKLOG,
                shutdown_seconds: float = SHUTDOWN_SECONDS, stop_work: Callable[[], None] | None = None) -> Server:
    """The server for ``app`` on ``host:port`` under ``limits`` (see the module's doc); a shutdown drains for
    ``shutdown_seconds``, then calls ``stop_work``."""
    if not 0 <= shutdown_seconds <= MAX_SHUTDOWN_SECONDS:
        raise ValueError(f"shutdown_seconds must be 0 to {MAX_SHUTDOWN_SECONDS:g}, got {shutdown_seconds}")
    limits = limits or ConnectionLimits()
    gate = gate or Gate(limits, command)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, http=protocol_for(gate), loop=LOOP,
                            timeout_keep_alive=max(1, round(limits.keep_alive)), backlog=backlog,
                            h11_max_incomplete_event_size=limits.max_header_bytes,
                            timeout_graceful_shutdown=shutdown_seconds + STOP_GRACE)
    server = Server(config)
    server.gate = gate
    server.drain_seconds, server.stop_work = shutdown_seconds, stop_work
    return server


def run(app, host: str, port: int, limits: ConnectionLimits, log_level: str = "warning",
        command: str = "lcrag serve", gate: Gate | None = None, shutdown_seconds: float = SHUTDOWN_SECONDS,
        stop_work: Callable[[], None] | None = None, close: Callable[[], None] | None = None) -> None:
    """Serve ``app`` until interrupted: the open-file limit raised, the caps fitted under it; on SIGTERM or Ctrl-C,
    drained for ``shutdown_seconds``, ``stop_work`` called, then ``close`` (see the module's doc)."""
    files = raise_file_limit()
    limits = fitted(limits, files, command)
    if gate is not None:
        gate.limits = limits
    server = make_server(app, host, port, limits, log_level, command, gate, backlog_for(files), shutdown_seconds,
                         stop_work)
    for name in ("uvicorn.error",):
        logging.getLogger(name).addFilter(_QuietLogs())
    # Indexing a large file runs Python in a thread of this process; a question waiting for the interpreter waits at
    # most this long each time it comes back from the network or disk (the default, 5 ms, made a 3 ms question
    # 7 ms during a 50 MB upload's indexing).
    sys.setswitchinterval(SWITCH_INTERVAL)
    large_blocks_apart()
    with _terminated_after(server, close) as terminated:
        server.run()
    if terminated:
        signal.raise_signal(signal.SIGTERM)  # the process ends as the signal says, now that everything is closed


def large_blocks_apart(threshold: int = MMAP_THRESHOLD) -> bool:
    """Have glibc's malloc map every block of ``threshold`` bytes or more apart, so that it goes back to the system
    as soon as it is freed; whether it could (not glibc: nothing done). By default the threshold rises to the
    largest block freed so far (up to 32 MB): once one large file's text had come and gone, the next ones' copies
    (a parse's JSON, its texts, a collection's joined text) were carved from the heap and stayed resident after
    they were freed, each large upload adding to the server's memory (audit 34.4)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt(M_MMAP_THRESHOLD, threshold) == 1
    except (OSError, AttributeError):  # no C library by that name, or one without mallopt
        return False


@contextmanager
def _terminated_after(server: Server, close: Callable[[], None] | None) -> Iterator[list[int]]:
    """Around ``server.run()``: ``close()`` after it, however it ends, and a SIGTERM it received noted in the list
    yielded. uvicorn raises the SIGTERM it handled again under the handler it found when it is done; under the
    default one the process would end there, before ``close`` (the parse sandbox's processes orphaned, the questions'
    threads never told to stop). Under this one it is noted, and the caller raises it once ``close`` is done."""
    terminated: list[int] = []

    def noted(number: int, frame) -> None:
        terminated.append(number)
        server.should_exit = True  # one that came before uvicorn's own handler was in place stops it all the same

    main = threading.current_thread() is threading.main_thread()  # signals can only be handled there
    previous = signal.signal(signal.SIGTERM, noted) if main else None
    try:
        yield terminated
    finally:
        if main:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        if close is not None:
            close()
