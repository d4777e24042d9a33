"""`lcrag mcp --store postgresql://…` through the official MCP client over stdio: a collection a `lcrag serve` replica
uploaded to a shared PostgreSQL is listed, searched, asked and read as a resource (the client and server on one cache
directory each are tests/integration/test_mcp.py)."""

from __future__ import annotations

import httpx
import pytest
from document_fixtures import tool_manual
from mcp_sessions import over_stdio, tools_search_ask_and_a_resource, wire
from postgres_fixtures import database, postgres  # noqa: F401 - fixtures
from service_fixtures import free_port, lcrag_process, wait_ready

pytest.importorskip("mcp")


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
