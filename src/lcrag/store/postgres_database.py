"""Collections shared by several processes in PostgreSQL (psycopg 3, plain SQL): the schema (collections with a
version, files as content-addressed blobs, per-file segments keyed by content, chunking and embedder, an answer
cache), a pool of checked connections (psycopg_pool: each connection is tried before it is handed out, and one lost
is made again), and the ingestion job queue with leases. A database that cannot be reached now (refused, a pool wait
timed out, a connection lost mid-query) is one error, :class:`StoreDown`: the service answers it with 503 and
``Retry-After``, never a traceback.

Every change to a collection (a file added or removed) raises its ``version`` in the same transaction and sends
``NOTIFY lcrag_changes, 'name:version'`` (so does a segment made for one of its files: its state moved on): a
process that keeps anything derived from a collection compares the version it read it at with the current one (one
indexed lookup per question) and reads it again when they differ.

Jobs (:meth:`PostgresStore.claim`) are rows claimed with ``FOR UPDATE SKIP LOCKED`` under a lease (``lease_until``)
that the claimer renews while it works (:meth:`renew`); a job whose lease ran out (its worker died) is claimed again
by another. Each claim has its own token, and a result is written only in the transaction that marks the job done
under that token (:meth:`complete`): a worker that lost its lease (paused past it, then woke) writes nothing, so a
job runs to completion once. docs/job-queue.md says why this and not a queue library."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from lcrag.core.errors import LcragError, OptionError
from lcrag.core.redaction import redact_url

CHANNEL = "lcrag_changes"
JOBS_CHANNEL = "lcrag_jobs"
SCHEMES = ("postgresql://", "postgres://")
# The server ended the session (admin or crash shutdown) or is not taking connections yet (starting up): an outage,
# like every error of class 08 (connection exception) and a connection's own failures, which carry no SQLSTATE.
_OUTAGE_STATES = ("57P01", "57P02", "57P03")
RETRY_AFTER = 2  # seconds a client is told to wait (Retry-After) when the store cannot be reached
log = logging.getLogger(__name__)
T = TypeVar("T")

SCHEMA = """
CREATE SEQUENCE IF NOT EXISTS lcrag_versions;
CREATE TABLE IF NOT EXISTS lcrag_collections (
    name text PRIMARY KEY,
    id text NOT NULL UNIQUE,
    created double precision NOT NULL,
    version bigint NOT NULL DEFAULT 1,
    state text NOT NULL DEFAULT 'empty',
    state_version bigint NOT NULL DEFAULT 0,
    done integer NOT NULL DEFAULT 0,
    error text,
    skipped text[] NOT NULL DEFAULT '{}',
    updated double precision NOT NULL DEFAULT 0,
    chunking text,
    embedder text
);
CREATE TABLE IF NOT EXISTS lcrag_blobs (hash text PRIMARY KEY, content bytea NOT NULL);
CREATE TABLE IF NOT EXISTS lcrag_blob_parts (
    hash text NOT NULL REFERENCES lcrag_blobs (hash) ON DELETE CASCADE,
    part integer NOT NULL,
    content bytea NOT NULL,
    PRIMARY KEY (hash, part)
);
CREATE TABLE IF NOT EXISTS lcrag_files (
    collection text NOT NULL REFERENCES lcrag_collections (id) ON DELETE CASCADE,
    name text NOT NULL,
    hash text NOT NULL REFERENCES lcrag_blobs (hash),
    bytes bigint NOT NULL,
    added double precision NOT NULL,
    PRIMARY KEY (collection, name)
);
CREATE INDEX IF NOT EXISTS lcrag_files_hash ON lcrag_files (hash);
CREATE TABLE IF NOT EXISTS lcrag_segments (
    hash text NOT NULL,
    chunking text NOT NULL,
    embedder text NOT NULL,
    text_hash text NOT NULL,
    spans bytea NOT NULL,
    embeddings bytea,
    dim integer NOT NULL DEFAULT 0,
    tokens integer NOT NULL DEFAULT 0,
    writes integer NOT NULL DEFAULT 1,
    PRIMARY KEY (hash, chunking, embedder)
);
-- What building each retriever's index (its summaries) cost a collection in reader calls, added up over its jobs.
CREATE TABLE IF NOT EXISTS lcrag_index_costs (
    collection text NOT NULL REFERENCES lcrag_collections (id) ON DELETE CASCADE,
    retriever text NOT NULL,
    calls bigint NOT NULL DEFAULT 0,
    prompt_tokens bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    seconds double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (collection, retriever)
);
CREATE TABLE IF NOT EXISTS lcrag_jobs (
    id bigserial PRIMARY KEY,
    collection text NOT NULL,
    name text NOT NULL,
    version bigint NOT NULL,
    state text NOT NULL DEFAULT 'queued',
    attempts integer NOT NULL DEFAULT 0,
    token text,
    owner text,
    lease_until timestamptz,
    completions integer NOT NULL DEFAULT 0,
    error text,
    created timestamptz NOT NULL DEFAULT now(),
    finished timestamptz
);
CREATE UNIQUE INDEX IF NOT EXISTS lcrag_jobs_queued ON lcrag_jobs (collection) WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS lcrag_jobs_open ON lcrag_jobs (id) WHERE state IN ('queued', 'running');
CREATE TABLE IF NOT EXISTS lcrag_parses (key text PRIMARY KEY, outcome bytea NOT NULL);
ALTER TABLE lcrag_parses ADD COLUMN IF NOT EXISTS content text;
CREATE INDEX IF NOT EXISTS lcrag_parses_content ON lcrag_parses (content);
CREATE INDEX IF NOT EXISTS lcrag_jobs_finished ON lcrag_jobs (coalesce(finished, created)) WHERE state NOT IN
    ('queued', 'running');
CREATE TABLE IF NOT EXISTS lcrag_answers (
    collection text NOT NULL,
    version bigint NOT NULL,
    key text NOT NULL,
    value bytea NOT NULL,
    created timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (collection, version, key)
);
-- Which files each version of a collection changed: a replica brings what it holds of a collection up to date from
-- the names changed since its version, never by reading every file's row again. Written by triggers, so that every
-- change of lcrag_files is in it, and stamped with the version raised in the same transaction (NULL until then,
-- seen by no one else); a collection keeps its last 1,024 changes and a row named '' saying up to which version
-- the older ones are gone (a replica further behind reads every row once).
CREATE TABLE IF NOT EXISTS lcrag_file_changes (
    collection text NOT NULL REFERENCES lcrag_collections (id) ON DELETE CASCADE,
    version bigint,
    name text NOT NULL
);
CREATE INDEX IF NOT EXISTS lcrag_file_changes_at ON lcrag_file_changes (collection, version);
-- A collection's number of files, kept by the trigger below in the transaction that adds or removes one: a status
-- read never counts the rows (a count of 5,000 files on every poll). NULL until counted once (a store made before).
ALTER TABLE lcrag_collections ADD COLUMN IF NOT EXISTS files bigint;
UPDATE lcrag_collections c SET files = (SELECT count(*) FROM lcrag_files f WHERE f.collection = c.id)
    WHERE files IS NULL;
ALTER TABLE lcrag_collections ALTER COLUMN files SET DEFAULT 0;
CREATE OR REPLACE FUNCTION lcrag_file_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE lcrag_collections SET files = files + 1 WHERE id = NEW.collection;
    ELSIF TG_OP = 'DELETE' THEN
        UPDATE lcrag_collections SET files = files - 1 WHERE id = OLD.collection;
    END IF;
    IF TG_OP <> 'INSERT' THEN  -- (a file deleted with its collection is no change of one)
        INSERT INTO lcrag_file_changes (collection, name)
            SELECT OLD.collection, OLD.name WHERE EXISTS (SELECT 1 FROM lcrag_collections WHERE id = OLD.collection);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO lcrag_file_changes (collection, name) VALUES (NEW.collection, NEW.name);
    END IF;
    RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER lcrag_file_changed AFTER INSERT OR UPDATE OR DELETE ON lcrag_files
    FOR EACH ROW EXECUTE FUNCTION lcrag_file_changed();
CREATE OR REPLACE FUNCTION lcrag_version_raised() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cutoff bigint;
BEGIN
    UPDATE lcrag_file_changes SET version = NEW.version WHERE collection = NEW.id AND version IS NULL;
    SELECT version INTO cutoff FROM lcrag_file_changes WHERE collection = NEW.id AND name <> ''
        ORDER BY version DESC OFFSET 1024 LIMIT 1;
    IF cutoff IS NOT NULL THEN
        DELETE FROM lcrag_file_changes WHERE collection = NEW.id AND version <= cutoff;
        INSERT INTO lcrag_file_changes (collection, version, name) VALUES (NEW.id, cutoff, '');
    END IF;
    RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER lcrag_version_raised AFTER UPDATE OF version ON lcrag_collections
    FOR EACH ROW WHEN (NEW.version IS DISTINCT FROM OLD.version) EXECUTE FUNCTION lcrag_version_raised();
"""

# Jobs that are queued, or running on a lease that ran out (their worker died), and whose collection no other live
# lease is indexing: one worker indexes a collection at a time.
_CLAIM = """
UPDATE lcrag_jobs SET state = 'running', attempts = attempts + 1, token = %(token)s, owner = %(owner)s,
    lease_until = now() + make_interval(secs => %(lease)s)
WHERE id IN (SELECT j.id FROM lcrag_jobs j
             WHERE (j.state = 'queued' OR (j.state = 'running' AND j.lease_until < now()))
               AND NOT EXISTS (SELECT 1 FROM lcrag_jobs r WHERE r.collection = j.collection AND r.id <> j.id
                               AND r.state = 'running' AND r.lease_until >= now())
             ORDER BY j.id LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
RETURNING id, collection, name, version, attempts
"""


class StoreUnavailable(OptionError):
    """The database cannot be reached, or is not one lcrag can use (one line, its URL's password redacted)."""


class StoreDown(LcragError):
    """The database cannot be reached now (refused, no connection within the pool's wait, one lost mid-query): HTTP
    503 with ``Retry-After``, an MCP tool error. Its message is the client's (it names no server); ``detail`` is the
    operator's one line (the store, its password redacted, and psycopg's reason). ``lost``: a connection was had and
    then lost, so a read may be tried again at once on a new one (:meth:`PostgresStore.read`). Not an InputError:
    nothing is wrong with what was asked (a file being parsed is not refused for it, a job is tried again)."""

    def __init__(self, detail: str, lost: bool = False):
        super().__init__("the collection store's database cannot be reached now; retry in a few seconds")
        self.detail, self.lost = detail, lost


def outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached now, rather than what a statement did (a full disk,
    a conflict, a bad query are not outages)."""
    import psycopg
    from psycopg_pool import PoolTimeout

    if isinstance(exc, PoolTimeout):
        return True
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate or ""
    return not state or state.startswith("08") or state in _OUTAGE_STATES


def _one_line(exc: BaseException) -> str:
    return redact_url(" ".join(str(exc).split()) or type(exc).__name__)  # psycopg's lines, as one


@dataclass(frozen=True)
class Job:
    """A claimed job: index collection ``name`` (id ``collection``) as of ``version`` or later."""

    id: int
    collection: str
    name: str
    version: int
    attempts: int
    token: str


def check_url(url: str) -> str:
    """``url`` when it names a PostgreSQL database, else a one-line error."""
    if not isinstance(url, str) or not url.startswith(SCHEMES):
        raise StoreUnavailable(f"--store (or LCRAG_STORE): a postgresql://USER@HOST/DATABASE URL, not "
                               f"{redact_url(str(url))[:80]!r}")
    return url


class PostgresStore:
    """One lcrag database: its schema, a pool of checked connections (thread-safe) and the job queue. The
    collections themselves are :class:`lcrag.store.postgres.PostgresCollections`'.

    ``connections``: the most this process holds; ``connect_timeout``: seconds one connection attempt may take;
    ``wait``: the most seconds a caller waits for a connection (a database down for less is ridden out, one down for
    longer is a :class:`StoreDown` after it)."""

    def __init__(self, url: str, connections: int = 8, connect_timeout: float = 5.0, wait: float = 3.0):
        from psycopg_pool import ConnectionPool

        self.url, self.shown = check_url(url), redact_url(url)
        self._timeout, self.wait = connect_timeout, wait
        with self._connect() as db:  # reachable, and the schema in place (one creator at a time); a clear refusal
            db.execute("SELECT pg_advisory_xact_lock(7305)")
            db.execute(SCHEMA)
        # psycopg_pool's own warnings are several lines each; an outage is logged here, one line per failure.
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
        # A failed connection attempt is retried with a doubling delay only for reconnect_timeout: kept short, so that
        # after an outage the next caller's attempt is made at once, not after a back-off grown through the outage.
        # Connections in autocommit: a write's block is a transaction of its own (connection()), and a read is
        # one statement sent alone (read()), with no BEGIN and COMMIT round trips around it.
        self._pool = ConnectionPool(url, min_size=min(2, connections), max_size=max(1, connections), open=False,
                                    kwargs={"connect_timeout": max(1, int(connect_timeout)), "autocommit": True},
                                    check=self._check, timeout=wait,
                                    reconnect_timeout=max(1.0, wait), name="lcrag")
        self._pool.open(wait=False)

    def _check(self, db) -> None:
        """psycopg_pool's check of a connection before it is handed out. A connection the server ended (a restart)
        says the others idle beside it were ended too: all are tried now and the dead replaced, so that the pool's
        next attempt (after its pause of about a second) gets a new connection, not the next dead one, and a restart
        costs the request a second, not an error."""
        from psycopg_pool import ConnectionPool

        try:
            ConnectionPool.check_connection(db)
        except Exception:
            self._pool.check()
            raise

    def _connect(self):
        import psycopg

        try:
            return psycopg.connect(self.url, connect_timeout=max(1, int(self._timeout)))
        except psycopg.Error as exc:
            raise StoreUnavailable(f"cannot use the store {self.shown}: {_one_line(exc)}") from None

    def _down(self, exc: BaseException, lost: bool) -> StoreDown:
        return StoreDown(f"the store {self.shown} cannot be reached: {_one_line(exc)}", lost)

    @contextmanager
    def _held(self, wait: float | None) -> Iterator[Any]:
        """A pooled connection (autocommit), waited for at most ``wait`` seconds (default: the store's); the
        database unreachable, before or while it is held, is a :class:`StoreDown`."""
        had = False
        try:
            with self._pool.connection(self.wait if wait is None else wait) as db:
                had = True
                yield db
        except Exception as exc:
            if not outage(exc):
                raise
            raise self._down(exc, had) from None

    @contextmanager
    def connection(self, wait: float | None = None) -> Iterator[Any]:
        """A connection in a transaction, committed when the block ends (rolled back on an exception); waits at
        most ``wait`` seconds (default: the store's) for it. The database unreachable, before or during the block,
        is a :class:`StoreDown`."""
        with self._held(wait) as db, db.transaction():
            yield db

    def read(self, query: Callable[[Any], T]) -> T:
        """``query(db)``, a read of one statement (no transaction around it: under READ COMMITTED a statement sees
        its own snapshot inside one as well), run once more on a new connection when the first was lost under it (a
        server restarted since it was checked): a read changes nothing, so running it twice is safe."""
        try:
            with self._held(None) as db:
                return query(db)
        except StoreDown as exc:
            if not exc.lost:
                raise
        with self._held(None) as db:
            return query(db)

    def ping(self, wait: float = 1.0) -> None:
        """``SELECT 1`` through the pool, waiting at most ``wait`` seconds for a connection (StoreDown if none)."""
        with self.connection(wait) as db:
            db.execute("SELECT 1").fetchone()

    def close(self) -> None:
        self._pool.close(timeout=5.0)

    # -- jobs --------------------------------------------------------------------------------------------------
    @staticmethod
    def queue(db, collection: str, name: str, version: int) -> None:
        """In ``db``'s transaction: queue the indexing of the collection at ``version`` (one queued job per
        collection: a job already queued is brought to this version)."""
        db.execute("INSERT INTO lcrag_jobs (collection, name, version) VALUES (%s, %s, %s) ON CONFLICT (collection) "
                   "WHERE state = 'queued' DO UPDATE SET version = greatest(lcrag_jobs.version, EXCLUDED.version)",
                   (collection, name, version))
        db.execute("SELECT pg_notify(%s, '')", (JOBS_CHANNEL,))

    def claim(self, owner: str, limit: int = 8, lease: float = 30.0) -> list[Job]:
        """Up to ``limit`` jobs that are queued, or whose lease ran out, now ``owner``'s for ``lease`` seconds."""
        token = uuid.uuid4().hex
        with self.connection() as db:
            rows = db.execute(_CLAIM, {"token": token, "owner": owner, "lease": lease, "limit": limit}).fetchall()
        return [Job(int(i), c, n, int(v), int(a), token) for i, c, n, v, a in sorted(rows)]

    def renew(self, jobs: list[Job], lease: float = 30.0) -> set[int]:
        """Extend the leases of ``jobs`` still held under their tokens; the ids still held."""
        if not jobs:
            return set()
        with self.connection() as db:
            rows = db.execute("UPDATE lcrag_jobs SET lease_until = now() + make_interval(secs => %s) "
                              "WHERE state = 'running' AND (id, token) IN (SELECT * FROM unnest(%s::bigint[], "
                              "%s::text[])) RETURNING id", (lease, [j.id for j in jobs], [j.token for j in jobs]))
            return {int(row[0]) for row in rows}

    def complete(self, job: Job, write: Callable[[Any], None] | None = None, error: str | None = None) -> bool:
        """Mark the job done (``error``: what it found wrong with the collection) and, in the same transaction,
        ``write(db)`` its result, if the job is still held under its claim's token (else nothing: another worker
        took it over); whether it was."""
        with self.connection() as db:
            held = db.execute("UPDATE lcrag_jobs SET state = 'done', error = %s, completions = completions + 1, "
                              "finished = now(), token = NULL WHERE id = %s AND token = %s AND state = 'running' "
                              "RETURNING id", (error, job.id, job.token))
            if held.fetchone() is None:
                return False
            if write is not None:
                write(db)
        return True

    def fail(self, job: Job, message: str, attempts: int = 3) -> None:
        """The job failed: queued again, or (after ``attempts``) given up with ``message``."""
        with self.connection() as db:
            state = "failed" if job.attempts >= attempts else "queued"
            if state == "queued" and db.execute("SELECT 1 FROM lcrag_jobs WHERE collection = %s AND state = 'queued'",
                                                (job.collection,)).fetchone():
                state = "superseded"  # a later change's job is queued: it indexes this one's files too
            db.execute("UPDATE lcrag_jobs SET state = %s, error = %s, token = NULL, finished = CASE WHEN %s::text = "
                       "'queued' THEN NULL ELSE now() END WHERE id = %s AND token = %s",
                       (state, message, state, job.id, job.token))
            if state == "queued":
                db.execute("SELECT pg_notify(%s, '')", (JOBS_CHANNEL,))

    def prune(self, retention: float) -> int:
        """Delete the jobs that finished (done, failed or superseded) more than ``retention`` seconds ago; how many
        went. Queued and running jobs are never touched."""
        with self.connection() as db:
            return db.execute("DELETE FROM lcrag_jobs WHERE state NOT IN ('queued', 'running') AND coalesce(finished, "
                              "created) < now() - make_interval(secs => %s)", (max(0.0, retention),)).rowcount

    def jobs(self) -> list[dict[str, Any]]:
        """Every job, as a row (for status and tests)."""
        with self.connection() as db:
            cursor = db.execute("SELECT id, collection, name, version, state, attempts, completions, owner, error "
                                "FROM lcrag_jobs ORDER BY id")
            names = [c.name for c in cursor.description]
            return [dict(zip(names, row)) for row in cursor.fetchall()]

    @contextmanager
    def listening(self, channel: str) -> Iterator[Callable[[float], list[str]]]:
        """A function ``wait(timeout)`` that returns the payloads notified on ``channel`` (at least one, or none when
        ``timeout`` seconds pass), over a connection of its own for the block. A connection lost (the database
        restarted) is made again by the next ``wait``s, each trying once and waiting out its ``timeout`` meanwhile:
        what was notified while it was down is missed (every listener also looks for itself)."""
        held = [self._listener(channel)]  # the block starts only with the database reachable (else StoreDown)

        def wait(timeout: float) -> list[str]:
            import psycopg

            if held[0] is None:
                try:
                    held[0] = self._listener(channel)
                except StoreDown:
                    time.sleep(timeout)
                    return []
                log.warning("the store %s is reachable again: listening on %s", self.shown, channel)
            try:
                return [n.payload for n in held[0].notifies(timeout=timeout, stop_after=1)]
            except psycopg.Error as exc:
                log.warning("%s; listening on %s again", self._down(exc, True).detail, channel)
                held[0].close()
                held[0] = None
                return []

        try:
            yield wait
        finally:
            if held[0] is not None:
                held[0].close()

    def _listener(self, channel: str):
        import psycopg

        db = None
        try:
            db = psycopg.connect(self.url, autocommit=True, connect_timeout=max(1, int(self._timeout)))
            db.execute(f"LISTEN {channel}")
        except psycopg.Error as exc:
            if db is not None:
                db.close()
            raise self._down(exc, False) from None
        return db


@contextmanager
def leased(store: PostgresStore, jobs: list[Job], lease: float) -> Iterator[set[int]]:
    """Keep the leases of ``jobs`` renewed while the block runs; yields the ids of the jobs lost meanwhile (taken
    over by another worker after a renewal failed in time)."""
    lost: set[int] = set()
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(lease / 3):
            try:
                lost.update({j.id for j in jobs} - store.renew(jobs, lease))
            except Exception:  # noqa: BLE001 - a database hiccup: the next renewal may pass; the lease fences it
                continue

    thread = threading.Thread(target=renew, daemon=True, name="lcrag-lease")
    thread.start()
    try:
        yield lost
    finally:
        stop.set()
        thread.join()


def work(store: PostgresStore, handle: Callable[[Job], tuple], owner: str, stop: threading.Event,
         lease: float = 30.0, idle: float = 1.0) -> int:
    """Claim and run jobs one at a time until ``stop`` is set: ``handle(job)`` gives the arguments of
    :meth:`PostgresStore.complete` after the job (``(write, error)``); an exception fails the job (claimed again, at
    most three times in all). The jobs completed."""
    done = 0
    with store.listening(JOBS_CHANNEL) as wait:
        while not stop.is_set():
            jobs = store.claim(owner, 1, lease)
            if not jobs:
                wait(idle)
                continue
            with leased(store, jobs, lease):
                try:
                    outcome = handle(jobs[0])
                except Exception as exc:  # noqa: BLE001 - whatever failed, the job is failed, not left running
                    store.fail(jobs[0], f"{type(exc).__name__}: {exc}")
                    continue
            done += store.complete(jobs[0], *outcome)
    return done
