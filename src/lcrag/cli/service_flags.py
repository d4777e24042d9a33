"""The flags `lcrag serve` and `lcrag mcp` share, declared once (:class:`ServiceFlags`): the reader, the collections
and their store, the limits on requests, connections and parsing, and the rules for whom they answer. `lcrag worker`
and `lcrag keys` take some of them too."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, Optional, get_type_hints

import typer

from lcrag.cli.flags import BaseUrl, PoolBackoff, PoolMaxBackoff, ServerSlots
from lcrag.documents.limits import (MAX_CHARS_PER_BYTE, MAX_DOCUMENT_CHARS, MAX_PARSE_MB, MAX_PARSE_SECONDS,
                                   ParseLimits)
from lcrag.core.provenance import MAX_TITLE_CHARS
from lcrag.service.limits import MAX_KEPT_ANSWER_BYTES, MAX_SHUTDOWN_SECONDS, SHUTDOWN_SECONDS, Limits
from lcrag.service.keys import AUDIT_RETENTION_SECONDS
from lcrag.store.base import KEPT_ANSWERS

API_KEY_ENV = "LCRAG_SERVE_API_KEY"  # the service's own key, distinct from the reader's LCRAG_API_KEY
JOB_RETENTION_SECONDS = 86400.0

Host = Annotated[str, typer.Option("--host", help="Address to bind; anything but loopback needs --api-key.")]
Port = Annotated[int, typer.Option("--port", help="Port to bind.", min=1, max=65535)]
ApiKey = Annotated[Optional[str], typer.Option("--api-key", envvar=API_KEY_ENV, show_envvar=True, help="Bearer key clients must send (Authorization: Bearer KEY).")]
RunFile = Annotated[Optional[Path], typer.Option("--config", help="A run file (YAML/TOML): reader, embedder, chunking, retrieval, strategy, cache.")]
Llm = Annotated[Optional[str], typer.Option("--llm", help="The reader (default: the run file's, else the bundled one).")]
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
# Connections (lcrag.service.http.server): what one connection, and one client address, may hold.
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
# A shared collection store (lcrag.store.postgres): replicas and `lcrag worker` processes on one database.
StoreUrl = Annotated[Optional[str], typer.Option("--store", envvar="LCRAG_STORE", help="Keep collections in PostgreSQL (postgresql://USER:PASSWORD@HOST/DATABASE), shared by every replica and `lcrag worker` on it; default: the cache directory.")]
IndexWorkers = Annotated[int, typer.Option("--index-workers", help="With --store: indexing jobs this process runs at once (0: leave them to `lcrag worker`).", min=0)]
KeptAnswers = Annotated[int, typer.Option("--kept-answers", help="Answers the answer cache keeps per collection version (the oldest go first; 0: none).", min=0)]
MaxKeptAnswer = Annotated[float, typer.Option("--max-kept-answer-kb", help="Largest answer the answer cache keeps, as written (a larger one is answered afresh each time).", min=1)]
MaxTitleChars = Annotated[int, typer.Option("--max-title-chars", help="Longest heading title or page label kept from a file (a longer one is cut, with an ellipsis); headings count against --max-document-chars.", min=16, max=100_000)]
NewRunFile = Annotated[bool, typer.Option("--new-run-file", help="With --store: record this process's run file (chunking, embedder, retrievers) as the store's and index every collection again; without it a process whose run file differs from the store's refuses to start.")]
JobRetention = Annotated[float, typer.Option("--job-retention", help="With --store: seconds a finished indexing job's record is kept before it is pruned (default: one day).", min=0)]
AuditRetention = Annotated[float, typer.Option("--audit-retention", help="Seconds an entry of the audit log (GET /v1/audit: uploads, deletions, keys added and revoked) is kept; older ones go as the next change is recorded (default: 365 days; at most 100 years).", min=1, max=100 * 365 * 86400)]
JobLease = Annotated[float, typer.Option("--job-lease", help="With --store: seconds an indexing job stays claimed without word from its process; then another takes it over.", min=1)]


@dataclass(frozen=True)
class ServiceFlags:
    """The flags of `lcrag serve` and `lcrag mcp`, declared once: each field's annotation is its option and its
    default the option's (:func:`with_service_flags` gives a command every one of them)."""

    host: Host = "127.0.0.1"
    port: Port = 8000
    api_key: ApiKey = None
    config: RunFile = None
    llm: Llm = None
    base_url: BaseUrl = None
    backoff: PoolBackoff = None
    max_backoff: PoolMaxBackoff = None
    server_slots: ServerSlots = None
    context_window: ContextWindow = None
    threads: Threads = None
    cache_dir: CacheDir = None
    price_as: PriceAs = None
    prices: Prices = None
    max_body_kb: MaxBody = 1024
    router: Routers = None
    max_waiting: MaxWaiting = 8
    index_memory_mb: IndexMemory = 512
    max_question_chars: MaxQuestion = Limits.max_question_chars
    max_tokens: MaxTokens = Limits.max_tokens
    strategies: Strategies = None
    retrievers: Retrievers = None
    allowed_host: AllowedHosts = None
    option: PartOptions = None
    max_connections: MaxConnections = 1024
    max_client_connections: MaxClientConnections = 128
    header_timeout: HeaderTimeout = 10
    body_timeout: BodyTimeout = 30
    body_min_rate: BodyMinRate = 1
    keep_alive: KeepAlive = 5
    max_header_kb: MaxHeader = 64
    shutdown_seconds: ShutdownSeconds = SHUTDOWN_SECONDS
    max_parse_seconds: MaxParseSeconds = MAX_PARSE_SECONDS
    max_parse_mb: MaxParseMb = MAX_PARSE_MB
    max_document_chars: MaxDocumentChars = MAX_DOCUMENT_CHARS
    max_chars_per_byte: MaxCharsPerByte = MAX_CHARS_PER_BYTE
    max_title_chars: MaxTitleChars = MAX_TITLE_CHARS
    parse_workers: ParseWorkers = 2
    store: StoreUrl = None
    index_workers: IndexWorkers = 1
    job_lease: JobLease = 30
    job_retention: JobRetention = JOB_RETENTION_SECONDS
    audit_retention: AuditRetention = AUDIT_RETENTION_SECONDS
    kept_answers: KeptAnswers = KEPT_ANSWERS
    max_kept_answer_kb: MaxKeptAnswer = MAX_KEPT_ANSWER_BYTES / 1024
    new_run_file: NewRunFile = False
    # lcrag's own --max-file-mb (before the subcommand: the root command's ParseLimits), not an option of its own
    max_file_mb: float = field(default=ParseLimits().file_mb, metadata={"option": False})

    def reader_settings(self) -> dict[str, Any]:
        """The reader and cache flags as configuration fields (None: not given, the run file's or the default)."""
        return {"llm": self.llm, "base_url": self.base_url, "context_window": self.context_window,
                "threads": self.threads, "cache_dir": self.cache_dir, "backoff": self.backoff,
                "max_backoff": self.max_backoff, "server_slots": self.server_slots}

    def parse_limits(self) -> ParseLimits:
        return ParseLimits(self.max_parse_seconds, self.max_parse_mb, self.max_document_chars,
                           self.max_chars_per_byte, self.max_title_chars, self.max_file_mb)

    def connection_limits(self):
        """What one connection, and one client address, may hold (:class:`lcrag.service.http.server.ConnectionLimits`)."""
        from lcrag.service.http.server import ConnectionLimits

        return ConnectionLimits(max_connections=self.max_connections,
                                max_client_connections=self.max_client_connections,
                                header_timeout=self.header_timeout, body_timeout=self.body_timeout,
                                body_min_rate=max(1, int(self.body_min_rate * 1024)), keep_alive=self.keep_alive,
                                max_header_bytes=int(self.max_header_kb * 1024))


def with_service_flags(**defaults: Any) -> Callable[[Callable], Callable]:
    """A decorator giving a command every :class:`ServiceFlags` field as an option, after the command's own, and
    calling it with them as its ``flags`` argument; ``defaults`` replace a field's default for this command
    (``port=8001``)."""
    shared = [flag for flag in fields(ServiceFlags) if flag.metadata.get("option", True)]
    unknown = set(defaults) - {flag.name for flag in shared}
    if unknown:
        raise TypeError(f"not service flags: {', '.join(sorted(unknown))}")
    options = get_type_hints(ServiceFlags, include_extras=True)
    keyword = inspect.Parameter.KEYWORD_ONLY
    added = [inspect.Parameter(flag.name, keyword, default=defaults.get(flag.name, flag.default),
                               annotation=options[flag.name]) for flag in shared]

    def add(command: Callable) -> Callable:
        own = [parameter.replace(kind=keyword)
               for parameter in inspect.signature(command, eval_str=True).parameters.values()
               if parameter.name != "flags"]

        def run(ctx: typer.Context, **given: Any) -> Any:
            limits = ctx.find_root().obj  # lcrag --max-file-mb: the root command's ParseLimits
            flags = ServiceFlags(**{flag.name: given.pop(flag.name) for flag in shared},
                                 **({"max_file_mb": limits.file_mb} if isinstance(limits, ParseLimits) else {}))
            return command(flags=flags, **given)

        for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(run, attribute, getattr(command, attribute))
        context = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
        run.__signature__ = inspect.Signature([context, *own, *added])
        run.__annotations__ = {parameter.name: parameter.annotation for parameter in [context, *own, *added]}
        return run

    return add
