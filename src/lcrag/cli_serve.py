"""`lcrag serve`: the HTTP service and its web page, on the same validated configuration as the CLI."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from lcrag.documents.limits import (MAX_CHARS_PER_BYTE, MAX_DOCUMENT_CHARS, MAX_PARSE_MB, MAX_PARSE_SECONDS,
                                   ParseLimits)
from lcrag.errors import OptionError
from lcrag.options import option_values
from lcrag.provenance import MAX_TITLE_CHARS
from lcrag.service.limits import (MAX_KEPT_ANSWER_BYTES, MAX_SHUTDOWN_SECONDS, SHUTDOWN_SECONDS, Limits, hosts_for,
                                  is_loopback)
from lcrag.service.store import KEPT_ANSWERS

API_KEY_ENV = "LCRAG_SERVE_API_KEY"  # the service's own key, distinct from the reader's LCRAG_API_KEY


def named_routers(specs: list[str]) -> dict[str, str]:
    """``NAME=FILE`` pairs, each file checked now (a bad one is a one-line error before the server starts)."""
    from lcrag.strategies.learned_router import Router, shipped_name

    routers = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise OptionError(f"--router {spec!r}: write NAME=FILE (a router file of `lcrag route fit`)")
        Router.load(path.strip())  # a bare name is a shipped router's (kept as its name), else a file's path
        routers[name.strip()] = shipped_name(path.strip()) or str(Path(path.strip()).resolve())
    return routers


def allowed_strategies(names: list[str] | None) -> tuple[str, ...] | None:
    from lcrag.registry import STRATEGIES

    for name in names or ():
        if name not in STRATEGIES.names():
            raise OptionError(f"--strategies {name!r}: not a strategy ({', '.join(STRATEGIES.names())})")
    return tuple(names) if names else None


def allowed_retrievers(names: list[str] | None, own: str) -> tuple[str, ...]:
    """The retrievers clients may choose: those named, or every registered one that makes no reader call (tree and
    raptor write summaries with the reader: minutes of generation a client would order for free), and the server's
    own retriever."""
    from lcrag.registry import RETRIEVERS

    for name in names or ():
        if name not in RETRIEVERS.names():
            raise OptionError(f"--retrievers {name!r}: not a retriever ({', '.join(RETRIEVERS.names())})")
    if names:
        return tuple(dict.fromkeys(names))
    from lcrag.service.answering import default_retrievers

    return default_retrievers(own)


# The options `lcrag serve` and `lcrag mcp` share: the same reader, collections, limits and rules for whom they answer.
Host = Annotated[str, typer.Option("--host", help="Address to bind; anything but loopback needs --api-key.")]
Port = Annotated[int, typer.Option("--port", help="Port to bind.", min=1, max=65535)]
ApiKey = Annotated[Optional[str], typer.Option("--api-key", envvar=API_KEY_ENV, show_envvar=True, help="Bearer key clients must send (Authorization: Bearer KEY).")]
RunFile = Annotated[Optional[Path], typer.Option("--config", help="A run file (YAML/TOML): reader, embedder, chunking, retrieval, strategy, cache.")]
Llm = Annotated[Optional[str], typer.Option("--llm", help="The reader (default: the run file's, else the bundled one).")]
BaseUrl = Annotated[Optional[list[str]], typer.Option("--base-url", envvar="LCRAG_BASE_URL", help="OpenAI-compatible reader server, e.g. http://localhost:8000/v1; repeat it (or separate URLs with commas) for a pool of servers serving one model: the questions about one document go to one server while it is up (its prefix cache keeps hitting), other calls to the least busy, and a failing server is skipped and its calls retried on another.")]
PoolBackoff = Annotated[Optional[float], typer.Option("--backoff", help="A pool of reader servers: seconds a failing server is skipped at first, doubled at each failure in a row (default 1).")]
PoolMaxBackoff = Annotated[Optional[float], typer.Option("--max-backoff", help="A pool of reader servers: the most seconds a failing server is skipped (default 60).")]
ServerSlots = Annotated[Optional[int], typer.Option("--server-slots", min=1, help="Calls sent to one OpenAI-compatible reader server at once (default 4): what it runs together (llama.cpp's --parallel; more for vLLM). It is how many questions are answered at once per server.")]
ContextWindow = Annotated[Optional[int], typer.Option("--context-window", help="Reader window in tokens.")]
Threads = Annotated[Optional[int], typer.Option("--threads", help="CPU threads for the embedded reader.", min=1)]
CacheDir = Annotated[Optional[Path], typer.Option("--cache-dir", envvar="LCRAG_CACHE_DIR", help="Indexes, caches and collections (collections/).")]
PriceAs = Annotated[Optional[str], typer.Option("--price-as", help="Price every answer as this model.")]
Prices = Annotated[Optional[Path], typer.Option("--prices", help="A TOML/YAML price table over the built-in one.")]
Routers = Annotated[Optional[list[str]], typer.Option("--router", help="A router clients may name, NAME=FILE (a file of `lcrag route fit`); repeatable. The shipped ones (lara) are always offered.")]
MaxWaiting = Annotated[int, typer.Option("--max-waiting", help="Requests queued for the reader before 429.", min=1)]
IndexMemory = Annotated[float, typer.Option("--index-memory-mb", help="Memory for indexes and answering contexts kept between questions (least recently used dropped first).", min=1)]
MaxQuestion = Annotated[int, typer.Option("--max-question-chars", help="Longest question accepted (400 above).", min=1)]
MaxTokens = Annotated[int, typer.Option("--max-tokens", help="Most completion tokens a request may ask for (400 above).", min=1)]
Strategies = Annotated[Optional[list[str]], typer.Option("--strategies", help="A strategy clients may choose; repeatable (default: all). E.g. leave out lc on large collections.")]
Retrievers = Annotated[Optional[list[str]], typer.Option("--retrievers", help="A retriever clients may choose; repeatable (default: every one that makes no reader call and embeds no more than the chunks, and the server's own: tree and raptor write summaries with the reader, sentence-window embeds every sentence at ingestion).")]
AllowedHosts = Annotated[Optional[list[str]], typer.Option("--allowed-host", help="A Host name this server answers to besides its bind address (and loopback names on loopback); repeatable. Others get 400.")]
MaxBody = Annotated[float, typer.Option("--max-body-kb", help="Largest JSON request body accepted (413 above).", min=1)]
PartOptions = Annotated[Optional[list[str]], typer.Option("--option", help="NAME=VALUE: an option the strategy or retriever declares (e.g. widen=2), the default for requests that set none; repeatable.")]
# Connections (lcrag.service.server): what one connection, and one client address, may hold.
MaxConnections = Annotated[int, typer.Option("--max-connections", help="Open connections in all; beyond, one that stalled in its request headers (else one idle) is closed to make room, or the new one refused (503).", min=1)]
MaxClientConnections = Annotated[int, typer.Option("--max-client-connections", help="Open connections from one address (behind a reverse proxy, every client is the proxy's).", min=1)]
HeaderTimeout = Annotated[float, typer.Option("--header-timeout", help="Seconds a connection has to send its request line and headers (408 after).", min=0.1)]
BodyTimeout = Annotated[float, typer.Option("--body-timeout", help="Seconds a request body has to arrive, plus a second per --body-min-rate KB (408 after).", min=0.1)]
BodyMinRate = Annotated[float, typer.Option("--body-min-rate", help="KB a second a request body must keep up beyond --body-timeout.", min=0.001)]
KeepAlive = Annotated[float, typer.Option("--keep-alive", help="Seconds an idle connection is kept open between requests.", min=1)]
MaxHeader = Annotated[float, typer.Option("--max-header-kb", help="Largest request line and headers accepted (431 above).", min=1)]
ShutdownSeconds = Annotated[float, typer.Option("--shutdown-seconds", help="On SIGTERM or Ctrl-C: seconds the requests in progress have to finish; then the questions still running are stopped at their next step (503) and the server exits.", min=0, max=MAX_SHUTDOWN_SECONDS)]
# Parsing uploaded files (lcrag.documents.sandbox): each in a process of its own, within these; over one, the file is
# refused in one line naming the flag, and the collection goes on with its other files.
MaxParseSeconds = Annotated[float, typer.Option("--max-parse-seconds", help="Seconds one file may take to parse (wall clock, and as much CPU time); over it the file is refused.", min=0.1)]
MaxParseMb = Annotated[float, typer.Option("--max-parse-mb", help="Memory one file's parsing may take (its process's address space beyond the parsers'); over it the file is refused.", min=16)]
MaxDocumentChars = Annotated[int, typer.Option("--max-document-chars", help="Characters of text one file may yield, counted as it is read (page by page, chapter by chapter, row by row).", min=1)]
MaxCharsPerByte = Annotated[float, typer.Option("--max-chars-per-byte", help="Characters of text one file may yield per byte of the file, beyond its first million (a file repeating one part many times yields far more).", min=0.001)]
ParseWorkers = Annotated[int, typer.Option("--parse-workers", help="Files parsed at once, each in its own process.", min=1)]
# A shared collection store (lcrag.service.store_postgres): replicas and `lcrag worker` processes on one database.
StoreUrl = Annotated[Optional[str], typer.Option("--store", envvar="LCRAG_STORE", help="Keep collections in PostgreSQL (postgresql://USER:PASSWORD@HOST/DATABASE), shared by every replica and `lcrag worker` on it; default: the cache directory.")]
IndexWorkers = Annotated[int, typer.Option("--index-workers", help="With --store: indexing jobs this process runs at once (0: leave them to `lcrag worker`).", min=0)]
KeptAnswers = Annotated[int, typer.Option("--kept-answers", help="Answers the answer cache keeps per collection version (the oldest go first; 0: none).", min=0)]
MaxKeptAnswer = Annotated[float, typer.Option("--max-kept-answer-kb", help="Largest answer the answer cache keeps, as written (a larger one is answered afresh each time).", min=1)]
MaxTitleChars = Annotated[int, typer.Option("--max-title-chars", help="Longest heading title or page label kept from a file (a longer one is cut, with an ellipsis); headings count against --max-document-chars.", min=16, max=100_000)]
NewRunFile = Annotated[bool, typer.Option("--new-run-file", help="With --store: record this process's run file (chunking, embedder, retrievers) as the store's and index every collection again; without it a process whose run file differs from the store's refuses to start.")]
JobRetention = Annotated[float, typer.Option("--job-retention", help="With --store: seconds a finished indexing job's record is kept before it is pruned (default: one day).", min=0)]
JOB_RETENTION_SECONDS = 86400.0
JobLease = Annotated[float, typer.Option("--job-lease", help="With --store: seconds an indexing job stays claimed without word from its process; then another takes it over.", min=1)]


def engine(config: Path | None, given: dict, option: list[str] | None, price_as: str | None, prices: Path | None,
           router: list[str] | None, max_waiting: int, index_memory_mb: float, parse_limits: ParseLimits | None = None,
           parse_workers: int = 2, store: str | None = None, index_workers: int = 1, job_lease: float = 30,
           kept_answers: int = KEPT_ANSWERS, max_kept_answer_kb: float = MAX_KEPT_ANSWER_BYTES / 1024,
           retrievers: list[str] | None = None, new_run_file: bool = False,
           job_retention: float = JOB_RETENTION_SECONDS):
    """The answering engine over the collections under the cache directory, as `lcrag serve` and `lcrag mcp` make
    it: a collection made through one is answered by the other. ``store``: a PostgreSQL URL whose collections it
    shares with other replicas, running ``index_workers`` indexing jobs at a time; ``kept_answers``: the answer
    cache's bound per collection version, each answer at most ``max_kept_answer_kb``; ``retrievers``: those offered
    (--retrievers), part of what a shared store records of its run file (``new_run_file``: record this one's)."""
    from lcrag.config import Config
    from lcrag.evaluation.prices import PriceTable
    from lcrag.paths import cache_directory
    from lcrag.service.answering import Answering
    from lcrag.service.run_identity import run_identity

    given = {k: v for k, v in given.items() if v is not None}
    run = Config.from_file(config) if config else Config()
    if option:
        given["options"] = run.options.options | option_values(option)
    settings = run.merged(given).settings()
    # One chunking for every strategy a client may choose (the run file's, else the server's strategy's own): the
    # indexing jobs make each offered retriever's index once, for it (op-rag's own tokens:128 would be another
    # chunking, whose index no job makes: its questions could never be answered).
    settings = replace(settings, chunking=settings.chunking_for(settings.strategy))
    table = PriceTable.load(prices)
    if price_as:
        table.require(price_as)
    root = cache_directory(settings.cache_dir) / "collections"
    shared = shared_store(store, job_lease, job_retention)
    offered = allowed_retrievers(retrievers, settings.retriever)  # each one's index is made by the indexing jobs
    answering = Answering(settings, root.with_name("collections-shared") if shared else root, table, price_as,
                          max_waiting, routers=named_routers(router or []),
                          memory_bytes=int(index_memory_mb * 1024 * 1024), parse_limits=parse_limits,
                          parse_workers=parse_workers, store=shared, kept_answers=kept_answers,
                          kept_answer_bytes=int(max_kept_answer_kb * 1024), retrievers=offered)
    if shared:
        same_run_file(answering, run_identity(settings, offered), new_run_file)
        answering.collections.start_jobs(index_workers)
        answering.collections.watch(answering.forget)  # another replica's change lets go of what is kept here
        answering.parser.cache = answering.collections.shared_parses(answering.parser.cache)  # parsed once for all
    return answering


def same_run_file(answering, identity: dict, new_run_file: bool) -> None:
    """Refuse to share a store whose segments another run file made (one line naming the difference); with
    ``new_run_file``, record this one's and index every collection again."""
    from lcrag.service.run_identity import check_identity

    try:
        if check_identity(answering.collections.db, identity, new_run_file):
            answering.collections.reindex_all()
    except BaseException:
        answering.close()
        raise


def shared_store(url: str | None, lease: float, retention: float = JOB_RETENTION_SECONDS):
    """What makes the collections of a PostgreSQL store (None without one); a URL that is not one is refused now."""
    if not url:
        return None
    from functools import partial

    from lcrag.postgres_store import check_url
    from lcrag.service.store_postgres import PostgresCollections

    check_url(url)
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise OptionError("--store needs PostgreSQL's driver: pip install -e '.[postgres]' in lcrag's checkout") from None
    return partial(PostgresCollections, url, lease=lease, job_retention=retention)


def check_bind(host: str, api_key: str | None, command: str = "serve", answering=None) -> None:
    """Anything but loopback needs a key: ``--api-key``, or the keys added with ``lcrag keys add`` to the store
    ``answering`` uses (a refusal closes it)."""
    check_key(api_key)
    if is_loopback(host) or api_key or (answering is not None and _has_keys(answering)):
        return
    if answering is not None:
        answering.close()
    raise OptionError(f"--host {host} is not a loopback address: set --api-key (or {API_KEY_ENV}), or add keys with "
                      f"`lcrag keys add`, to {command} it")


def _has_keys(answering) -> bool:
    """Whether a key was added to the store ``answering`` uses (keys that cannot be read count as none)."""
    from lcrag.service.keys import KeysUnavailable, keys_for

    keys = keys_for(answering.collections)
    try:
        keys.refresh(force=True)
        return keys.required()
    except KeysUnavailable:
        return False
    finally:
        keys.close()


def check_key(api_key: str | None) -> None:
    """A key a client can send: printable ASCII without spaces (HTTP header values are bytes, and clients send
    non-ASCII ones in differing encodings, if at all)."""
    if api_key and not all("!" <= c <= "~" for c in api_key):
        raise OptionError(f"--api-key (or {API_KEY_ENV}): use printable ASCII characters without spaces; this key "
                          "has others, which a client cannot send in an Authorization header")


def connection_limits(max_connections: int, max_client_connections: int, header_timeout: float,
                      body_timeout: float, body_min_rate: float, keep_alive: float, max_header_kb: float = 64):
    from lcrag.service.server import ConnectionLimits

    return ConnectionLimits(max_connections=max_connections, max_client_connections=max_client_connections,
                            header_timeout=header_timeout, body_timeout=body_timeout,
                            body_min_rate=max(1, int(body_min_rate * 1024)), keep_alive=keep_alive,
                            max_header_bytes=int(max_header_kb * 1024))


def serve(
    host: Host = "127.0.0.1",
    port: Port = 8000,
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
    max_upload_mb: Annotated[float, typer.Option("--max-upload-mb", help="Largest upload accepted (413 above).", min=0.001)] = 512,
    max_body_kb: MaxBody = 1024,
    router: Routers = None,
    max_waiting: MaxWaiting = 8,
    index_memory_mb: IndexMemory = 512,
    max_question_chars: MaxQuestion = Limits.max_question_chars,
    max_tokens: MaxTokens = Limits.max_tokens,
    strategies: Strategies = None,
    retrievers: Retrievers = None,
    allowed_host: AllowedHosts = None,
    option: PartOptions = None,
    cors_origin: Annotated[Optional[list[str]], typer.Option("--cors-origin", help="A web origin allowed to call the API from the browser (CORS), e.g. https://app.example; repeatable. None by default.")] = None,
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
    kept_answers: KeptAnswers = KEPT_ANSWERS,
    max_kept_answer_kb: MaxKeptAnswer = MAX_KEPT_ANSWER_BYTES / 1024,
    new_run_file: NewRunFile = False,
    job_retention: JobRetention = JOB_RETENTION_SECONDS,
) -> None:
    """Serve collections over HTTP: an OpenAI-compatible API, the native ask API and a web page at /."""
    check_key(api_key)
    try:
        import uvicorn  # noqa: F401
    except ImportError:
        raise OptionError("lcrag serve needs the service's libraries: pip install -e '.[serve]' in lcrag's checkout") from None
    from lcrag.service.app import create_app
    from lcrag.service.server import Gate, run

    answering = engine(config, {"llm": llm, "base_url": base_url, "context_window": context_window,
                                "threads": threads, "cache_dir": cache_dir, "backoff": backoff,
                                "max_backoff": max_backoff, "server_slots": server_slots},
                       option, price_as, prices, router, max_waiting, index_memory_mb,
                       ParseLimits(max_parse_seconds, max_parse_mb, max_document_chars, max_chars_per_byte,
                                   max_title_chars),
                       parse_workers, store, index_workers, job_lease, kept_answers, max_kept_answer_kb,
                       retrievers, new_run_file, job_retention=job_retention)
    check_bind(host, api_key, answering=answering)  # keys added to the store protect it as --api-key does
    limits = Limits(max_upload_bytes=int(max_upload_mb * 1024 * 1024), max_body_bytes=int(max_body_kb * 1024),
                    max_question_chars=max_question_chars, max_tokens=max_tokens,
                    strategies=allowed_strategies(strategies), allowed_hosts=hosts_for(host, allowed_host or []),
                    retrievers=answering.retrievers,
                    cors_origins=tuple(cors_origin or ()))
    connections = connection_limits(max_connections, max_client_connections, header_timeout, body_timeout,
                                    body_min_rate, keep_alive, max_header_kb)
    gate = Gate(connections, "lcrag serve")
    app = create_app(answering, api_key, limits, gate=gate)
    typer.echo(f"lcrag serving http://{host}:{port}/ (collections in {answering.collections.root})", err=True)
    try:
        run(app, host, port, connections, os.environ.get("LCRAG_SERVE_LOG", "warning"), "lcrag serve", gate,
            shutdown_seconds, answering.stop_questions, answering.close)
    finally:
        answering.close()
