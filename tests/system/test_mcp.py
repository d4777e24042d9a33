"""`lcrag mcp` through the official MCP client, over stdio and streamable HTTP, on a collection made by a real
`lcrag serve` in the same cache directory: tools listed, `search` and `ask` with structured results, a file read as a
resource, bad arguments as tool errors with the server still answering, and the HTTP transport behind the key; with
``--store``, a collection a `lcrag serve` replica uploaded to a shared PostgreSQL.

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
from postgres_fixtures import database, postgres  # noqa: F401 - fixtures
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


def server_path(sdk_dir: str | None) -> dict[str, str]:
    """PYTHONPATH for the server process: ``sdk_dir`` first, when given, then this process's own, if any."""
    path = os.pathsep.join(filter(None, [sdk_dir, os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path} if path else {}


@pytest.fixture(params=[INSTALLED, OTHER], ids=lambda major: f"server-mcp{major}")
def sdk_dir(request) -> str | None:
    """The SDK the server runs on: the installed one (None: nothing added), or the other major's directory."""
    return None if request.param == INSTALLED else request.getfixturevalue("other_sdk")


def wire(result) -> dict:
    """A result as it crossed the wire, with the protocol's camelCase names: the 2.x client names the fields in
    snake_case (structured_content), 1.x as the protocol does (structuredContent)."""
    return result.model_dump(mode="json", by_alias=True)


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


def run_file(cache_dir) -> str:
    return str(cache_dir.parent / "run.toml")


def over_stdio(cache_dir, session_does, sdk_dir=None, *extra: str):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def run():
        params = StdioServerParameters(command=sys.executable, args=["-m", "lcrag.cli", "mcp", "--cache-dir",
                                                                     str(cache_dir), "--config", run_file(cache_dir),
                                                                     *extra],
                                       env=server_path(sdk_dir) or None)  # added to the SDK's default one
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await session_does(session)

    return asyncio.run(run())


async def tools_search_ask_and_a_resource(session):
    tools = {t.name: t for t in (await session.list_tools()).tools}
    listed = await session.call_tool("list_collections", {})
    found = await session.call_tool("search", {"query": "Which algorithm does the fit command use?",
                                               "collection": "tool", "k": 2})
    answered = await session.call_tool("ask", {"question": "Which algorithm does the fit command use?",
                                               "collection": "tool", "strategy": "rag", "k": 1})
    resources = (await session.list_resources()).resources
    read = await session.read_resource(resources[0].uri)
    return tools, listed, found, answered, resources, read


def test_over_a_shared_store_mcp_answers_what_a_serve_replica_uploaded(database, tmp_path):
    """`lcrag mcp --store postgresql://…` on its own cache directory: a collection uploaded through a `lcrag serve`
    replica on the same database (another machine, in effect) is listed, searched, asked and read as a resource."""
    (tmp_path / "run.toml").write_text('[chunking]\nchunking = "words:60"\n')
    manual = tool_manual(tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with lcrag_process("serve", "--port", str(port), "--config", str(tmp_path / "run.toml"), "--store", database,
                       url=url, cache_dir=tmp_path / "replica"):
        httpx.post(f"{url}/v1/collections", json={"name": "tool"}).raise_for_status()
        httpx.post(f"{url}/v1/collections/tool/files",
                   files={"file": ("manual.md", manual.read_bytes())}).raise_for_status()
        assert wait_ready(url, "tool", timeout=300)["state"] == "ready"
    agent_cache = tmp_path / "agent" / "cache"  # run_file(agent_cache) is tmp_path/agent/run.toml
    agent_cache.mkdir(parents=True)
    (tmp_path / "agent" / "run.toml").write_text((tmp_path / "run.toml").read_text())
    tools, listed, found, answered, resources, read = over_stdio(agent_cache, tools_search_ask_and_a_resource, None,
                                                                 "--store", database)
    listed, found, answered = wire(listed), wire(found), wire(answered)
    assert [c["name"] for c in listed["structuredContent"]["collections"]] == ["tool"]
    top = found["structuredContent"]["passages"][0]
    assert not found["isError"] and top["file"] == "manual.md" and "L-BFGS" in top["snippet"]
    assert not answered["isError"] and answered["structuredContent"]["sources"][0]["file"] == "manual.md"
    assert [str(r.uri) for r in resources] == ["lcrag://collections/tool/files/manual.md"]
    assert read.contents[0].text.startswith("# The fit command")
