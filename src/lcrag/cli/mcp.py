"""`lcrag mcp`: the collections as a Model Context Protocol server for agents, over stdio or streamable HTTP, with
the same reader, collections, limits and rules for whom it answers as `lcrag serve`."""

from __future__ import annotations

import os
import re
from importlib import metadata
from typing import Annotated

import typer

from lcrag.cli.engine import check_bind, check_key, engine, request_limits
from lcrag.cli.service_flags import ServiceFlags, with_service_flags
from lcrag.core.errors import OptionError
from lcrag.service.keys import AUDIT_RETENTION_SECONDS
from lcrag.service.limits import Limits

TRANSPORTS = ("stdio", "http")
SDK_VERSIONS = ((1, 10), (3, 0))  # the MCP SDK lcrag mcp runs on: 1.x from 1.10 (structured output) and 2.x


@with_service_flags(port=8001)
def mcp(
    transport: Annotated[str, typer.Option("--transport", help="stdio (the client starts lcrag mcp) or http (streamable HTTP at /mcp).")] = "stdio",
    max_resource_mb: Annotated[float, typer.Option("--max-resource-mb", help="Largest resource (a file's extracted text) a read returns; larger ones are refused (use search).", min=0.001)] = 8,
    max_sessions: Annotated[int, typer.Option("--max-sessions", help="HTTP: MCP sessions open in all; beyond, the oldest one not yet initialized ends (503 when all are).", min=1)] = 1000,
    max_client_sessions: Annotated[int, typer.Option("--max-client-sessions", help="HTTP: MCP sessions one address may hold (429 beyond, once its uninitialized ones are ended).", min=1)] = 32,
    session_init_timeout: Annotated[float, typer.Option("--session-init-timeout", help="HTTP: seconds a new session has for its client to come back after initialize.", min=0.1)] = 10,
    session_idle_timeout: Annotated[float, typer.Option("--session-idle-timeout", help="HTTP: seconds a session may go without a request before it ends.", min=1)] = 600,
    *,
    flags: ServiceFlags,
) -> None:
    """Serve the collections to agents over the Model Context Protocol: tools list_collections, ask and search, and
    the collections' files as resources."""
    if transport not in TRANSPORTS:
        raise OptionError(f"--transport: one of {', '.join(TRANSPORTS)}, got {transport!r}")
    check_key(flags.api_key)
    from lcrag.service.mcp.sessions import SessionLimits

    sessions = SessionLimits(max_sessions=max_sessions, max_client_sessions=max_client_sessions,
                             init_timeout=session_init_timeout, idle_timeout=session_idle_timeout)
    connections = flags.connection_limits()
    LcragMCP = mcp_server_class()
    answering = engine(flags)
    if transport == "http":
        check_bind(flags.host, flags.api_key, "serve MCP on", answering)  # keys added to the store protect it too
    limits = request_limits(flags, answering.retrievers, max_resource_bytes=int(max_resource_mb * 1024 * 1024))
    server = LcragMCP(answering, limits, sessions)
    try:
        if transport == "stdio":
            server.run("stdio")  # stdout carries the protocol alone: lcrag logs to stderr
        else:
            from lcrag.service.http.server import run

            typer.echo(f"lcrag MCP at http://{flags.host}:{flags.port}/mcp (collections in "
                       f"{answering.collections.root})", err=True)
            server.hold_streams()  # a tool call in progress is drained like any request, not cut at the signal
            run(http_app(server, flags.api_key, limits, sessions, flags.audit_retention), flags.host, flags.port, connections,
                os.environ.get("LCRAG_SERVE_LOG", "warning"), "lcrag mcp", shutdown_seconds=flags.shutdown_seconds,
                stop_work=server.stop_work, close=answering.close)
    finally:
        answering.close()


def http_app(server, api_key: str | None, limits: Limits, sessions=None,
             audit_retention: float = AUDIT_RETENTION_SECONDS):
    """The streamable HTTP app of ``server`` (an LcragMCP) as `lcrag mcp --transport http` serves it: the service's
    guard in front (Host names against DNS rebinding, the key, no cross-site writes, JSON bodies, JSON errors), the
    body limit as JSON, and the sessions bounded (:mod:`lcrag.service.mcp.sessions`)."""
    from lcrag.service.http.guard import BodyLimits, Guard
    from lcrag.service.keys import keys_for
    from lcrag.service.mcp.sessions import Sessions
    from lcrag.service.metrics import Metrics

    app = Sessions(server.streamable_http_app(), sessions, "lcrag mcp")
    app = BodyLimits(app, limits, "lcrag mcp", uploads=False)
    # The people's keys of lcrag keys too (the same store as lcrag serve's): each call sees its key's collections.
    return Guard(app, api_key=api_key, limits=limits, metrics=Metrics(), keys=keys_for(server.answering.collections, audit_retention))


def sdk_version() -> str | None:
    """The installed MCP SDK's version (the ``mcp`` distribution), or None when there is none."""
    try:
        return metadata.version("mcp")
    except metadata.PackageNotFoundError:
        return None


def supported(version: str) -> bool:
    numbers = re.match(r"(\d+)\.(\d+)", version)
    return numbers is not None and SDK_VERSIONS[0] <= (int(numbers[1]), int(numbers[2])) < SDK_VERSIONS[1]


def mcp_server_class():
    """:class:`lcrag.service.mcp.tools.LcragMCP`, else one line saying what to install: the SDK when there is none, a
    supported one, naming the version found, when it is too old or too new or fails to import."""
    found = sdk_version()
    if found is not None and not supported(found):
        raise OptionError(f"lcrag mcp needs the MCP SDK 1.10 or newer (1.x or 2.x); found mcp {found}: "
                          "pip install -U 'lcrag[mcp]'")
    try:
        from lcrag.service.mcp.tools import LcragMCP
    except ImportError as exc:  # none, or a supported version with a part missing (a dependency, say)
        if found is None:
            raise OptionError("lcrag mcp needs the MCP SDK: pip install -e '.[mcp]' in lcrag's checkout") from None
        raise OptionError(f"lcrag mcp cannot load the MCP SDK (found mcp {found}): "
                          f"{' '.join(str(exc).split())[:300]}: pip install -U 'lcrag[mcp]'") from None
    return LcragMCP
