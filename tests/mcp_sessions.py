"""Driving `lcrag mcp` through the official MCP client over stdio, shared by the integration tier (a collection in a
cache directory) and the system tier (a collection on a shared PostgreSQL store)."""

from __future__ import annotations

import asyncio
import os
import sys


def server_path(sdk_dir: str | None) -> dict[str, str]:
    """PYTHONPATH for the server process: ``sdk_dir`` first, when given, then this process's own, if any."""
    path = os.pathsep.join(filter(None, [sdk_dir, os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path} if path else {}


def wire(result) -> dict:
    """A result as it crossed the wire, with the protocol's camelCase names: the 2.x client names the fields in
    snake_case (structured_content), 1.x as the protocol does (structuredContent)."""
    return result.model_dump(mode="json", by_alias=True)


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


