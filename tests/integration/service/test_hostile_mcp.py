"""`lcrag mcp` over streamable HTTP against clients that hold it for free (issue 34, items 7-10 and 13 for MCP): the
app `lcrag mcp --transport http` serves (lcrag.cli.mcp.http_app: the guard, body limit and session bounds in front of the
SDK's app) on uvicorn with lcrag's connection guard, in a thread, on loopback, with a scripted reader. The client is
plain JSON-RPC over HTTP, as a hostile one would be.

The scale of item 8 (10,000 idle initializations) is measured by benchmarks/bench_connections.py."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
from service_fixtures import free_port

pytest.importorskip("mcp")

from lcrag.cli.mcp import http_app  # noqa: E402
from lcrag.pipeline.pipeline import Pipeline, Settings  # noqa: E402
from lcrag.readers import streaming  # noqa: E402
from lcrag.service.answering import Answering  # noqa: E402
from lcrag.service.limits import Limits  # noqa: E402
from lcrag.service.mcp.tools import LcragMCP, ToolError  # noqa: E402
from lcrag.service.mcp.sessions import SessionLimits, Sessions  # noqa: E402
from lcrag.service.http.server import ConnectionLimits, make_server  # noqa: E402

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
HELLO = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
MANUAL = "Crane manual.\nThe reset code of the crane is 7781.\nThe hoist limit of the crane is 12 tonnes.\n"


@contextmanager
def mcp_server(tmp_path, reader, sessions=SessionLimits(), connections=ConnectionLimits(), **limits):
    """An MCP server over one collection "ops" (the crane manual, or ``files``), as `lcrag mcp --transport http`."""
    settings = Settings(cache=False, cache_dir=tmp_path / "cache", chunking="words:20", k=2, strategy="rag")
    answering = Answering(settings, tmp_path / "collections", price_as="gpt-4o-mini",
                          pipeline=Pipeline(settings, reader=reader))
    answering.collections.create("ops")
    for name, text in limits.pop("files", {"manual.txt": MANUAL}).items():
        answering.collections.add_file("ops", name, iter([text.encode()]), 1 << 30)
    answering.collections.wait("ops")
    limits = Limits(**limits)
    server = LcragMCP(answering, limits, sessions)
    app = http_app(server, None, limits, sessions)
    port = free_port()
    uvicorn_server = make_server(app, "127.0.0.1", port, connections, command="lcrag mcp")
    thread = threading.Thread(target=uvicorn_server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}/mcp"
    for _ in range(200):
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.05)
    try:
        yield url, server, _sessions(app)
    finally:
        uvicorn_server.should_exit = True
        thread.join(15)
        answering.close()


def _sessions(app) -> Sessions:
    while not isinstance(app, Sessions):
        app = app.app
    return app


def eventually(condition, seconds: float = 5) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def initialize(url, complete=True) -> dict:
    """A new session's headers; ``complete``: the client comes back with notifications/initialized."""
    opened = httpx.post(url, json=HELLO, headers=ACCEPT, timeout=30)
    assert opened.status_code == 200, opened.text
    headers = ACCEPT | {"Mcp-Session-Id": opened.headers["mcp-session-id"], "Mcp-Protocol-Version": "2025-06-18"}
    if complete:
        httpx.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers, timeout=30)
    return headers


def result(response) -> dict:
    """The JSON-RPC message of a response (plain JSON or the SSE stream's data line)."""
    text = response.text
    if "data:" in text:
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    return json.loads(text)


def call(url, headers, name, arguments, timeout=60, id=2):
    return httpx.post(url, json={"jsonrpc": "2.0", "id": id, "method": "tools/call",
                                 "params": {"name": name, "arguments": arguments}}, headers=headers, timeout=timeout)


# -- item 8: sessions ---------------------------------------------------------------------------------------------
def test_sessions_never_initialized_end_soon_and_one_client_cannot_fill_the_server(tmp_path, scripted_reader):
    limits = SessionLimits(max_sessions=30, max_client_sessions=10, init_timeout=1.5)
    with mcp_server(tmp_path, scripted_reader(), limits) as (url, _, sessions):
        for _ in range(50):  # initialize, never followed up
            initialize(url, complete=False)
        # 10 kept, 40 refused (on a loaded machine the first may already have timed out)
        assert len(sessions.sessions) + sessions.ended.get("init_timeout", 0) == 10 and sessions.ended["client_cap"] == 40
        time.sleep(3)
        assert len(sessions.sessions) == 0 and sessions.ended["init_timeout"] == 10
        kept = [initialize(url) for _ in range(10)]  # complete sessions are kept ...
        refused = httpx.post(url, json=HELLO, headers=ACCEPT)  # ... and an 11th is refused, naming the flag
        assert refused.status_code == 429 and "--max-client-sessions" in refused.json()["error"]["message"]
        listed = httpx.post(url, json={"jsonrpc": "2.0", "id": 5, "method": "tools/list"}, headers=kept[0])
        assert {t["name"] for t in result(listed)["result"]["tools"]} == {"list_collections", "ask", "search"}
        assert httpx.delete(url, headers=kept[0]).status_code == 200  # a client that ends one may open another
        assert eventually(lambda: len(sessions.sessions) == 9)  # once the SDK has torn it down
        initialize(url)
        time.sleep(2)
        assert len(sessions.sessions) == 10  # complete sessions outlive the init timeout


def test_the_server_cap_ends_the_oldest_session_never_initialized(tmp_path, scripted_reader):
    limits = SessionLimits(max_sessions=5, max_client_sessions=100, init_timeout=60)
    with mcp_server(tmp_path, scripted_reader(), limits) as (url, _, sessions):
        idle = [initialize(url, complete=False) for _ in range(5)]
        fresh = initialize(url)  # a new client is served: the oldest idle session made room
        assert len(sessions.sessions) == 5 and sessions.ended["server_cap"] == 1
        gone = httpx.post(url, json={"jsonrpc": "2.0", "id": 5, "method": "tools/list"}, headers=idle[0])
        assert gone.status_code == 404  # ended as if its client had deleted it
        listed = httpx.post(url, json={"jsonrpc": "2.0", "id": 5, "method": "tools/list"}, headers=fresh)
        assert listed.status_code == 200 and result(listed)["result"]["tools"]


# -- item 9: resources --------------------------------------------------------------------------------------------
def test_a_resource_over_max_resource_mb_is_refused_and_one_under_is_read(tmp_path, scripted_reader):
    big, small = "x" * 300_000 + "\n", MANUAL
    with mcp_server(tmp_path, scripted_reader(), files={"big.txt": big, "small.txt": small},
                    max_resource_bytes=200_000) as (url, _, _sessions):
        headers = initialize(url)

        def read(name):
            return result(httpx.post(url, json={"jsonrpc": "2.0", "id": 7, "method": "resources/read",
                                                "params": {"uri": f"lcrag://collections/ops/files/{name}"}},
                                     headers=headers, timeout=30))

        refused = read("big.txt")
        assert "error" in refused and "--max-resource-mb" in refused["error"]["message"], refused
        assert len(json.dumps(refused)) < 1000
        assert read("small.txt")["result"]["contents"][0]["text"].startswith("Crane manual.")


# -- item 10: a client that leaves ------------------------------------------------------------------------------
def test_a_question_whose_mcp_client_left_is_cancelled(tmp_path, scripted_reader):
    release, started, seen = threading.Event(), threading.Event(), []

    def slow(messages):
        seen.append(messages[-1]["content"][-40:])
        started.set()
        release.wait(30)
        return "7781"

    with mcp_server(tmp_path, scripted_reader(slow)) as (url, server, _):
        first = threading.Thread(target=lambda: call(url, initialize(url), "ask", {
            "question": "Crane reset code?", "collection": "ops"}))
        first.start()
        assert started.wait(30)
        with pytest.raises(httpx.ReadTimeout):  # this client gives up while the first question holds the reader
            call(url, initialize(url), "ask", {"question": "Which valves leak?", "collection": "ops"}, timeout=1)
        time.sleep(1)  # the server notices the disconnect (it polls every 0.2 s)
        release.set()
        first.join()
        time.sleep(1)
        assert len(seen) == 1  # the second question was dropped from the queue, never sent to the reader
        assert server.questions.metrics.cancelled._value.get() == 1


def test_an_mcp_cancel_stops_the_questions_work(tmp_path, scripted_reader):
    """notifications/cancelled for a tools/call ask in progress: the question's listener is cancelled, so its work
    (here a reader that honours the cancel, as a streaming one does) stops at once."""
    started, stopped = threading.Event(), threading.Event()

    def until_cancelled(messages):
        started.set()
        if streaming.current().cancelled.wait(30):
            stopped.set()
            raise streaming.Cancelled("the question was cancelled")
        return "7781"

    with mcp_server(tmp_path, scripted_reader(until_cancelled)) as (url, server, _):
        headers = initialize(url)
        asking = threading.Thread(target=lambda: call(url, headers, "ask", {
            "question": "Crane reset code?", "collection": "ops"}, timeout=30, id=7))
        asking.start()
        assert started.wait(30)
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7, "reason": "t"}}
        assert httpx.post(url, json=cancel, headers=headers, timeout=30).status_code == 202
        assert stopped.wait(5)  # the cancel reached the work: not left to run until it ends by itself
        asking.join(30)
        assert eventually(lambda: server.questions.metrics.cancelled._value.get() == 1)


# -- items 7, 13 and 14 over MCP ----------------------------------------------------------------------------------
def test_mcp_over_http_has_the_header_timeout_json_413_and_surrogate_errors(tmp_path, scripted_reader):
    with mcp_server(tmp_path, scripted_reader(), connections=ConnectionLimits(header_timeout=1),
                    max_body_bytes=10_000) as (url, server, _sessions):
        port = int(url.split(":")[2].split("/")[0])
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            sock.settimeout(5)
            got = sock.recv(4096)
        assert got.startswith(b"HTTP/1.1 408 ") and b"lcrag mcp --header-timeout" in got, got
        refused = httpx.post(url, content=b"{" + b" " * 20_000 + b"}", headers=ACCEPT)
        assert refused.status_code == 413 and "lcrag mcp --max-body-kb" in refused.json()["error"]["message"]
        headers = initialize(url)
        for tool, arguments, field in [("ask", '{"question": "a\\ud800", "collection": "ops"}', "question"),
                                       ("search", '{"query": "b\\udc00", "collection": "ops"}', "query")]:
            sent = f'{{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {{"name": "{tool}", ' \
                   f'"arguments": {arguments}}}}}'
            answer = result(httpx.post(url, content=sent, headers=headers, timeout=30))
            # Refused by the SDK's JSON parser (pydantic-core refuses lone surrogates), or, where it lets them
            # through, by lcrag as a tool error naming the argument.
            if "error" in answer:
                assert answer["error"]["code"] == -32700, answer
            else:
                text = answer["result"]["content"][0]["text"]
                assert answer["result"]["isError"] and f"{field}: not valid Unicode text" in text, answer
        listed = httpx.post(url, json={"jsonrpc": "2.0", "id": 5, "method": "tools/list"}, headers=headers)
        assert listed.status_code == 200 and result(listed)["result"]["tools"]
        for call_tool, arguments, field in [(server.ask, {"question": "a\ud800", "collection": "ops"}, "question"),
                                            (server.search, {"query": "b\udc00", "collection": "ops"}, "query")]:
            with pytest.raises(ToolError, match=f"^{field}: not valid Unicode text"):
                asyncio.run(call_tool(**arguments))
