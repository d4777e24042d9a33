"""Cancellation reaches the work of a real `lcrag serve` / `lcrag mcp --transport http` on loopback, answering from
a stand-in reader that streams a long answer slowly (tests/reader_servers.Stub): SIGTERM drains for
--shutdown-seconds, then stops the question (503 to its client, the reader's stream closed) and the process exits,
leaving none of its processes (the parse sandbox's fork server, multiprocessing's resource tracker); a client that
leaves mid-answer closes the reader's stream."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from reader_servers import Stub
from service_fixtures import free_port, wait_ready

from lcrag.service.http.server import STOP_GRACE

MANUAL = "Crane manual.\nThe reset code of the crane is 7781.\nThe hoist limit of the crane is 12 tonnes.\n"
QUESTION = {"collection": "ops", "question": "Crane reset code?", "strategy": "rag"}
SHUTDOWN_SECONDS = 2
MCP_ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def slow_reader():
    """A reader whose every answer is 2,000 words streamed at 20 a second (100 s): a question that outlasts a test."""
    reader = Stub(answer=lambda prompt: " ".join(f"w{n}" for n in range(2000)))
    reader.token_delay = 0.05
    try:
        yield reader
    finally:
        reader.kill()


def start(command: str, reader: Stub, tmp_path: Path) -> tuple[subprocess.Popen, str]:
    """`lcrag serve` (or `lcrag mcp --transport http`) with one collection "ops" indexed, and its base URL; the
    collection is made by a `lcrag serve` first when the command is mcp (they share the cache directory)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    transport = ["--transport", "http"] if command == "mcp" else []
    args = [sys.executable, "-m", "lcrag.cli", command, *transport, "--port", str(port), "--cache-dir",
            str(tmp_path / "cache"), "--llm", "openai:stand-in", "--base-url", reader.url, "--context-window", "8192",
            "--shutdown-seconds", str(SHUTDOWN_SECONDS)]
    process = subprocess.Popen(args, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    for _ in range(600):
        if process.poll() is not None:
            raise AssertionError(f"lcrag {command} exited: {process.stderr.read()}")
        try:
            httpx.get(f"{url}/healthz" if command == "serve" else f"{url}/mcp", timeout=1)
            return process, url
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise TimeoutError(f"lcrag {command} did not start")


def with_collection(tmp_path: Path, reader: Stub) -> None:
    process, url = start("serve", reader, tmp_path)
    try:
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"}).status_code == 201
        assert httpx.post(f"{url}/v1/collections/ops/files", files={"file": ("manual.txt", MANUAL)}).status_code == 201
        assert wait_ready(url, "ops")["state"] == "ready"
    finally:
        process.terminate()
        process.wait(30)


def descendants(pid: int) -> set[int]:
    """Every process under ``pid`` now (children, theirs, ...), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (an exited one its parent never waited for, a zombie, is not)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def command_line(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return "(gone)"


def ask_mcp(url: str) -> httpx.Response:
    opened = httpx.post(f"{url}/mcp", headers=MCP_ACCEPT, timeout=30, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
    headers = MCP_ACCEPT | {"Mcp-Session-Id": opened.headers["mcp-session-id"], "Mcp-Protocol-Version": "2025-06-18"}
    httpx.post(f"{url}/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    return httpx.post(f"{url}/mcp", headers=headers, timeout=120, json={
        "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "ask", "arguments": QUESTION}})


@pytest.mark.parametrize("command", ["serve", "mcp"])
def test_sigterm_stops_a_long_question_after_the_drain_and_the_server_exits_leaving_no_process(
        command, slow_reader, tmp_path):
    with_collection(tmp_path, slow_reader)
    process, url = start(command, slow_reader, tmp_path)
    replies: list[httpx.Response] = []
    asking = threading.Thread(target=lambda: replies.append(
        httpx.post(f"{url}/v1/ask", json=QUESTION, timeout=120) if command == "serve" else ask_mcp(url)))
    try:
        asking.start()
        deadline = time.monotonic() + 60
        while not slow_reader.chats and time.monotonic() < deadline:  # the question is at the reader
            time.sleep(0.05)
        assert slow_reader.chats, "the question never reached the reader"
        helpers = descendants(process.pid)
        assert helpers  # the sandbox's fork server and the resource tracker at least
        process.send_signal(signal.SIGTERM)
        process.wait(SHUTDOWN_SECONDS + STOP_GRACE + 10)  # a server that does not exit fails here
        asking.join(10)
    finally:
        if process.poll() is None:
            process.kill()
    log = process.stderr.read()
    assert "Traceback" not in log, log
    # The fork server and resource tracker end when their parent does (they read its end of a pipe): none is left.
    deadline = time.monotonic() + 5
    while [pid for pid in helpers if running(pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    left = {pid: command_line(pid) for pid in helpers if running(pid)}
    assert not left, left
    assert slow_reader.streams_closed == 1  # the reader's generation was stopped, not left to run
    reply = replies[0]
    if command == "serve":
        assert reply.status_code == 503, reply.text
        assert reply.json()["error"]["message"].startswith("the server is shutting down")
    else:
        assert "the server is shutting down" in reply.text and '"isError":true' in reply.text.replace(" ", "")


def test_a_question_whose_http_client_left_mid_answer_closes_the_readers_stream(slow_reader, tmp_path):
    with_collection(tmp_path, slow_reader)
    process, url = start("serve", slow_reader, tmp_path)
    try:
        body = json.dumps(QUESTION).encode()
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as client:
            client.sendall(b"POST /v1/ask HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            deadline = time.monotonic() + 60
            while not slow_reader.chats and time.monotonic() < deadline:  # the answer is being written
                time.sleep(0.05)
            assert slow_reader.chats, "the question never reached the reader"
        # the client has left
        deadline = time.monotonic() + 10
        while slow_reader.streams_closed == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert slow_reader.streams_closed == 1  # the service noticed, and closed the reader's stream
        assert "lcrag_cancelled_total 1.0" in httpx.get(f"{url}/metrics").text
    finally:
        process.terminate()
        process.wait(30)
