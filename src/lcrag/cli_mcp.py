"""`lcrag mcp`: the collections as a Model Context Protocol server for agents, over stdio or streamable HTTP, with
the same reader, collections, limits and rules for whom it answers as `lcrag serve`."""

from __future__ import annotations

import os
import re
from importlib import metadata
from typing import Annotated

import typer

from lcrag.cli_serve import (AllowedHosts, ApiKey, BaseUrl, BodyMinRate, BodyTimeout, CacheDir, ContextWindow,
                             HeaderTimeout, Host, IndexMemory, KeepAlive, Llm, MaxBody, MaxCharsPerByte,
                             MaxClientConnections, MaxConnections, MaxDocumentChars, MaxHeader, MaxParseMb,
                             MaxParseSeconds,
                             MaxQuestion, MaxTokens, MaxWaiting, ParseWorkers, PartOptions, Port, PriceAs, Prices,
                             PoolBackoff, PoolMaxBackoff, Retrievers, Routers, RunFile, ServerSlots, ShutdownSeconds,
                             Strategies, Threads,
                             allowed_strategies, check_bind, check_key,
                             connection_limits, engine)
from lcrag.cli_serve import (JOB_RETENTION_SECONDS, IndexWorkers, JobLease, JobRetention, KeptAnswers, MaxKeptAnswer,
                             MaxTitleChars, NewRunFile, StoreUrl)
from lcrag.documents.limits import (MAX_CHARS_PER_BYTE, MAX_DOCUMENT_CHARS, MAX_PARSE_MB, MAX_PARSE_SECONDS,
                                   ParseLimits)
from lcrag.errors import OptionError
from lcrag.provenance import MAX_TITLE_CHARS
from lcrag.service.limits import MAX_KEPT_ANSWER_BYTES, SHUTDOWN_SECONDS, Limits, hosts_for
from lcrag.service.store import KEPT_ANSWERS

TRANSPORTS = ("stdio", "http")
SDK_VERSIONS = ((1, 10), (3, 0))  # the MCP SDK lcrag mcp runs on: 1.x from 1.10 (structured output) and 2.x


def mcp(
    transport: Annotated[str, typer.Option("--transport", help="stdio (the client starts lcrag mcp) or http (streamable HTTP at /mcp).")] = "stdio",
    host: Host = "127.0.0.1",
    port: Port = 8001,
    api_key: ApiKey = None,
    config: RunFile = None,
    llm: Llm = None,
    base_url: BaseUrl = None,
    backoff: PoolBackoff = None,
    max_backoff: PoolMaxBackoff = None,
    server_slots: ServerSlots = None,
    context_window: ContextWindow = None,
    threads: Threads = None,
    cache_dir: CacheDir = None,
    price_as: PriceAs = None,
    prices: Prices = None,
    router: Routers = None,
    max_waiting: MaxWaiting = 8,
    max_body_kb: MaxBody = 1024,
    index_memory_mb: IndexMemory = 512,
    max_question_chars: MaxQuestion = Limits.max_question_chars,
    max_tokens: MaxTokens = Limits.max_tokens,
    strategies: Strategies = None,
    retrievers: Retrievers = None,
    allowed_host: AllowedHosts = None,
    option: PartOptions = None,
    max_resource_mb: Annotated[float, typer.Option("--max-resource-mb", help="Largest resource (a file's extracted text) a read returns; larger ones are refused (use search).", min=0.001)] = 8,
    max_sessions: Annotated[int, typer.Option("--max-sessions", help="HTTP: MCP sessions open in all; beyond, the oldest one not yet initialized ends (503 when all are).", min=1)] = 1000,
    max_client_sessions: Annotated[int, typer.Option("--max-client-sessions", help="HTTP: MCP sessions one address may hold (429 beyond, once its uninitialized ones are ended).", min=1)] = 32,
    session_init_timeout: Annotated[float, typer.Option("--session-init-timeout", help="HTTP: seconds a new session has for its client to come back after initialize.", min=0.1)] = 10,
    session_idle_timeout: Annotated[float, typer.Option("--session-idle-timeout", help="HTTP: seconds a session may go without a request before it ends.", min=1)] = 600,
    max_connections: MaxConnections = 1024,
    max_client_connections: MaxClientConnections = 128,
    header_timeout: HeaderTimeout = 10,
    body_timeout: BodyTimeout = 30,
    body_min_rate: BodyMinRate = 1,
    keep_alive: KeepAlive = 5,
    max_header_kb: MaxHeader = 64,
    shutdown_seconds: ShutdownSeconds = SHUTDOWN_SECONDS,
    max_parse_seconds: MaxParseSeconds = MAX_PARSE_SECONDS,
    max_parse_mb: MaxParseMb = MAX_PARSE_MB,
    max_document_chars: MaxDocumentChars = MAX_DOCUMENT_CHARS,
    max_chars_per_byte: MaxCharsPerByte = MAX_CHARS_PER_BYTE,
    max_title_chars: MaxTitleChars = MAX_TITLE_CHARS,
    parse_workers: ParseWorkers = 2,
    store: StoreUrl = None,
    index_workers: IndexWorkers = 1,
    job_lease: JobLease = 30,
    job_retention: JobRetention = JOB_RETENTION_SECONDS,
    kept_answers: KeptAnswers = KEPT_ANSWERS,
    max_kept_answer_kb: MaxKeptAnswer = MAX_KEPT_ANSWER_BYTES / 1024,
    new_run_file: NewRunFile = False,
) -> None:
    """Serve the collections to agents over the Model Context Protocol: tools list_collections, ask and search, and
    the collections' files as resources."""
    if transport not in TRANSPORTS:
        raise OptionError(f"--transport: one of {', '.join(TRANSPORTS)}, got {transport!r}")
    check_key(api_key)
    from lcrag.service.mcp_sessions import SessionLimits

    sessions = SessionLimits(max_sessions=max_sessions, max_client_sessions=max_client_sessions,
                             init_timeout=session_init_timeout, idle_timeout=session_idle_timeout)
    connections = connection_limits(max_connections, max_client_connections, header_timeout, body_timeout,
                                    body_min_rate, keep_alive, max_header_kb)
    LcragMCP = mcp_server_class()
    answering = engine(config, {"llm": llm, "base_url": base_url, "context_window": context_window,
                                "threads": threads, "cache_dir": cache_dir, "backoff": backoff,
                                "max_backoff": max_backoff, "server_slots": server_slots},
                       option, price_as, prices, router, max_waiting, index_memory_mb,
                       ParseLimits(max_parse_seconds, max_parse_mb, max_document_chars, max_chars_per_byte,
                                   max_title_chars),
                       parse_workers, store, index_workers, job_lease, kept_answers, max_kept_answer_kb,
                       retrievers, new_run_file, job_retention=job_retention)
    if transport == "http":
        check_bind(host, api_key, "serve MCP on", answering)  # keys added to the store protect it as --api-key does
    limits = Limits(max_body_bytes=int(max_body_kb * 1024), max_question_chars=max_question_chars,
                    max_tokens=max_tokens, strategies=allowed_strategies(strategies),
                    retrievers=answering.retrievers,
                    allowed_hosts=hosts_for(host, allowed_host or []),
                    max_resource_bytes=int(max_resource_mb * 1024 * 1024))
    server = LcragMCP(answering, limits, sessions)
    try:
        if transport == "stdio":
            server.run("stdio")  # stdout carries the protocol alone: lcrag logs to stderr
        else:
            from lcrag.service.server import run

            typer.echo(f"lcrag MCP at http://{host}:{port}/mcp (collections in {answering.collections.root})",
                       err=True)
            server.hold_streams()  # a tool call in progress is drained like any request, not cut at the signal
            run(http_app(server, api_key, limits, sessions), host, port, connections,
                os.environ.get("LCRAG_SERVE_LOG", "warning"), "lcrag mcp", shutdown_seconds=shutdown_seconds,
                stop_work=server.stop_work, close=answering.close)
    finally:
        answering.close()


def http_app(server, api_key: str | None, limits: Limits, sessions=None):
    """The streamable HTTP app of ``server`` (an LcragMCP) as `lcrag mcp --transport http` serves it: the service's
    guard in front (Host names against DNS rebinding, the key, no cross-site writes, JSON bodies, JSON errors), the
    body limit as JSON, and the sessions bounded (:mod:`lcrag.service.mcp_sessions`)."""
    from lcrag.service.guard import BodyLimits, Guard
    from lcrag.service.keys import keys_for
    from lcrag.service.mcp_sessions import Sessions
    from lcrag.service.metrics import Metrics

    app = Sessions(server.streamable_http_app(), sessions, "lcrag mcp")
    app = BodyLimits(app, limits, "lcrag mcp", uploads=False)
    # The people's keys of lcrag keys too (the same store as lcrag serve's): each call sees its key's collections.
    return Guard(app, api_key=api_key, limits=limits, metrics=Metrics(), keys=keys_for(server.answering.collections))


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
    """:class:`lcrag.service.mcp.LcragMCP`, else one line saying what to install: the SDK when there is none, a
    supported one, naming the version found, when it is too old or too new or fails to import."""
    found = sdk_version()
    if found is not None and not supported(found):
        raise OptionError(f"lcrag mcp needs the MCP SDK 1.10 or newer (1.x or 2.x); found mcp {found}: "
                          "pip install -U 'lcrag[mcp]'")
    try:
        from lcrag.service.mcp import LcragMCP
    except ImportError as exc:  # none, or a supported version with a part missing (a dependency, say)
        if found is None:
            raise OptionError("lcrag mcp needs the MCP SDK: pip install -e '.[mcp]' in lcrag's checkout") from None
        raise OptionError(f"lcrag mcp cannot load the MCP SDK (found mcp {found}): "
                          f"{' '.join(str(exc).split())[:300]}: pip install -U 'lcrag[mcp]'") from None
    return LcragMCP
