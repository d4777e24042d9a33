"""What `lcrag serve`, `lcrag mcp` and `lcrag worker` make of their flags: the answering engine, the limits on
requests, and the checks of whom they answer."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from lcrag.cli.service_flags import API_KEY_ENV, JOB_RETENTION_SECONDS, ServiceFlags
from lcrag.core.errors import OptionError
from lcrag.core.options import option_values
from lcrag.service.limits import Limits, hosts_for, is_loopback


def named_routers(specs: list[str]) -> dict[str, str]:
    """``NAME=FILE`` pairs, each file checked now (a bad one is a one-line error before the server starts)."""
    from lcrag.strategies.routing.learned import Router, shipped_name

    routers = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise OptionError(f"--router {spec!r}: write NAME=FILE (a router file of `lcrag route fit`)")
        Router.load(path.strip())  # a bare name is a shipped router's (kept as its name), else a file's path
        routers[name.strip()] = shipped_name(path.strip()) or str(Path(path.strip()).resolve())
    return routers


def allowed_strategies(names: list[str] | None) -> tuple[str, ...] | None:
    from lcrag.core.registry import STRATEGIES

    for name in names or ():
        if name not in STRATEGIES.names():
            raise OptionError(f"--strategies {name!r}: not a strategy ({', '.join(STRATEGIES.names())})")
    return tuple(names) if names else None


def allowed_retrievers(names: list[str] | None, own: str) -> tuple[str, ...]:
    """The retrievers clients may choose: those named, or every registered one that makes no reader call (tree and
    raptor write summaries with the reader: minutes of generation a client would order for free), and the server's
    own retriever."""
    from lcrag.core.registry import RETRIEVERS

    for name in names or ():
        if name not in RETRIEVERS.names():
            raise OptionError(f"--retrievers {name!r}: not a retriever ({', '.join(RETRIEVERS.names())})")
    if names:
        return tuple(dict.fromkeys(names))
    from lcrag.service.answering import default_retrievers

    return default_retrievers(own)


def engine(flags: ServiceFlags, embedder: str | None = None):
    """The answering engine over the collections under the cache directory, as `lcrag serve`, `lcrag mcp` and
    `lcrag worker` make it from their flags: a collection made through one is answered by the others. With
    ``flags.store`` (a PostgreSQL URL) it shares the store's collections with other replicas, running
    ``flags.index_workers`` indexing jobs at a time; ``flags.retrievers``: those offered, part of what a shared store
    records of its run file (``flags.new_run_file``: record this one's). ``embedder``: over the run file's."""
    from lcrag.pipeline.config import Config
    from lcrag.evaluation.prices import PriceTable
    from lcrag.core.paths import cache_directory
    from lcrag.service.answering import Answering
    from lcrag.service.run_identity import run_identity

    given = {k: v for k, v in {**flags.reader_settings(), "embedder": embedder}.items() if v is not None}
    run = Config.from_file(flags.config) if flags.config else Config()
    if flags.option:
        given["options"] = run.options.options | option_values(flags.option)
    settings = run.merged(given).settings()
    # One chunking for every strategy a client may choose (the run file's, else the server's strategy's own): the
    # indexing jobs make each offered retriever's index once, for it (op-rag's own tokens:128 would be another
    # chunking, whose index no job makes: its questions could never be answered).
    settings = replace(settings, chunking=settings.chunking_for(settings.strategy))
    table = PriceTable.load(flags.prices)
    if flags.price_as:
        table.require(flags.price_as)
    root = cache_directory(settings.cache_dir) / "collections"
    shared = shared_store(flags.store, flags.job_lease, flags.job_retention)
    offered = allowed_retrievers(flags.retrievers, settings.retriever)  # each one's index is made by the indexing jobs
    answering = Answering(settings, root.with_name("collections-shared") if shared else root, table, flags.price_as,
                          flags.max_waiting, routers=named_routers(flags.router or []),
                          memory_bytes=int(flags.index_memory_mb * 1024 * 1024), parse_limits=flags.parse_limits(),
                          parse_workers=flags.parse_workers, store=shared, kept_answers=flags.kept_answers,
                          kept_answer_bytes=int(flags.max_kept_answer_kb * 1024), retrievers=offered)
    if shared:
        same_run_file(answering, run_identity(settings, offered), flags.new_run_file)
        answering.collections.start_jobs(flags.index_workers)
        answering.collections.watch(answering.forget)  # another replica's change lets go of what is kept here
        answering.parser.cache = answering.collections.shared_parses(answering.parser.cache)  # parsed once for all
    return answering


def request_limits(flags: ServiceFlags, retrievers: tuple[str, ...], **more: Any) -> Limits:
    """What one request may ask (its body, question, tokens, strategies, retrievers, Host names), and ``more`` of
    the command's own (uploads for `lcrag serve`, resources for `lcrag mcp`)."""
    return Limits(max_body_bytes=int(flags.max_body_kb * 1024), max_question_chars=flags.max_question_chars,
                  max_tokens=flags.max_tokens, strategies=allowed_strategies(flags.strategies),
                  retrievers=retrievers, allowed_hosts=hosts_for(flags.host, flags.allowed_host or []), **more)


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

    from lcrag.store.postgres_database import check_url
    from lcrag.store.postgres import PostgresCollections

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
