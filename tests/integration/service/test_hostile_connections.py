"""Connections that hold the server for free, and requests answered in the wrong form (issue 34, items 7, 13, 14, 17),
over real HTTP on loopback: the server `lcrag serve` runs (uvicorn with lcrag's connection guard,
lcrag.service.http.server) in a thread of the test process, with a scripted reader.

The scale of item 7 (21,000 slow connections, EMFILE) is measured by benchmarks/bench_connections.py."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
from document_fixtures import crane_manual
from service_fixtures import free_port, wait_ready

from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.service.answering import Answering
from lcrag.service.http.app import create_app
from lcrag.service.http.guard import Guard
from lcrag.service.limits import Limits
from lcrag.service.metrics import Metrics
from lcrag.service.http.server import (ACCEPT_BATCH, CUT_BATCH, ConnectionLimits, Gate, GuardedLoop, make_server,
                                  quiet_accept_errors)


@contextmanager
def serving(app, connections: ConnectionLimits, gate: Gate | None = None, command: str = "lcrag serve"):
    """``app`` served as `lcrag serve` serves it, on a free loopback port; yields (url, the server's gate)."""
    port = free_port()
    server = make_server(app, "127.0.0.1", port, connections, command=command, gate=gate)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            httpx.get(f"{url}/healthz", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.05)
    try:
        yield url, server.gate
    finally:
        server.should_exit = True
        thread.join(15)


@pytest.fixture
def service(tmp_path, scripted_reader):
    def make(connections=ConnectionLimits(), answer=lambda m: "7781", api_key=None, **limits):
        settings = Settings(cache=False, cache_dir=tmp_path / "cache", chunking="words:20", k=2, strategy="rag")
        answering = Answering(settings, tmp_path / "collections", price_as="gpt-4o-mini",
                              pipeline=Pipeline(settings, reader=scripted_reader(answer)))
        gate = Gate(connections)
        app = create_app(answering, api_key, Limits(**limits), gate=gate)
        return serving(app, connections, gate)
    return make


def raw(port_url: str, data: bytes, then=None, wait: float = 5.0) -> bytes:
    """Send ``data`` on a new connection (then call ``then(sock)``), and read until the server closes it: what came
    back."""
    host, port = port_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(data)
        if then is not None:
            then(sock)
        sock.settimeout(wait)
        got = b""
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    return got


def json_body(response: bytes) -> dict:
    return json.loads(response.split(b"\r\n\r\n", 1)[1])


# -- item 7: slowloris --------------------------------------------------------------------------------------------
def test_headers_trickled_in_are_cut_off_at_the_header_timeout_with_a_json_408(service):
    with service(ConnectionLimits(header_timeout=1)) as (url, gate):
        sent = []

        def trickle(sock):  # a header line every 0.3 s, never the blank line that ends them
            try:
                for _ in range(20):
                    sock.sendall(b"X-Slow: 1\r\n")
                    sent.append(1)
                    time.sleep(0.3)
            except OSError:
                pass

        got = raw(url, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n", trickle)
        assert got.startswith(b"HTTP/1.1 408 ") and b"application/json" in got, got
        assert "--header-timeout" in json_body(got)["error"]["message"]
        assert len(sent) < 20  # the server closed the connection before the trickle ended
        assert gate.counts["header_timeout"] == 1
        assert 'lcrag_connections_closed_total{reason="header_timeout"} 1.0' in httpx.get(f"{url}/metrics").text


def test_a_body_trickled_in_is_cut_off_and_a_steady_one_is_not(service, tmp_path):
    connections = ConnectionLimits(body_timeout=1, body_min_rate=2000)
    with service(connections, max_body_bytes=100_000) as (url, gate):
        head = (b"POST /v1/ask HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: 50000\r\n\r\n")

        sent = []

        def trickle(sock):  # a byte every 0.1 s: 10 bytes a second
            try:
                for _ in range(60):
                    sock.sendall(b" ")
                    sent.append(1)
                    time.sleep(0.1)
            except OSError:
                pass

        got = raw(url, head, trickle)
        assert got.startswith(b"HTTP/1.1 408 ") and "--body-timeout" in json_body(got)["error"]["message"], got
        assert len(sent) < 60 and gate.counts["body_timeout"] == 1  # closed before the trickle ended
        body = json.dumps({"collection": "nope", "question": "q" + " " * 40_000}).encode()

        def steady(sock):  # 40 KB at ~10 KB a second: over 1 s, but faster than the minimum rate
            for i in range(0, len(body), 1000):
                sock.sendall(body[i:i + 1000])
                time.sleep(0.1)

        head = head.replace(b"50000", str(len(body)).encode()).replace(b"HTTP/1.1\r\n", b"HTTP/1.1\r\nConnection: close\r\n")
        got = raw(url, head, steady)  # sent over 4 s, longer than the body timeout
        assert got.startswith(b"HTTP/1.1 404 "), got  # read whole, then answered: no such collection


def test_idle_connections_over_the_caps_make_room_and_healthz_keeps_answering(service):
    connections = ConnectionLimits(max_connections=40, max_client_connections=25, header_timeout=30)
    with service(connections) as (url, gate):
        host, port = url.removeprefix("http://").split(":")
        idle = [socket.create_connection((host, int(port))) for _ in range(300)]  # never send a byte
        try:
            time.sleep(0.5)  # idle for longer than a request takes to come (lcrag.service.http.server.IDLE_GRACE)
            for _ in range(5):
                assert httpx.get(f"{url}/healthz", headers={"Connection": "close"}).status_code == 200
            assert len(gate.open) <= 25  # the client's cap: new ones refused, or idle ones pushed out
            assert gate.counts["refused_client_cap"] + gate.counts["pushed_out_client_cap"] >= 275
        finally:
            for sock in idle:
                sock.close()


def test_over_the_cap_with_every_connection_busy_is_a_json_503(service, tmp_path):
    release, started = threading.Event(), threading.Event()

    def slow(messages):
        started.set()
        release.wait(30)
        return "7781"

    with service(ConnectionLimits(max_connections=2, max_client_connections=2), answer=slow) as (url, gate):
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"}).status_code == 201
        with open(crane_manual(tmp_path), "rb") as f:
            assert httpx.post(f"{url}/v1/collections/ops/files", files={"file": ("manual.txt", f)}).status_code == 201
        assert wait_ready(url, "ops")["state"] == "ready"
        ask = lambda: httpx.post(f"{url}/v1/ask", json={"collection": "ops", "question": "Reset code?"}, timeout=60)
        busy = [threading.Thread(target=ask) for _ in range(2)]
        for thread in busy:
            thread.start()
        assert started.wait(30)
        time.sleep(0.5)  # both asks in progress: two busy connections, none waiting
        refused = httpx.get(f"{url}/healthz")
        assert refused.status_code == 503 and "--max-client-connections" in refused.json()["error"]["message"]
        release.set()
        for thread in busy:
            thread.join()
        assert httpx.get(f"{url}/healthz").status_code == 200


def test_a_malformed_request_is_a_json_400(service):
    with service() as (url, _):
        got = raw(url, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header Line\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 400 ") and json_body(got)["error"]["code"] == 400


class Counted(asyncio.Protocol):
    """A protocol that notes each connection made and what it receives."""

    made: list = []

    def connection_made(self, transport):
        self.transport, self.received = transport, b""
        self.made.append(self)

    def data_received(self, data):
        self.received += data


@contextmanager
def guarded_loop(limits: ConnectionLimits, clients: int):
    """A GuardedLoop under a gate of ``limits``, a listening socket and ``clients`` connections waiting on it."""
    loop, gate = GuardedLoop(), Gate(limits)
    loop.guard(gate)
    listener = socket.create_server(("127.0.0.1", 0), backlog=256)
    listener.setblocking(False)
    connected = [socket.create_connection(listener.getsockname()) for _ in range(clients)]
    Counted.made = []
    try:
        yield loop, gate, lambda: loop._accept_connection(Counted, listener, None, None, 1024), connected
    finally:
        for made in Counted.made:
            made.transport.close()
        loop.lobby.close()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
        listener.close()
        for client in connected:
            client.close()


def test_a_turn_of_the_loop_accepts_a_few_connections_and_refuses_before_making_a_protocol():
    """asyncio accepts as many connections as the backlog in one turn of its loop, each given a protocol and a
    transport before anything else runs (audit 34.7: a new client's request waited hundreds of milliseconds behind
    a flood); a turn takes ACCEPT_BATCH now, and one the gate has no room for is answered before either is made."""
    with guarded_loop(ConnectionLimits(max_connections=10, max_client_connections=1), 3 * ACCEPT_BATCH) as (
            loop, gate, turn, clients):
        gate.limits = ConnectionLimits(max_connections=1000, max_client_connections=1000)
        turn()
        loop.run_until_complete(asyncio.sleep(0.05))
        assert len(Counted.made) == ACCEPT_BATCH
        gate.limits = ConnectionLimits(max_connections=10, max_client_connections=1)
        busy = object()
        assert gate.admit(busy, "127.0.0.1")
        gate.busy(busy)  # a request in progress: nothing of this address's to push out
        turn()
        loop.run_until_complete(asyncio.sleep(0.05))
        assert len(Counted.made) == ACCEPT_BATCH and gate.counts["refused_client_cap"] == ACCEPT_BATCH
        clients[ACCEPT_BATCH].settimeout(5)
        got = clients[ACCEPT_BATCH].recv(4096)
        assert got.startswith(b"HTTP/1.1 503 ") and b"--max-client-connections" in got


def test_a_connection_that_is_gone_leaves_no_cycle_for_the_collector():
    """asyncio's socket transport keeps a bound method of its own: each connection gone was left to the cyclic
    collector, whose full passes over a flood's thousands paused every client ~100 ms (audit 34.7)."""
    import gc

    gc.collect()
    gc.disable()  # (what is collected is looked at below, not collected on the way)
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        with guarded_loop(ConnectionLimits(max_connections=1000, max_client_connections=1000), ACCEPT_BATCH) as (
                loop, gate, turn, clients):
            turn()
            loop.run_until_complete(asyncio.sleep(0.05))
            for client in clients:
                client.close()
            loop.run_until_complete(asyncio.sleep(0.2))  # each end read, each transport closed
            assert len(Counted.made) == ACCEPT_BATCH and all(made.transport.is_closing() for made in Counted.made)
            Counted.made = []
        gc.collect()
        left = [o for o in gc.garbage if type(o).__name__.endswith("Transport")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == []


def test_over_a_cap_a_connection_waits_in_the_lobby_until_its_headers_are_in():
    """At a cap, with a stalled connection that could go for it, a new connection is a bare socket in the lobby
    (no protocol, no transport: a flood of slow ones costs little) until its request line and headers are in, then
    let in with what it sent; one that never sends them is answered 408 at the header timeout."""
    class Stalled:
        def close_now(self):
            pass

    with guarded_loop(ConnectionLimits(max_connections=10, max_client_connections=1, header_timeout=1), 3) as (
            loop, gate, turn, (asking, trickling, silent)):
        stalled = Stalled()
        assert gate.admit(stalled, "127.0.0.1")
        gate.stall(stalled)
        turn()
        trickling.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        asking.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        loop.run_until_complete(asyncio.sleep(0.2))
        assert [made.received for made in Counted.made] == [b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"]
        assert len(loop.lobby.waiting) == 2
        loop.run_until_complete(asyncio.sleep(2.2))
        for client in (trickling, silent):
            client.settimeout(5)
            assert client.recv(4096).startswith(b"HTTP/1.1 408 ")
        assert not loop.lobby.waiting and gate.counts["header_timeout"] == 2 and len(Counted.made) == 1


def test_connections_that_time_out_together_are_closed_a_few_in_each_turn_of_the_loop():
    """A flood's connections, let in together, time out together: a thousand closed in one turn of the loop held
    every other client ~100 ms (audit 34.7); CUT_BATCH are closed in a turn now, the rest in the next turns."""
    loop, gate, closed = asyncio.new_event_loop(), Gate(ConnectionLimits()), []
    try:
        for number in range(3 * CUT_BATCH + 5):
            gate.cut(loop, lambda number=number: closed.append(number))
        turns = []
        while len(closed) < 3 * CUT_BATCH + 5 and len(turns) < 10:
            loop.call_soon(loop.stop)  # one turn of the loop
            loop.run_forever()
            turns.append(len(closed))
        assert turns == [CUT_BATCH, 2 * CUT_BATCH, 3 * CUT_BATCH, 3 * CUT_BATCH + 5]
        assert closed == list(range(3 * CUT_BATCH + 5))
    finally:
        loop.close()


def test_the_longest_stalled_of_a_clients_connections_is_pushed_out_for_its_new_one():
    """Each address's waiting and stalled connections are kept apart, so the one to push out is found at once."""
    gate = Gate(ConnectionLimits(max_connections=1000, max_client_connections=100))
    closed = []

    class Conn:
        def close_now(self):
            closed.append(self)

    held = [Conn() for _ in range(100)]
    for conn in held:
        assert gate.admit(conn, "10.0.0.1")
        gate.busy(conn)
    gate.wait(held[40])
    gate.stall(held[40])
    gate.wait(held[70])
    gate.stall(held[70])
    assert gate.admit(Conn(), "10.0.0.2") and gate.placement("10.0.0.1") == "lobby"  # (at its cap: see above)
    assert gate.admit(Conn(), "10.0.0.1") and closed == [held[40]]
    assert gate.admit(Conn(), "10.0.0.1") and closed == [held[40], held[70]]
    assert gate.placement("10.0.0.1").startswith(b"HTTP/1.1 503 ")  # the rest busy, the new ones idle but new


def test_accept_failing_for_want_of_descriptors_is_one_line_a_minute(caplog):
    """asyncio logs EMFILE on accept() with a traceback per attempt (5.6M lines in 60 s, issue 34): one line now."""
    loop = asyncio.new_event_loop()
    try:
        quiet_accept_errors(loop)
        with caplog.at_level(logging.WARNING):
            for _ in range(5000):
                loop.call_exception_handler({"message": "socket.accept() out of system resource",
                                             "exception": OSError(24, "Too many open files")})
        lines = [r for r in caplog.records if "accept()" in r.getMessage()]
        assert len(lines) == 1 and lines[0].exc_info is None and "Too many open files" in lines[0].getMessage()
    finally:
        loop.close()


def test_serve_raises_its_open_file_limit_to_the_hard_one():
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    probe = ("import resource; from lcrag.service.http.server import raise_file_limit; n = raise_file_limit(); "
             "print(n, resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    done = subprocess.run([sys.executable, "-c", f"import resource; resource.setrlimit(resource.RLIMIT_NOFILE, "
                           f"({min(soft, 256)}, {hard})); " + probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(hard), str(hard)] or hard == resource.RLIM_INFINITY


# -- item 13: text that is not Unicode ----------------------------------------------------------------------------
@pytest.mark.parametrize("path, body, field", [
    ("/v1/ask", '{"collection": "ops", "question": "Reset \\ud800 code?"}', "question"),
    ("/v1/ask", '{"collection": "ops", "question": "Reset code?", "history": [{"role": "user", "content": "a\\udfffb"}]}',
     "history[0].content"),
    ("/v1/chat/completions", '{"model": "lcrag/ops", "messages": [{"role": "user", "content": "x\\ud800"}]}',
     "messages[0].content"),
    ("/v1/chat/completions", '{"model": "lcrag/ops", "messages": [{"role": "user", "content": "hi"}, '
     '{"role": "assistant", "content": "\\ud83d"}, {"role": "user", "content": "Reset code?"}]}', "messages[1].content"),
])
def test_a_lone_surrogate_is_a_400_naming_the_field(service, tmp_path, path, body, field):
    with service() as (url, _):
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"}).status_code == 201
        with open(crane_manual(tmp_path), "rb") as f:
            httpx.post(f"{url}/v1/collections/ops/files", files={"file": ("manual.txt", f)})
        wait_ready(url, "ops")
        for stream in (False, True):
            sent = body[:-1] + f', "stream": {json.dumps(stream)}}}'
            refused = httpx.post(f"{url}{path}", content=sent, headers={"Content-Type": "application/json"})
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"]["message"].startswith(f"{field}: not valid Unicode text"), refused.text
        assert httpx.get(f"{url}/healthz").status_code == 200


# -- item 14: a body over its limit with Content-Length -----------------------------------------------------------
def test_a_declared_body_over_its_limit_is_a_json_413_naming_the_flag(service):
    with service(max_body_bytes=10_000, max_upload_bytes=100_000) as (url, _):
        for path, size, content_type, flag in [
                ("/v1/ask", 50_000, "application/json", "--max-body-kb"),
                ("/v1/collections/ops/files", 2_000_000, "multipart/form-data; boundary=x", "--max-upload-mb")]:
            head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
                    f"Content-Length: {size}\r\n\r\n").encode()
            got = raw(url, head + b"x" * 1000)  # the rest is never sent: nothing is read before the refusal
            assert got.startswith(b"HTTP/1.1 413 ") and b"application/json" in got, got
            message = json_body(got)["error"]["message"]
            assert flag in message and "byte limit" in message, message
        # The same through a client that sends all of it.
        refused = httpx.post(f"{url}/v1/ask", content=b"{" + b" " * 20_000 + b"}",
                             headers={"Content-Type": "application/json"})
        assert refused.status_code == 413 and "--max-body-kb" in refused.json()["error"]["message"]


# -- item 17: a key no client can send ----------------------------------------------------------------------------
def test_a_non_ascii_api_key_is_refused_at_start_and_an_ascii_one_matches_its_bytes(service, tmp_path):
    done = subprocess.run([sys.executable, "-m", "lcrag.cli", "serve", "--api-key", "clé-secrète", "--cache-dir",
                           str(tmp_path / "cache")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "--api-key" in done.stderr and "ASCII" in done.stderr
    with pytest.raises(ValueError):
        Guard(None, api_key="clé", limits=Limits(), metrics=Metrics())
    with service(api_key="k3y!~") as (url, _):
        assert httpx.get(f"{url}/v1/collections", headers={"Authorization": "Bearer k3y!~"}).status_code == 200
        wrong = httpx.get(f"{url}/v1/collections", headers={"Authorization": "Bearer k3y!\xe9".encode("latin-1")})
        assert wrong.status_code == 401


def test_the_connection_cap_is_fitted_under_the_open_file_limit(caplog):
    from lcrag.service.http.server import backlog_for, fitted

    assert fitted(ConnectionLimits(), 20_000, "lcrag serve") == ConnectionLimits()
    with caplog.at_level(logging.WARNING):
        small = fitted(ConnectionLimits(), 1024, "lcrag serve")
    assert backlog_for(1024) == 128 and small.max_connections == 1024 - 256 - 2 * 128
    assert small.max_client_connections == 128 and "--max-connections 1024 lowered to 512" in caplog.text


def test_headers_over_max_header_kb_are_a_json_431_naming_the_flag(service):
    with service(ConnectionLimits(max_header_bytes=4096)) as (url, gate):
        got = raw(url, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"b" * 8000 + b"\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 431 ") and "--max-header-kb" in json_body(got)["error"]["message"], got

        def trickle(sock):  # the same, a line at a time
            try:
                for _ in range(20):
                    sock.sendall(b"X-Line: " + b"l" * 500 + b"\r\n")
            except OSError:
                pass

        got = raw(url, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n", trickle)
        assert got.startswith(b"HTTP/1.1 4") and b"--max-header-kb" in got, got
        assert httpx.get(f"{url}/healthz", headers={"X-Fits": "f" * 3000}).status_code == 200
        assert gate.counts["headers_too_large"] >= 1
