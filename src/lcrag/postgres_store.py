"""Collections shared by several processes in PostgreSQL (psycopg 3, plain SQL): collections with a version, files
as content-addressed blobs, per-file segments (what parsing a file gave, kept by its content and what the parse
depends on), an answer cache, and the ingestion job queue with leases.

Every change to a collection (a file added or removed, a file's segment written) raises its ``version`` in the same
transaction and sends ``NOTIFY lcrag_changes, 'name:version'``: a process that keeps anything derived from a
collection compares the version it read it at with the current one (one indexed lookup per question) and reads it
again when they differ.

Jobs (:meth:`PostgresStore.claim`) are rows claimed with ``FOR UPDATE SKIP LOCKED`` under a lease (``lease_until``)
that the claimer renews while it works (:meth:`renew`); a job whose lease ran out (its worker died) is claimed again
by another. Each claim has its own token, and a result is written only in the transaction that marks the job done
under that token (:meth:`complete`): a worker that lost its lease (paused past it, then woke) writes nothing, so a
job runs to completion once. docs/job-queue.md says why this and not a queue library."""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from lcrag.errors import OptionError
from lcrag.redaction import redact_url

CHANNEL = "lcrag_changes"
JOBS_CHANNEL = "lcrag_jobs"
SCHEMES = ("postgresql://", "postgres://")

SCHEMA = """
CREATE TABLE IF NOT EXISTS lcrag_collections (
    name text PRIMARY KEY,
    id text NOT NULL UNIQUE,
    created double precision NOT NULL,
    version bigint NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS lcrag_blobs (hash text PRIMARY KEY, content bytea NOT NULL);
CREATE TABLE IF NOT EXISTS lcrag_files (
    collection text NOT NULL REFERENCES lcrag_collections (id) ON DELETE CASCADE,
    name text NOT NULL,
    hash text NOT NULL REFERENCES lcrag_blobs (hash),
    key text NOT NULL,
    bytes bigint NOT NULL,
    added timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (collection, name)
);
CREATE INDEX IF NOT EXISTS lcrag_files_segment ON lcrag_files (hash, key);
CREATE TABLE IF NOT EXISTS lcrag_segments (
    hash text NOT NULL,
    key text NOT NULL,
    data bytea NOT NULL,
    error text,
    PRIMARY KEY (hash, key)
);
CREATE TABLE IF NOT EXISTS lcrag_jobs (
    id bigserial PRIMARY KEY,
    hash text NOT NULL,
    key text NOT NULL,
    name text NOT NULL,
    state text NOT NULL DEFAULT 'queued',
    attempts integer NOT NULL DEFAULT 0,
    token text,
    owner text,
    lease_until timestamptz,
    completions integer NOT NULL DEFAULT 0,
    error text,
    created timestamptz NOT NULL DEFAULT now(),
    finished timestamptz,
    UNIQUE (hash, key)
);
CREATE INDEX IF NOT EXISTS lcrag_jobs_open ON lcrag_jobs (id) WHERE state IN ('queued', 'running');
CREATE TABLE IF NOT EXISTS lcrag_answers (
    key text PRIMARY KEY,
    value bytea NOT NULL,
    created timestamptz NOT NULL DEFAULT now()
);
"""

# A collection's files with where each one stands: done (its segment written; ``error`` its refusal, if any),
# failed (its job gave up) or waiting.
_FILES = """
SELECT f.name, f.bytes, f.hash, f.key, s.hash IS NOT NULL, s.error, j.state, j.error
FROM lcrag_files f JOIN lcrag_collections c ON c.id = f.collection
LEFT JOIN lcrag_segments s ON s.hash = f.hash AND s.key = f.key
LEFT JOIN lcrag_jobs j ON j.hash = f.hash AND j.key = f.key
WHERE c.name = %s ORDER BY f.name
"""

_CLAIM = """
UPDATE lcrag_jobs SET state = 'running', attempts = attempts + 1, token = %(token)s, owner = %(owner)s,
    lease_until = now() + make_interval(secs => %(lease)s)
WHERE id IN (SELECT id FROM lcrag_jobs
             WHERE state = 'queued' OR (state = 'running' AND lease_until < now())
             ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
RETURNING id, hash, key, name, attempts
"""

_TOUCH = """
UPDATE lcrag_collections SET version = version + 1
WHERE id IN (SELECT collection FROM lcrag_files WHERE hash = %s AND key = %s) RETURNING name, version
"""


class StoreUnavailable(OptionError):
    """The database cannot be reached, or is not one lcrag can use (one line, its URL's password redacted)."""


@dataclass(frozen=True)
class FileRow:
    """A collection's file as the store holds it, and where its segment stands."""

    name: str
    bytes: int
    hash: str
    key: str
    done: bool
    error: str | None  # the file's refusal (its segment says it could not be read) or its job's failure
    failed: bool  # its job gave up


@dataclass(frozen=True)
class Job:
    """A claimed job: make the segment of blob ``hash`` for file ``name`` under ``key``."""

    id: int
    hash: str
    key: str
    name: str
    attempts: int
    token: str


def check_url(url: str) -> str:
    """``url`` when it names a PostgreSQL database, else a one-line error."""
    if not isinstance(url, str) or not url.startswith(SCHEMES):
        raise StoreUnavailable(f"--store (or LCRAG_STORE): a postgresql://USER@HOST/DATABASE URL, not "
                               f"{redact_url(str(url))[:80]!r}")
    return url


class PostgresStore:
    """One database's collections, segments, answers and jobs; thread-safe (a small pool of connections)."""

    def __init__(self, url: str, connections: int = 8, connect_timeout: float = 5.0):
        self.url, self.shown = check_url(url), redact_url(url)
        self._timeout = connect_timeout
        self._idle: queue.LifoQueue = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(connections)
        with self.connection() as db:  # reachable, and the schema in place (one creator at a time)
            db.execute("SELECT pg_advisory_xact_lock(7305)")
            db.execute(SCHEMA)

    def _connect(self):
        import psycopg

        try:
            return psycopg.connect(self.url, connect_timeout=max(1, int(self._timeout)))
        except psycopg.Error as exc:
            reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise StoreUnavailable(f"cannot use the store {self.shown}: {redact_url(reason)}") from None

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A connection in a transaction, committed when the block ends (rolled back on an exception)."""
        import psycopg

        with self._slots:
            try:
                db = self._idle.get_nowait()
            except queue.Empty:
                db = self._connect()
            try:
                with db.transaction():
                    yield db
            except psycopg.OperationalError:
                db.close()  # a broken connection is not given back
                raise
            except BaseException:
                if db.closed or db.broken:
                    raise
                self._idle.put(db)
                raise
            self._idle.put(db)

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return

    # -- collections -----------------------------------------------------------------------------------------
    def create(self, name: str) -> None:
        with self.connection() as db:
            db.execute("INSERT INTO lcrag_collections (name, id, created) VALUES (%s, %s, %s) "
                       "ON CONFLICT (name) DO NOTHING", (name, uuid.uuid4().hex, time.time()))

    def names(self) -> list[str]:
        with self.connection() as db:
            return [row[0] for row in db.execute("SELECT name FROM lcrag_collections ORDER BY name")]

    def identity(self, name: str) -> tuple[str, int] | None:
        """The collection's id and version (None: there is no such collection)."""
        with self.connection() as db:
            row = db.execute("SELECT id, version FROM lcrag_collections WHERE name = %s", (name,)).fetchone()
        return None if row is None else (row[0], int(row[1]))

    def delete(self, name: str) -> bool:
        """Delete the collection and its files (blobs no other collection holds go too); whether it existed."""
        with self.connection() as db:
            row = db.execute("DELETE FROM lcrag_collections WHERE name = %s RETURNING id", (name,)).fetchone()
            if row is None:
                return False
            db.execute("DELETE FROM lcrag_blobs b WHERE NOT EXISTS (SELECT 1 FROM lcrag_files f WHERE f.hash = b.hash)")
            db.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{name}:0"))
        return True

    def files(self, name: str) -> list[FileRow]:
        with self.connection() as db:
            rows = db.execute(_FILES, (name,)).fetchall()
        return [FileRow(n, int(b), h, k, bool(done), seg_error or (job_error if state == "failed" else None),
                        state == "failed") for n, b, h, k, done, seg_error, state, job_error in rows]

    def add_file(self, name: str, filename: str, content: bytes, digest: str, key: str,
                 place: Any) -> tuple[str, bool] | None:
        """Store ``content`` (SHA-256 ``digest``) in collection ``name`` under the first name ``place(taken)`` gives
        that is not taken (``taken``: the names in the collection of other content; same content under one of its
        names: that one) and queue its segment's job unless it is made; (stored name, whether new), None: no such
        collection."""
        with self.connection() as db:
            row = db.execute("SELECT id FROM lcrag_collections WHERE name = %s FOR UPDATE", (name,)).fetchone()
            if row is None:
                return None
            held = dict(db.execute("SELECT name, hash FROM lcrag_files WHERE collection = %s", (row[0],)).fetchall())
            stored = place(held, digest)
            if held.get(stored) == digest:
                return stored, False
            db.execute("INSERT INTO lcrag_blobs (hash, content) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                       (digest, content))
            db.execute("INSERT INTO lcrag_files (collection, name, hash, key, bytes) VALUES (%s, %s, %s, %s, %s)",
                       (row[0], stored, digest, key, len(content)))
            self._queue(db, digest, key, stored)
            version = db.execute("UPDATE lcrag_collections SET version = version + 1 WHERE id = %s RETURNING version",
                                 (row[0],)).fetchone()[0]
            db.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{name}:{version}"))
        return stored, True

    @staticmethod
    def _queue(db, digest: str, key: str, filename: str) -> None:
        made = db.execute("SELECT 1 FROM lcrag_segments WHERE hash = %s AND key = %s", (digest, key)).fetchone()
        if made is None:
            db.execute("INSERT INTO lcrag_jobs (hash, key, name) VALUES (%s, %s, %s) ON CONFLICT (hash, key) DO "
                       "UPDATE SET state = 'queued', error = NULL WHERE lcrag_jobs.state = 'failed'",
                       (digest, key, filename))
            db.execute("SELECT pg_notify(%s, '')", (JOBS_CHANNEL,))

    def blob(self, digest: str) -> bytes | None:
        with self.connection() as db:
            row = db.execute("SELECT content FROM lcrag_blobs WHERE hash = %s", (digest,)).fetchone()
        return None if row is None else bytes(row[0])

    def segments(self, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], bytes]:
        """The segments made for these (hash, key) pairs (those not made yet are left out)."""
        if not pairs:
            return {}
        with self.connection() as db:
            rows = db.execute("SELECT hash, key, data FROM lcrag_segments WHERE (hash, key) IN "
                              "(SELECT * FROM unnest(%s::text[], %s::text[]))",
                              ([h for h, _ in pairs], [k for _, k in pairs])).fetchall()
        return {(h, k): bytes(d) for h, k, d in rows}

    # -- answers -----------------------------------------------------------------------------------------------
    def answer(self, key: str) -> bytes | None:
        with self.connection() as db:
            row = db.execute("SELECT value FROM lcrag_answers WHERE key = %s", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def keep_answer(self, key: str, value: bytes) -> None:
        with self.connection() as db:
            db.execute("INSERT INTO lcrag_answers (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET "
                       "value = EXCLUDED.value, created = now()", (key, value))

    # -- jobs --------------------------------------------------------------------------------------------------
    def claim(self, owner: str, limit: int = 8, lease: float = 30.0) -> list[Job]:
        """Up to ``limit`` jobs that are queued, or whose lease ran out, now ``owner``'s for ``lease`` seconds."""
        token = uuid.uuid4().hex
        with self.connection() as db:
            rows = db.execute(_CLAIM, {"token": token, "owner": owner, "lease": lease, "limit": limit}).fetchall()
        return [Job(int(i), h, k, n, int(a), token) for i, h, k, n, a in sorted(rows)]

    def renew(self, jobs: list[Job], lease: float = 30.0) -> set[int]:
        """Extend the leases of ``jobs`` still held under their tokens; the ids still held."""
        if not jobs:
            return set()
        with self.connection() as db:
            rows = db.execute("UPDATE lcrag_jobs SET lease_until = now() + make_interval(secs => %s) "
                              "WHERE state = 'running' AND (id, token) IN (SELECT * FROM unnest(%s::bigint[], "
                              "%s::text[])) RETURNING id", (lease, [j.id for j in jobs], [j.token for j in jobs]))
            return {int(row[0]) for row in rows}

    def complete(self, job: Job, data: bytes, error: str | None = None) -> bool:
        """Write the job's segment and mark it done, if the job is still held under its claim's token (else
        nothing: another worker took it over); whether it was written."""
        with self.connection() as db:
            held = db.execute("UPDATE lcrag_jobs SET state = 'done', completions = completions + 1, "
                              "finished = now(), token = NULL WHERE id = %s AND token = %s AND state = 'running' "
                              "RETURNING id", (job.id, job.token)).fetchone()
            if held is None:
                return False
            db.execute("INSERT INTO lcrag_segments (hash, key, data, error) VALUES (%s, %s, %s, %s) "
                       "ON CONFLICT DO NOTHING", (job.hash, job.key, data, error))
            self._touch(db, job)
        return True

    def fail(self, job: Job, message: str, attempts: int = 3) -> None:
        """The job failed: queued again, or (after ``attempts``) given up with ``message``."""
        with self.connection() as db:
            state = "failed" if job.attempts >= attempts else "queued"
            row = db.execute("UPDATE lcrag_jobs SET state = %s, error = %s, token = NULL WHERE id = %s AND "
                             "token = %s RETURNING id", (state, message, job.id, job.token)).fetchone()
            if row is not None and state == "failed":
                self._touch(db, job)

    @staticmethod
    def _touch(db, job: Job) -> None:
        for name, version in db.execute(_TOUCH, (job.hash, job.key)).fetchall():
            db.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{name}:{version}"))

    def jobs(self) -> list[dict[str, Any]]:
        """Every job, as a row (for status and tests)."""
        with self.connection() as db:
            cursor = db.execute("SELECT id, hash, key, name, state, attempts, completions, owner, error "
                                "FROM lcrag_jobs ORDER BY id")
            names = [c.name for c in cursor.description]
            return [dict(zip(names, row)) for row in cursor.fetchall()]

    @contextmanager
    def listening(self, channel: str) -> Iterator[Any]:
        """A function ``wait(timeout)`` that returns the payloads notified on ``channel`` (at least one, or none when
        ``timeout`` seconds pass), over a connection of its own for the block."""
        import psycopg

        try:
            db = psycopg.connect(self.url, autocommit=True, connect_timeout=max(1, int(self._timeout)))
        except psycopg.Error:
            raise StoreUnavailable(f"cannot use the store {self.shown}: it cannot be reached") from None
        with db:
            db.execute(f"LISTEN {channel}")
            yield lambda timeout: [n.payload for n in db.notifies(timeout=timeout, stop_after=1)]


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


def work(store: PostgresStore, handle, owner: str, stop: threading.Event, batch: int = 8, lease: float = 30.0,
         idle: float = 1.0) -> int:
    """Claim and run jobs until ``stop`` is set: ``handle(jobs)`` gives each job's ``(segment bytes, refusal or
    None)`` (an exception for a job: failed, retried by the next claim); the jobs completed."""
    done = 0
    with store.listening(JOBS_CHANNEL) as wait:
        while not stop.is_set():
            jobs = store.claim(owner, batch, lease)
            if not jobs:
                wait(idle)
                continue
            with leased(store, jobs, lease):
                outcomes = handle(jobs)
            for job in jobs:
                outcome = outcomes.get(job.id)
                if isinstance(outcome, BaseException) or outcome is None:
                    store.fail(job, str(outcome) if outcome else "no outcome")
                elif store.complete(job, *outcome):
                    done += 1
    return done
