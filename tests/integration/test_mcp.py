"""`lcrag mcp` through the official MCP client, over stdio and streamable HTTP, on a collection made by a real
`lcrag serve` in the same cache directory: tools listed, `search` and `ask` with structured results, a file read as a
resource, bad arguments as tool errors with the server still answering, and the HTTP transport behind the key (with
``--store`` on a shared PostgreSQL: tests/system/test_mcp.py).

lcrag mcp runs on both majors of the SDK, 1.x and 2.x, so the server is tested on each: on the one installed (the
newest, by the test extra) and on the other, installed apart for these tests (``pip install --target``, only what the
environment lacks for it) and put first on the server process's path. The client is the installed major throughout."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from importlib import metadata

import httpx
import pytest
from document_fixtures import tool_manual
from mcp_sessions import over_stdio, run_file, server_path, tools_search_ask_and_a_resource, wire
from service_fixtures import free_port, lcrag_process, wait_ready

pytest.importorskip("mcp")
KEY = "mcp-test-key"
INSTALLED = int(metadata.version("mcp").split(".")[0])
OTHER = 2 if INSTALLED == 1 else 1
REQUIREMENT = {1: "mcp>=1.10,<2", 2: "mcp>=2,<3"}


@pytest.fixture(scope="session")
def other_sdk(tmp_path_factory) -> str:
    """A directory holding the SDK's other major and what this environment lacks for it, as pip would install them
    here (its resolver, over the installed packages), so that the rest stays the environment's own."""
    target = tmp_path_factory.mktemp(f"mcp-{OTHER}.x")
    report = tmp_path_factory.mktemp("pip-report") / "report.json"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    done = subprocess.run([*pip, "--dry-run", "--report", str(report), REQUIREMENT[OTHER]], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"pip cannot resolve {REQUIREMENT[OTHER]} (PyPI needed): {done.stderr[-2000:]}"
    pins = [f"{item['metadata']['name']}=={item['metadata']['version']}"
            for item in json.loads(report.read_text())["install"]]
    assert any(pin.lower().startswith("mcp==") for pin in pins), pins
    done = subprocess.run([*pip, "--no-deps", "--target", str(target), *pins], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    probe = subprocess.run([sys.executable, "-c", "import lcrag.service.mcp.tools as m, lcrag.cli.mcp as c; "
                            "print(m.SDK_MAJOR, c.sdk_version())"], capture_output=True, text=True, timeout=120,
                           env=os.environ | server_path(str(target)))
    assert probe.returncode == 0, probe.stderr
    major, version = probe.stdout.split()
    assert int(major) == OTHER and version.startswith(f"{OTHER}."), probe.stdout  # this major is what the server runs
    return str(target)


@pytest.fixture(params=[INSTALLED, OTHER], ids=lambda major: f"server-mcp{major}")
def sdk_dir(request) -> str | None:
    """The SDK the server runs on: the installed one (None: nothing added), or the other major's directory."""
    return None if request.param == INSTALLED else request.getfixturevalue("other_sdk")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """A cache directory holding the collection "tool" (the tool manual), made through `lcrag serve`."""
    tmp = tmp_path_factory.mktemp("mcp")
    manual = tool_manual(tmp)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with lcrag_process("serve", "--port", str(port), url=url, cache_dir=tmp / "cache"):
        assert httpx.post(f"{url}/v1/collections", json={"name": "tool"}).status_code == 201
        with manual.open("rb") as f:
            assert httpx.post(f"{url}/v1/collections/tool/files", files={"file": ("manual.md", f)}).status_code == 201
        assert wait_ready(url, "tool", timeout=300)["state"] == "ready"
    (tmp / "run.toml").write_text('[chunking]\nchunking = "words:60"\n')  # a passage per command, for lcrag mcp
    return tmp / "cache"


def test_tools_search_ask_and_resources_over_stdio(cache_dir, sdk_dir):
    tools, listed, found, answered, resources, read = over_stdio(cache_dir, tools_search_ask_and_a_resource, sdk_dir)
    listed, found, answered = wire(listed), wire(found), wire(answered)
    assert set(tools) == {"list_collections", "ask", "search"} and wire(tools["ask"])["outputSchema"] is not None
    assert [c["name"] for c in listed["structuredContent"]["collections"]] == ["tool"]
    top = found["structuredContent"]["passages"][0]
    assert not found["isError"] and top["file"] == "manual.md" and top["section"] == ["The fit command"]
    assert "L-BFGS" in top["snippet"] and len(found["structuredContent"]["passages"]) == 2
    result = answered["structuredContent"]
    assert not answered["isError"] and result["answer"].strip() and result["route"] == "rag"
    assert result["usage"]["prompt_tokens"] > 0 and result["cost"]["currency"] == "USD"
    assert result["sources"][0]["file"] == "manual.md" and result["sources"][0]["section"] == ["The fit command"]
    assert [str(r.uri) for r in resources] == ["lcrag://collections/tool/files/manual.md"]
    assert read.contents[0].text.startswith("# The fit command")


async def bad_arguments_then_a_good_call(session):
    bad = [await session.call_tool("search", {"query": "fit", "collection": "nope"}),
           await session.call_tool("search", {"query": "fit", "collection": "tool", "k": 0}),
           await session.call_tool("ask", {"question": "fit?", "collection": "tool", "k": 0}),
           await session.call_tool("ask", {"question": "x" * 1_000_000, "collection": "tool"}),
           await session.call_tool("ask", {"question": "fit?", "collection": "tool", "strategy": "nope"}),
           await session.call_tool("ask", {"question": "fit?", "collection": "../../etc"})]
    try:
        await session.read_resource("lcrag://collections/tool/files/..%2F..%2Fetc%2Fpasswd")
        unread = None
    except Exception as exc:  # the SDK raises the server's error
        unread = str(exc)
    return bad, unread, await session.call_tool("list_collections", {})


def test_bad_arguments_are_tool_errors_and_the_server_goes_on(cache_dir, sdk_dir):
    bad, unread, after = over_stdio(cache_dir, bad_arguments_then_a_good_call, sdk_dir)
    bad, after = [wire(r) for r in bad], wire(after)
    messages = [r["content"][0]["text"] for r in bad]
    assert all(r["isError"] for r in bad), messages
    for message, expected in zip(messages, ["unknown collection 'nope'", "k: between 1 and 100, got 0",
                                            "k: Input should be greater than or equal to 1",
                                            "the question is 1,000,000 characters", "strategy", "collection"]):
        assert expected in message and "\n" not in message and "Traceback" not in message, message
    # Refused, never read: by lcrag ("no file '../../etc/passwd' in 'tool'"), or before it by the 2.x SDK's path check.
    assert unread is not None and ("no file '../../etc/passwd'" in unread or "Unknown resource" in unread), unread
    assert "root:" not in unread
    assert not after["isError"] and after["structuredContent"]["collections"][0]["name"] == "tool"


def test_streamable_http_needs_the_key_and_answers_with_it(cache_dir, sdk_dir, monkeypatch):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    client_http = pytest.importorskip("httpx2") if INSTALLED >= 2 else httpx  # the 2.x client is on httpx2
    for name, value in server_path(sdk_dir).items():  # lcrag_process passes this process's environment on
        monkeypatch.setenv(name, value)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with lcrag_process("mcp", "--transport", "http", "--port", str(port), "--api-key", KEY, "--config",
                       run_file(cache_dir), url=url,
                       cache_dir=cache_dir):
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
        accept = {"Accept": "application/json, text/event-stream"}
        assert httpx.post(f"{url}/mcp", json=hello, headers=accept).status_code == 401
        assert httpx.post(f"{url}/mcp", json=hello, headers=accept | {"Authorization": "Bearer wrong"}).status_code == 401
        foreign = httpx.post(f"{url}/mcp", json=hello, headers=accept | {"Authorization": f"Bearer {KEY}",
                                                                          "Host": "attacker.example"})
        assert foreign.status_code == 400

        async def run():
            keyed = client_http.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=300)
            async with keyed, streamable_http_client(f"{url}/mcp", http_client=keyed) as streams, \
                    ClientSession(*streams[:2]) as session:  # 1.x adds a third: the session id's getter
                await session.initialize()
                return await session.call_tool("search", {"query": "export format", "collection": "tool", "k": 1})

        found = wire(asyncio.run(run()))
        assert not found["isError"] and found["structuredContent"]["passages"][0]["section"] == ["The export command"]


def test_mcp_over_http_on_another_address_needs_a_key(cache_dir):
    import subprocess

    done = subprocess.run([sys.executable, "-m", "lcrag.cli", "mcp", "--transport", "http", "--host", "0.0.0.0",
                           "--cache-dir", str(cache_dir)],  # its own: keys added to a cache directory would do
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "set --api-key" in done.stderr and len(done.stderr.strip().splitlines()) == 1
