"""Keys per person on a real PostgreSQL (started by the tests) under two real `lcrag serve` replicas and a `lcrag mcp`
over streamable HTTP, keys added with `lcrag keys add --store`: a reader key cannot delete (403); a key scoped to
team-a* cannot list, ask or read team-b on either replica, nor see it in MCP's tools and resources; a key revoked
through one replica is refused by the other within a second; the audit log, read through either, says who uploaded
and who deleted (issue 43, item 5)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import ExitStack

import httpx
from postgres_fixtures import database, postgres  # noqa: F401 - fixtures
from service_fixtures import free_port, lcrag_process

OPERATOR = "operator-key-0123456789"


def replica(stack: ExitStack, tmp_path, name: str, command: str, *args: str) -> str:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    stack.enter_context(lcrag_process(command, "--port", str(port), "--api-key", OPERATOR, *args, url=url,
                                      cache_dir=tmp_path / name))
    return url


def add_key(database: str, tmp_path, name: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "lcrag.cli", "keys", "add", name, *args, "--store", database,
                           "--cache-dir", str(tmp_path / "cli")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return {"Authorization": f"Bearer {done.stdout.strip()}"}


def mcp_session(url: str, headers: dict):
    """A function ``call(method, params)`` over one initialized MCP session at ``url``/mcp (plain JSON-RPC over
    streamable HTTP: a reply is JSON or one server-sent event)."""
    headers = headers | {"Accept": "application/json, text/event-stream"}
    ids = iter(range(1, 1000))

    def post(message: dict) -> httpx.Response:
        return httpx.post(f"{url}/mcp", json=message, headers=headers, timeout=120)

    def reply(response: httpx.Response) -> dict:
        assert response.status_code == 200, response.text
        if response.headers["content-type"].startswith("text/event-stream"):
            return json.loads([line[5:] for line in response.text.splitlines() if line.startswith("data:")][-1])
        return response.json()

    hello = post({"jsonrpc": "2.0", "id": next(ids), "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
    reply(hello)
    headers |= {"Mcp-Session-Id": hello.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-06-18"}
    post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return lambda method, params=None: reply(post({"jsonrpc": "2.0", "id": next(ids), "method": method,
                                                   "params": params or {}}))


def test_keys_on_two_replicas_and_mcp_over_one_postgresql(database, tmp_path):
    rita = add_key(database, tmp_path, "rita", "--role", "reader", "--collections", "team-a*")
    wendy = add_key(database, tmp_path, "wendy", "--role", "writer", "--collections", "team-a*")
    operator = {"Authorization": f"Bearer {OPERATOR}"}
    with ExitStack() as stack:
        a = replica(stack, tmp_path, "a", "serve", "--store", database)
        b = replica(stack, tmp_path, "b", "serve", "--store", database)
        for name in ("team-a", "team-b"):
            assert httpx.post(f"{a}/v1/collections", json={"name": name}, headers=operator).status_code == 201
        assert httpx.post(f"{b}/v1/collections/team-b/files", files={"file": ("b.txt", b"Team B's secret plan.")},
                          headers=operator).status_code == 201
        assert httpx.post(f"{b}/v1/collections/team-a/files", files={"file": ("a.txt", b"Team A's open plan.")},
                          headers=wendy).status_code == 201
        assert httpx.post(f"{a}/v1/collections/team-a/files", files={"file": ("gone.txt", b"Soon deleted.")},
                          headers=wendy).status_code == 201
        assert httpx.delete(f"{b}/v1/collections/team-a/files/gone.txt", headers=wendy).status_code == 200
        for url in (a, b):
            _a_reader_cannot_delete(url, rita)
            _team_a_never_sees_team_b(url, rita)
        mcp = replica(stack, tmp_path, "mcp", "mcp", "--transport", "http", "--store", database)
        _mcp_shows_only_team_a(mcp, rita)
        _revoked_through_one_refused_by_the_other(a, b, rita, operator)
        log = httpx.get(f"{b}/v1/audit", headers=operator).json()["data"]
    changes = [(e["actor"], e["action"], e["collection"], (e["detail"] or "").split(" ")[0]) for e in log]
    assert changes[:6] == [("api-key", "key.revoke", None, "rita"), ("wendy", "file.delete", "team-a", "gone.txt"),
                           ("wendy", "file.upload", "team-a", "gone.txt"), ("wendy", "file.upload", "team-a", "a.txt"),
                           ("api-key", "file.upload", "team-b", "b.txt"),
                           ("api-key", "collection.create", "team-b", "")]
    assert ("cli", "key.add", None, "rita") in changes and ("cli", "key.add", None, "wendy") in changes


def _a_reader_cannot_delete(url: str, rita: dict) -> None:
    for response in (httpx.delete(f"{url}/v1/collections/team-a/files/a.txt", headers=rita),
                     httpx.delete(f"{url}/v1/collections/team-a", headers=rita),
                     httpx.post(f"{url}/v1/collections/team-a/files", files={"file": ("r.txt", b"r")}, headers=rita)):
        assert response.status_code == 403 and response.json()["error"]["type"] == "permission_error", response.text
    assert [f["name"] for f in httpx.get(f"{url}/v1/collections/team-a", headers=rita).json()["files"]] == ["a.txt"]


def _team_a_never_sees_team_b(url: str, rita: dict) -> None:
    assert [c["name"] for c in httpx.get(f"{url}/v1/collections", headers=rita).json()["data"]] == ["team-a"]
    for response in (httpx.get(f"{url}/v1/collections/team-b", headers=rita),
                     httpx.get(f"{url}/v1/collections/team-b/files/b.txt", headers=rita),
                     httpx.post(f"{url}/v1/ask", json={"collection": "team-b", "question": "What is the plan?"},
                                headers=rita, timeout=120)):
        assert response.status_code == 404 and "secret" not in response.text, response.text
        assert response.json()["error"]["message"] == "unknown collection 'team-b'"


def _mcp_shows_only_team_a(url: str, rita: dict) -> None:
    call = mcp_session(url, rita)
    resources = call("resources/list")["result"]["resources"]
    assert [r["uri"] for r in resources] == ["lcrag://collections/team-a/files/a.txt"]
    listed = call("tools/call", {"name": "list_collections", "arguments": {}})["result"]
    assert [c["name"] for c in listed["structuredContent"]["collections"]] == ["team-a"]
    read = call("resources/read", {"uri": "lcrag://collections/team-b/files/b.txt"})
    assert "secret" not in json.dumps(read) and "unknown collection 'team-b'" in json.dumps(read)
    searched = call("tools/call", {"name": "search", "arguments": {"query": "plan", "collection": "team-b"}})
    assert searched["result"]["isError"] and "secret" not in json.dumps(searched)
    assert "Team A" in call("resources/read", {"uri": "lcrag://collections/team-a/files/a.txt"})["result"][
        "contents"][0]["text"]


def _revoked_through_one_refused_by_the_other(a: str, b: str, rita: dict, operator: dict) -> None:
    assert httpx.get(f"{b}/v1/collections", headers=rita).status_code == 200  # b's copy holds the key
    assert httpx.delete(f"{a}/v1/keys/rita", headers=operator).json() == {"revoked": "rita"}
    deadline = time.monotonic() + 60  # a hang guard: replica b refreshes its copy every second, and how soon is not
    while httpx.get(f"{b}/v1/collections", headers=rita).status_code != 401:  # a test's to time
        assert time.monotonic() < deadline, "replica b still takes the revoked key"
        time.sleep(0.02)
    assert httpx.get(f"{a}/v1/collections", headers=rita).status_code == 401

