"""The PostgreSQL backend of :class:`lcrag.store.base.CollectionStore` (``lcrag serve --store postgresql://…``):
several replicas and ``lcrag worker`` processes share one database's collections, files, segments, state and
answers (schema and job queue: :mod:`lcrag.store.postgres_database`).

A file's bytes are a blob in the database, keyed by their SHA-256 (the same file in two collections is kept once),
stored and read back in parts of :data:`BLOB_PART` bytes, so no file is ever whole in a process's memory.
Each replica mirrors the collections it reads in a local folder (``ROOT/<name>/files/<file>``, hard links to one copy
per content under ``ROOT/.blobs``), so its parser reads local files and the service's paths work as with the
embedded store. A change (a file added or removed) makes a new version and queues the collection's indexing as a
job; any replica or worker claims it under a lease (:func:`lcrag.store.postgres_database.work`) and runs the service's own
indexing (files parsed, chunked and embedded once per content: their segments are in the database). The state every
replica reports is the database's: ``indexing`` until a job has indexed the collection's current version. A
collection's identity here is its id and version, so a replica's kept document and indexes are read again when
another replica changed the collection (checked per question: one indexed lookup)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from lcrag.documents.sandbox import _shape_checked, content_of, encode
from lcrag.core.errors import InputError
from lcrag.core.lru import SizedLRU
from lcrag.store.postgres_database import CHANNEL, Job, PostgresStore, StoreDown, work
from lcrag.store.collections import (NAME, Collections, EmptyCollection, Listed, NotFound, Status, StorageError,
                                      _numbered, receive_upload, safe_filename)
from lcrag.store.derived import forget_collection_caches, forget_contents
from lcrag.store.base import KEPT_ANSWERS, CollectionState, FileRecord, IndexCost, Segment, SegmentKey
from lcrag.core.files import ensure_directory

log = logging.getLogger(__name__)

Index = Callable[[str, Path, Callable[[int, int], None]], list[str]]
BLOBS = ".blobs"
BLOB_PART = 8 << 20  # bytes per row of a stored file: what is in memory at once when it is stored or copied back
PROGRESS_SECONDS = 0.5  # how often a job's progress (files read) is written while it indexes
# Segments read or written, kept in memory: one key always makes the same segment, so a replica that has read one
# never asks the database for it again (a collection's pass over its files asks only for the new ones).
SEGMENT_CACHE_BYTES = 256 << 20
JOB_RETENTION = 86400.0  # seconds a finished job's row is kept (--job-retention)
HOUSEKEEPING_SECONDS = 600.0  # at most this long between two prunings of finished jobs and of what no file holds
SWEEP_SECONDS = 1.0  # after a change, local copies the database no longer holds are looked for at most this often
UPLOAD, COPY = ".upload-", ".blob-"  # temporary files under ROOT/.blobs, each named PREFIX<pid>-<random>
_UNHELD = "NOT EXISTS (SELECT 1 FROM lcrag_files f WHERE f.hash = {0})"
# What no file holds any more, in the database: a parse or segment a job made while its file was being removed (or
# a parse an earlier lcrag kept without its content), a blob whose removal an upload of the same bytes raced, an
# answer of a version that is no longer its collection's.
_ORPHANS = ("DELETE FROM lcrag_parses p WHERE p.content IS NULL OR " + _UNHELD.format("p.content"),
            "DELETE FROM lcrag_segments s WHERE " + _UNHELD.format("s.hash"),
            "DELETE FROM lcrag_blobs b WHERE " + _UNHELD.format("b.hash"),
            "DELETE FROM lcrag_answers a WHERE NOT EXISTS (SELECT 1 FROM lcrag_collections c WHERE c.id = "
            "a.collection AND c.version = a.version)")

_STATE = ("SELECT id, version, state, state_version, done, error, skipped, updated, "
          "coalesce(c.files, (SELECT count(*) FROM lcrag_files f WHERE f.collection = c.id)) FROM lcrag_collections c "
          "WHERE name = %s")
_ROW = "SELECT id, version FROM lcrag_collections WHERE name = %s"  # what most calls need: no count of the files
# A collection's files whole, with the version they are of (one statement: one snapshot).
_ALL_FILES = ("SELECT c.version, f.name, f.hash, f.bytes, f.added FROM lcrag_collections c LEFT JOIN lcrag_files f "
              "ON f.collection = c.id WHERE c.id = %s")
# The files changed since a version, each as it is now (no hash: removed), with the version they are of, how many
# files the collection has and up to which version its older changes are gone (lcrag_file_changes), in one snapshot.
_CHANGED_FILES = """
WITH touched AS (SELECT DISTINCT name FROM lcrag_file_changes WHERE collection = %(id)s AND version > %(since)s
                 AND name <> '')
SELECT c.version, coalesce(c.files, (SELECT count(*) FROM lcrag_files n WHERE n.collection = c.id)),
       (SELECT max(version) FROM lcrag_file_changes g WHERE g.collection = c.id AND g.name = ''),
       t.name, f.hash, f.bytes, f.added
FROM lcrag_collections c LEFT JOIN touched t ON true LEFT JOIN lcrag_files f ON f.collection = c.id AND f.name = t.name
WHERE c.id = %(id)s
"""


def _spans(data: bytes) -> tuple[tuple[int, int], ...]:
    import numpy as np

    return tuple((int(a), int(b)) for a, b in np.frombuffer(data, dtype="<i8").reshape(-1, 2))


def _span_bytes(spans: tuple[tuple[int, int], ...]) -> bytes:
    import numpy as np

    return np.asarray(spans, dtype="<i8").reshape(-1, 2).tobytes()


def _state(name: str, row: tuple) -> CollectionState:
    """A collection's state from its row: what indexing recorded for the current version, else indexing."""
    cid, version, state, state_version, done, error, skipped, updated, files = row
    if state_version != version:
        state, done, error, skipped = ("indexing" if files else "empty"), done, None, ()
    return CollectionState(name, cid, int(version), state, int(files), min(int(done), int(files)), error,
                           tuple(skipped or ()), float(updated))


def _binary(db, query: str, params: tuple):
    """``query`` run for results in binary: a bytea comes as its bytes, not as hex text twice its size (which
    PostgreSQL cannot even build past 512 MB)."""
    return db.cursor(binary=True).execute(query, params)


def _store_blob(db, digest: str, local: Path) -> None:
    """A file's bytes as blob ``digest``, sent in parts of :data:`BLOB_PART` bytes (an upload never whole in memory);
    nothing when another upload stored it first."""
    if db.execute("INSERT INTO lcrag_blobs (hash, content) VALUES (%s, '') ON CONFLICT DO NOTHING RETURNING hash",
                  (digest,)).fetchone() is None:
        return
    with open(local, "rb") as f:
        for part, content in enumerate(iter(lambda: f.read(BLOB_PART), b"")):
            db.execute("INSERT INTO lcrag_blob_parts (hash, part, content) VALUES (%s, %s, %s)", (digest, part, content))


def _load_blob(db, digest: str, out) -> bool:
    """Write blob ``digest`` to ``out`` part by part (a blob stored before parts is its one ``content``); False when
    there is no such blob."""
    legacy = _binary(db, "SELECT content FROM lcrag_blobs WHERE hash = %s", (digest,)).fetchone()
    if legacy is None:
        return False
    out.write(legacy[0])
    parts = db.cursor(binary=True).stream("SELECT content FROM lcrag_blob_parts WHERE hash = %s ORDER BY part",
                                          (digest,))
    for (content,) in parts:
        out.write(content)
    return True


def _collect(db, hashes: list[str]) -> None:
    """The blobs, segments and parses of ``hashes`` that no file holds any more (a file removed, a collection
    deleted): a content still in another file, of any collection, is kept. Each content in a savepoint of its own, in a fixed
    order: one whose blob gained a file meanwhile (an upload of the same bytes, not committed when this looked,
    commits while the blob is being deleted: the foreign key refuses it) is kept, blob and segments, and the rest
    still go. A blob collected before such an upload inserts its file is stored again by that upload (its foreign
    key fails; :meth:`PostgresCollections._insert`)."""
    import psycopg

    gone = _UNHELD
    for digest in sorted(set(hashes)):
        try:
            with db.transaction():  # a savepoint
                db.execute(f"DELETE FROM lcrag_blobs b WHERE b.hash = %s AND {gone.format('b.hash')}", (digest,))
                db.execute(f"DELETE FROM lcrag_segments s WHERE s.hash = %s AND {gone.format('s.hash')}", (digest,))
                db.execute(f"DELETE FROM lcrag_parses p WHERE p.content = %s AND {gone.format('p.content')}",
                           (digest,))
        except psycopg.errors.ForeignKeyViolation:
            log.info("a content being collected gained a file meanwhile: kept")


def _left_by_the_dead(name: str, prefix: str) -> bool:
    """Whether a temporary file ``PREFIX<pid>-…`` was left by a process that is no longer running (or by an lcrag
    that did not name its process in it): a process sharing this cache directory may be writing its own."""
    pid = name[len(prefix):].partition("-")[0]
    if not pid.isdigit() or int(pid) == os.getpid():  # (our own pid: a dead process's, reused; we wrote none yet)
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: running
        return False
    return False


def _same_file(entry: os.DirEntry, blob: Path) -> bool:
    """Whether a mirror's file is a link to the local copy ``blob``."""
    try:
        return entry.inode() == blob.stat().st_ino
    except OSError:
        return False


@contextmanager
def _stored(what: str) -> Iterator[None]:
    """A full disk or database (or any failure of this replica's disk) as a :class:`StorageError` saying ``what``
    could not be done: 507 when full. PostgreSQL's insufficient resources (class 53) are its storage's."""
    import psycopg

    try:
        yield
    except OSError as exc:
        raise StorageError(what, exc) from None
    except psycopg.Error as exc:
        if not str(getattr(exc, "sqlstate", "") or "").startswith("53"):
            raise
        raise StorageError(what, exc) from None


class PostgresCollections:
    """Collections in PostgreSQL, mirrored under ``root`` for this replica; ``index(name, files_dir, progress)`` is
    the service's indexing, run by jobs (:meth:`start_jobs`)."""

    public = Collections.public  # messages name files as clients know them, never a path of this replica's

    def __init__(self, url: str, root: Path, index: Index | None = None, connections: int = 32,
                 lease: float = 30.0, job_retention: float = JOB_RETENTION):
        self.db = PostgresStore(url, connections)
        self.root = ensure_directory(Path(root).absolute(), "the collections directory", InputError)
        self._index, self.lease = index, lease
        self._mirror = threading.Lock()
        # By collection: its files as this replica last read them from the database (each name's FileRecord) and
        # its mirror folder as last brought up to date (each name's lstat), each at a version and brought to a later
        # one from the files changed since (lcrag_file_changes): an upload costs the same in a collection of 100
        # files or of 5,000. Popping a collection's entry makes it read (or its folder listed) whole again.
        self._records: dict[str, Listed] = {}
        self._mirrored: dict[str, Listed] = {}
        self._segments: SizedLRU[SegmentKey, Segment] = SizedLRU(
            SEGMENT_CACHE_BYTES, lambda seg: 16 * len(seg.spans) + len(seg.embeddings or b"") + 200)
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []
        self.job_retention = job_retention
        self._parses = None  # this machine's parse cache (:meth:`shared_parses`): a removed content's parses go
        self._removed: set[str] = set()  # contents whose local copies went before the parse cache was known
        # collections changed since the last sweep, each with when it was first seen changed: what was cached for
        # them before then may hold a removed file's text (lcrag.store.derived)
        self._touched: dict[str, float] = {}
        self._swept, self._kept_house = 0.0, 0.0
        # What the next sweep looks at: the contents of files seen removed or replaced (a change of a listing this
        # replica held), or every local copy when a change was not seen file by file.
        self._unheld_maybe: set[str] = set()
        self._unheld_lock = threading.Lock()  # both, noted by any thread reading a listing, taken by the sweep
        self._sweep_whole = False
        self.clean_up()

    # -- collections -----------------------------------------------------------------------------------------
    def _row(self, name: str) -> tuple:
        if not NAME.fullmatch(name):
            raise NotFound(f"unknown collection {name[:64]!r}")
        row = self.db.read(lambda db: db.execute(_ROW, (name,)).fetchone())
        if row is None:
            raise NotFound(f"unknown collection {name!r}")
        return row

    def create(self, name: str) -> dict:
        if not NAME.fullmatch(name):
            raise InputError(f"collection names are 1-64 letters, digits, '_', '.' or '-' (starting with a letter or "
                             f"digit), not {name[:64]!r}")
        with self.db.connection() as db:
            db.execute("INSERT INTO lcrag_collections (name, id, created, version) VALUES (%s, %s, %s, "
                       "nextval('lcrag_versions')) ON CONFLICT (name) DO NOTHING", (name, uuid.uuid4().hex, time.time()))
        return self.describe(name)

    def names(self) -> list[str]:
        query = "SELECT name FROM lcrag_collections ORDER BY name"
        return self.db.read(lambda db: [row[0] for row in db.execute(query)])

    def delete(self, name: str) -> None:
        with _stored(f"collection {name[:64]!r} could not be deleted"), self.db.connection() as db:
            hashes = [row[0] for row in db.execute("SELECT DISTINCT f.hash FROM lcrag_files f JOIN lcrag_collections c "
                                                   "ON c.id = f.collection WHERE c.name = %s", (name,))]
            row = db.execute("DELETE FROM lcrag_collections WHERE name = %s RETURNING id", (name,)).fetchone()
            if row is None:
                raise NotFound(f"unknown collection {name[:64]!r}")
            db.execute("DELETE FROM lcrag_answers WHERE collection = %s", (row[0],))
            _collect(db, hashes)
            db.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{name}:0"))

    def state(self, name: str) -> CollectionState:
        if not NAME.fullmatch(name):
            raise NotFound(f"unknown collection {name[:64]!r}")
        row = self.db.read(lambda db: db.execute(_STATE, (name,)).fetchone())
        if row is None:
            raise NotFound(f"unknown collection {name!r}")
        return _state(name, row)

    def status(self, name: str) -> Status:
        state = self.state(name)
        return Status(state.state, state.files, state.done, state.error, list(state.skipped), state.updated)

    def describe(self, name: str) -> dict:
        status = self.status(name)
        return {"name": name, "files": self.files(name), "status": asdict(status)}

    def version(self, name: str) -> int:
        return int(self._row(name)[1])

    def identity(self, name: str) -> str:
        """The collection's id and version: what a replica's kept document is read for (what is read of each file
        is kept by the collection's id alone, :meth:`collection_id`, and only the files changed are read again)."""
        row = self._row(name)
        return f"{row[0]}:{row[1]}"

    @staticmethod
    def identity_of(state: CollectionState) -> str:
        return f"{state.id}:{state.version}"  # as identity(): another replica's change is a new version

    def collection_id(self, name: str) -> str:
        """What tells this collection from an earlier one of the same name, whatever its version."""
        return self._row(name)[0]

    def set_state(self, name: str, version: int, state: str, done: int = 0, error: str | None = None,
                  skipped: tuple[str, ...] = (), db=None) -> bool:
        """Record the indexing state reached for ``version`` (in ``db``'s transaction when given: a job's)."""
        if db is None:
            with self.db.connection() as own:
                return self.set_state(name, version, state, done, error, skipped, own)
        row = db.execute("UPDATE lcrag_collections SET state = %s, state_version = version, done = %s, error = %s, "
                         "skipped = %s, updated = %s WHERE name = %s AND version = %s RETURNING version",
                         (state, done, error, list(skipped), time.time(), name, version)).fetchone()
        if row is not None:
            db.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{name}:{version}"))
        return row is not None

    def wait(self, name: str, timeout: float = 600) -> Status:
        """The collection's status once it is no longer indexing, or after ``timeout`` seconds."""
        give_up = time.monotonic() + timeout
        status = self.status(name)
        while status.state == "indexing" and time.monotonic() < give_up:
            time.sleep(min(0.05, max(0.0, give_up - time.monotonic())))
            status = self.status(name)
        return status

    # -- files -----------------------------------------------------------------------------------------------
    def file_records(self, name: str) -> list[FileRecord]:
        return self._files(name).items_values()

    def files(self, name: str) -> list[dict]:
        return self._files(name).files(lambda record: record.size)

    def _files(self, name: str) -> Listed:
        """The collection's files as the database has them now (each name's FileRecord): those this replica read
        for an earlier version, with only the files changed since read again; one lookup when nothing changed."""
        try:
            cid, version = self._row(name)
        except NotFound:
            with self._mirror:  # what this replica held of a deleted collection goes
                self._records.pop(name, None)
            raise
        kept = self._records.get(name)
        if kept is not None and kept.id == cid and kept.version == version:
            return kept
        files = self._changed_files(kept) if kept is not None and kept.id == cid else None
        if files is not None:
            self._note_removed(kept, files)
        else:
            self._sweep_all()  # (the files read whole: what went since is not known file by file)
            rows = self.db.read(lambda db: db.execute(_ALL_FILES, (cid,)).fetchall())
            if not rows:
                raise NotFound(f"unknown collection {name!r}")
            records = {n: FileRecord(n, h, int(b), float(a)) for _, n, h, b, a in rows if n is not None}
            files = Listed(cid, int(rows[0][0]), sorted(records), records)  # (Python's order, not the collation's)
        with self._mirror:
            current = self._records.get(name)
            if current is None or current.id != cid or current.version <= files.version:
                self._records[name] = files
        return files

    def _note_removed(self, kept: Listed, files: Listed) -> None:
        """The contents of the files ``kept`` held and ``files`` no longer holds (removed or replaced): their local
        copies are looked at by the next sweep."""
        changed = files.changed((kept.id, kept.version))
        if changed is None:
            self._sweep_all()
            return
        went = {was.content_hash for name in changed if (was := kept.stats.get(name)) is not None
                and ((now := files.stats.get(name)) is None or now.content_hash != was.content_hash)}
        with self._unheld_lock:
            self._unheld_maybe |= went

    def _sweep_all(self) -> None:
        """The next sweep looks at every local copy: a change was not seen file by file."""
        with self._unheld_lock:
            self._sweep_whole = True

    def _changed_files(self, kept: Listed) -> Listed | None:
        """``kept`` brought to the database's version from the files changed since; None when those are not known
        (older changes pruned) or the count disagrees (then the files are read whole)."""
        rows = self.db.read(lambda db: db.execute(_CHANGED_FILES, {"id": kept.id, "since": kept.version}).fetchall())
        if not rows:
            return None
        version, count, pruned = int(rows[0][0]), int(rows[0][1]), rows[0][2]
        if pruned is not None and int(pruned) > kept.version:
            return None
        records = {n: None if h is None else FileRecord(n, h, int(b), float(a)) for _, _, _, n, h, b, a in rows
                   if n is not None}
        files = kept.with_values(version, records)
        return files if len(files.names) == count else None

    def add_file(self, name: str, filename: str, chunks: Iterable[bytes], max_bytes: int) -> dict:
        """Stream an upload into the collection (:meth:`put_file`); a new file queues the collection's indexing,
        and so does the same file again while the collection is in error (its indexing failed, on a full disk
        say): a retry finishes what failed."""
        record, new = self.put_file(name, filename, chunks, max_bytes)
        if not new and self._index is not None and self.state(name).state == "error":
            self._index_again(name)
        return {"name": record.name, "bytes": record.size}

    def _index_again(self, name: str) -> None:
        """A new version of the collection, its indexing queued: every replica says indexing until a job has
        indexed it (a job for the version in error would leave it saying error meanwhile)."""
        with _stored(f"collection {name[:64]!r} could not be indexed again"), self.db.connection() as db:
            row = db.execute("SELECT id FROM lcrag_collections WHERE name = %s FOR UPDATE", (name,)).fetchone()
            if row is not None:
                self._changed(db, row[0], name)

    def put_file(self, name: str, filename: str, chunks: Iterable[bytes], max_bytes: int) -> tuple[FileRecord, bool]:
        """The upload, streamed to a temporary file, then stored in one transaction (its blob, its file, the new
        version and the indexing job): a full disk or database at any step leaves nothing
        (:class:`StorageError`)."""
        self._row(name)  # an unknown collection is refused before the upload is read
        wanted = safe_filename(filename)
        with _stored(f"{wanted} could not be stored"):
            local, digest, size = self._receive(chunks, max_bytes, wanted)
            try:
                stored, new = self._insert(name, wanted, local, digest, size)
            finally:
                local.unlink(missing_ok=True)
        return FileRecord(stored, digest, size, time.time()), new

    def _receive(self, chunks: Iterable[bytes], max_bytes: int, wanted: str) -> tuple[Path, str, int]:
        """The upload streamed once to a temporary file beside the local copies, hashed as it comes."""
        blobs = ensure_directory(self.root / BLOBS, "the collections directory", InputError)
        return receive_upload(chunks, blobs, f"{UPLOAD}{os.getpid()}-", wanted, max_bytes)

    def _insert(self, name: str, wanted: str, local: Path, digest: str, size: int) -> tuple[str, bool]:
        import psycopg

        try:
            return self._insert_once(name, wanted, local, digest, size)
        except psycopg.errors.ForeignKeyViolation:  # its blob was collected by a delete meanwhile: store it again
            return self._insert_once(name, wanted, local, digest, size)

    def _insert_once(self, name: str, wanted: str, local: Path, digest: str, size: int) -> tuple[str, bool]:
        with self.db.connection() as db:
            row = db.execute("SELECT id FROM lcrag_collections WHERE name = %s FOR UPDATE", (name,)).fetchone()
            if row is None:
                raise NotFound(f"collection {name!r} was deleted while {wanted} was being uploaded")
            stored, new = self._free_name(db, row[0], wanted, digest)
            if not new:
                return stored, False
            if db.execute("SELECT 1 FROM lcrag_blobs WHERE hash = %s", (digest,)).fetchone() is None:
                _store_blob(db, digest, local)
            db.execute("INSERT INTO lcrag_files (collection, name, hash, bytes, added) VALUES (%s, %s, %s, %s, %s)",
                       (row[0], stored, digest, size, time.time()))
            self._changed(db, row[0], name)
        self._keep_local(local, digest)
        return stored, True

    @staticmethod
    def _free_name(db, cid: str, wanted: str, digest: str) -> tuple[str, bool]:
        """The name an upload of ``digest`` is stored under in collection ``cid``: ``wanted`` unless another
        content has it, else the first free ``name (N).ext``; and whether it is new (the same content under one of
        those names is kept once)."""
        held = db.execute("SELECT hash FROM lcrag_files WHERE collection = %s AND name = %s", (cid, wanted)).fetchone()
        if held is None or held[0] == digest:
            return wanted, held is None
        candidates = [_numbered(wanted, i) for i in range(2, 1000)]
        taken = dict(db.execute("SELECT name, hash FROM lcrag_files WHERE collection = %s AND name = ANY(%s)",
                                (cid, candidates)).fetchall())
        stored = next((n for n in candidates if taken.get(n) in (None, digest)), None)
        if stored is None:
            raise InputError(f"{wanted}: 999 files of that name are already in the collection")
        return stored, stored not in taken

    def _changed(self, db, cid: str, name: str) -> None:
        """A new version of the collection, told to every replica, and its indexing queued (when this service
        indexes)."""
        version = db.execute("UPDATE lcrag_collections SET version = nextval('lcrag_versions') WHERE id = %s "
                             "RETURNING version", (cid,)).fetchone()[0]
        # Answers kept for an earlier version are never served again (each is looked up by the version now).
        db.execute("DELETE FROM lcrag_answers WHERE collection = %s AND version < %s", (cid, version))
        if self._index is not None:
            self.db.queue(db, cid, name, version)
        db.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{name}:{version}"))

    def remove_file(self, name: str, filename: str) -> None:
        with _stored(f"{filename[:40]!r} could not be removed"), self.db.connection() as db:
            row = db.execute("DELETE FROM lcrag_files f USING lcrag_collections c WHERE c.id = f.collection AND "
                             "c.name = %s AND f.name = %s RETURNING c.id, f.hash", (name, filename)).fetchone()
            if row is None:
                raise NotFound(f"no file {filename[:40]!r} in {name!r}")
            _collect(db, [row[1]])
            self._changed(db, row[0], name)

    def reindex(self, name: str) -> None:
        """Queue the collection's indexing (a job any replica or worker runs)."""
        row = self._row(name)
        with self.db.connection() as db:
            self.db.queue(db, row[0], name, int(row[1]))

    def reindex_all(self) -> None:
        """A new version of every collection, its indexing queued: what another run file's segments need (answers
        kept for the earlier versions are never served again)."""
        for name in self.names():
            self._index_again(name)

    # -- the local mirror ------------------------------------------------------------------------------------
    def _blob(self, digest: str) -> Path:
        return self.root / BLOBS / digest[:2] / digest

    def _keep_local(self, source: Path, digest: str) -> None:
        """The stored upload kept as this replica's local copy of its blob; when that fails (the file is in the
        database already) the copy is made from the database when it is first read."""
        target = self._blob(digest)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(source, target)
        except FileExistsError:
            pass
        except OSError as exc:
            log.warning("a stored file is not kept in this replica's mirror (%s): copied when read", exc.strerror)

    def _local_blob(self, digest: str) -> Path:
        """A local copy of blob ``digest`` (copied from the database the first time)."""
        target = self._blob(digest)
        if target.is_file():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f"{COPY}{os.getpid()}-")
        try:
            with os.fdopen(fd, "wb") as out, self.db.connection() as db:
                if not _load_blob(db, digest, out):
                    raise NotFound("a file of the collection was removed meanwhile")
            os.replace(tmp, target)
        finally:
            Path(tmp).unlink(missing_ok=True)
        return target

    def files_dir(self, name: str) -> Path:
        """The collection's folder in this replica's mirror (NotFound: no such collection); one lookup. Its files
        are brought up to date where they are read (:meth:`paths`, :meth:`listing`, :meth:`file`)."""
        self._row(name)
        return self.root / name / "files"

    def file(self, name: str, filename: str) -> Path:
        self._synced(name)
        return Collections.file(self, name, filename)

    def _synced(self, name: str) -> Path:
        """The collection's folder in the mirror, brought up to date with the database when its version moved since
        the last time (only the files added, removed or replaced since are touched); one lookup otherwise."""
        self._mirror_of(name)
        return self.root / name / "files"

    def _mirror_of(self, name: str) -> Listed:
        """The collection's mirror folder as the database has the collection now, each file with its lstat."""
        files = self._files(name)
        directory = self.root / name / "files"
        with self._mirror:  # (another process sharing this cache directory may be syncing it too: either wins)
            held = self._mirrored.get(name)
            if held is not None and held.id == files.id and held.version == files.version and directory.is_dir():
                return held
            touched = files.changed((held.id, held.version)) if held is not None and directory.is_dir() else None
            whole = touched is None
            directory.mkdir(parents=True, exist_ok=True)
            if whole:  # first seen here, another collection of that name, or too far behind
                with os.scandir(directory) as entries:
                    for entry in entries:
                        if not entry.name.startswith(".") and entry.name not in files.stats:
                            os.unlink(entry.path)
                touched = list(files.stats)
            for filename in touched:
                record = files.stats.get(filename)
                if record is None:
                    (directory / filename).unlink(missing_ok=True)
                else:
                    self._link(self._local_blob(record.content_hash), directory / filename)
            if whole:
                held = Listed.of(files.id, files.version, directory)
            else:
                held = held.updated(files.version, directory, {n: n not in files.stats for n in touched})
            self._mirrored[name] = held
        return held

    @staticmethod
    def _link(blob: Path, target: Path) -> None:
        """``target`` made a link to ``blob`` when it is not one already, in one step (a link beside it, renamed
        over it): a parser reading the file meanwhile finds the old or the new one, never none."""
        try:
            if os.lstat(target).st_ino == os.stat(blob).st_ino:
                return
        except FileNotFoundError:
            pass
        beside = target.with_name(f".link-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        os.link(blob, beside)
        try:
            os.replace(beside, target)
        finally:
            beside.unlink(missing_ok=True)

    def paths(self, name: str) -> list[Path]:
        directory = self.root / name / "files"
        return [directory / n for n in self._mirror_of(name).names]

    def listing(self, name: str) -> list[tuple[str, os.stat_result]]:
        """The collection's files in the mirror, by name, each with its ``lstat``."""
        return self._mirror_of(name).items()

    def listed(self, name: str) -> Listed:
        """The collection's files in the mirror now, with the changes that led there (:class:`Listed`)."""
        return self._mirror_of(name)

    def local_path(self, name: str, filename: str) -> Path:
        return self.file(name, filename)

    # -- what a removal leaves -------------------------------------------------------------------------------
    def clean_up(self) -> None:
        """At start-up: remove the partial uploads and copies of processes that died, the mirrors of collections
        deleted and of files removed while this replica was away, the local copies (and parses) of contents no file
        in the database holds, and, in the database, what no file holds and the jobs past their retention."""
        blobs = self.root / BLOBS
        try:
            for pattern, prefix in ((f"{UPLOAD}*", UPLOAD), (f"??/{COPY}*", COPY)):
                for leftover in blobs.glob(pattern):
                    if _left_by_the_dead(leftover.name, prefix):
                        leftover.unlink(missing_ok=True)
                        log.info("removed %s, cut short", leftover.name)
            with os.scandir(self.root) as entries:
                for entry in entries:
                    if not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False):
                        self._clean_mirror(entry.name)
            self._removed |= self.sweep()
        except OSError as exc:  # a read-only or failing cache directory: the store still serves
            log.warning("what the database no longer holds could not all be removed here: %s", exc)
        self.keep_house()

    def _clean_mirror(self, name: str) -> None:
        """The mirror of collection ``name`` as the database has it: removed with the collection, and each file
        that is not the database's (removed, or replaced by other content) unlinked; it is linked again when read."""
        directory = self.root / name
        try:
            wanted = {r.name: r.content_hash for r in self.file_records(name)}
        except NotFound:
            shutil.rmtree(directory, ignore_errors=True)
            self._touched.setdefault(name, time.time())
            return
        if not (directory / "files").is_dir():
            return
        with self._mirror, os.scandir(directory / "files") as entries:
            self._mirrored.pop(name, None)  # what it holds is read again at its next use
            for entry in entries:
                digest = wanted.get(entry.name)
                if entry.is_dir(follow_symlinks=False) or (digest is not None and _same_file(entry,
                                                                                                self._blob(digest))):
                    continue
                Path(entry.path).unlink(missing_ok=True)
                self._touched.setdefault(name, time.time())

    def _let_go(self, name: str) -> None:
        """After a change of collection ``name`` (this replica's or another's): its mirror here brought up to date,
        so a removed file's copy goes, or removed with the collection; the local copies no file holds go soon
        after (:meth:`sweep`)."""
        self._touched[name] = time.time()  # (the latest change: what was cached before it may hold a removed text)
        if not NAME.fullmatch(name) or not (self.root / name).is_dir():
            self._sweep_all()  # never mirrored here (a file uploaded through this replica is kept here)
            return
        try:
            self._synced(name)
        except NotFound:
            self._sweep_all()
            with self._mirror:
                self._mirrored.pop(name, None)
                if name not in self.names():
                    shutil.rmtree(self.root / name, ignore_errors=True)
        except (OSError, StorageError) as exc:  # its next read brings it up to date; the next start removes it
            log.warning("the local copies of collection %s could not be brought up to date: %s", name, exc)

    def sweep(self, whole: bool = True) -> set[str]:
        """Remove the local copies of the blobs no file in the database holds (their files removed, here or through
        another replica), this machine's parses and RAPTOR trees of them, and the completions and indexes cached
        for the collections changed since the last sweep before they changed (they may hold a removed file's text:
        :mod:`lcrag.store.derived`); the contents removed. Not ``whole``: only the contents of the files seen
        removed or replaced since the last sweep are looked at (the listener's rounds)."""
        self._swept = time.monotonic()
        touched, self._touched = self._touched, {}
        with self._unheld_lock:
            whole, self._sweep_whole = whole or self._sweep_whole, False
            maybe, self._unheld_maybe = self._unheld_maybe, set()
        if whole:
            local = {path.name: path for path in (self.root / BLOBS).glob("??/*") if not path.name.startswith(".")}
        else:  # only the contents of the files seen going: an upload into 5,000 files lists none of them
            local = {digest: path for digest in maybe if (path := self._blob(digest)).exists()}
        if not local:
            return set()
        with self.db.connection() as db:
            gone = {row[0] for row in db.execute("SELECT h FROM unnest(%s::text[]) AS t(h) WHERE "
                                                 + _UNHELD.format("t.h"), (sorted(local),))}
        for digest in gone:
            local[digest].unlink(missing_ok=True)
        if gone and self._parses is not None:
            self._parses.drop(gone)
        if gone:
            derived = forget_contents(self.root.parent, gone) + sum(
                forget_collection_caches(self.root.parent, name, before) for name, before in touched.items())
            log.info("removed the local copies of %d content(s) no file holds (and %d cache entries made from them)",
                     len(gone), derived)
        return gone

    def keep_house(self) -> None:
        """Prune the jobs finished more than :attr:`job_retention` seconds ago, and delete from the database what
        no file holds (a parse or segment made while its file was being removed)."""
        import psycopg

        self._kept_house = time.monotonic()
        pruned = self.db.prune(self.job_retention)
        orphans = 0
        with self.db.connection() as db:
            for statement in _ORPHANS:
                try:
                    with db.transaction():  # a savepoint: an upload of a blob being deleted refuses only this one
                        orphans += db.execute(statement).rowcount
                except psycopg.errors.ForeignKeyViolation:
                    log.info("a content being collected gained a file meanwhile: kept")
        if pruned or orphans:
            log.info("pruned %d finished job(s) and %d row(s) no file holds", pruned, orphans)

    def _tidy(self) -> None:
        """The listener's rounds: local copies swept after changes, and the house kept now and then."""
        try:
            now = time.monotonic()
            if (self._sweep_whole or self._unheld_maybe) and now - self._swept >= SWEEP_SECONDS:
                self.sweep(whole=False)
            if now - self._kept_house >= min(HOUSEKEEPING_SECONDS, max(1.0, self.job_retention / 2)):
                self.keep_house()
        except (OSError, StorageError) as exc:
            log.warning("removing what no file holds: %s; trying again later", exc)

    # -- segments and answers --------------------------------------------------------------------------------
    def segment(self, key: SegmentKey) -> Segment | None:
        kept = self._segments.get(key)
        if kept is not None:
            return kept
        row = self.db.read(lambda db: _binary(
            db, "SELECT text_hash, spans, embeddings, dim, tokens FROM lcrag_segments WHERE hash = %s AND "
            "chunking = %s AND embedder = %s", (key.content_hash, key.chunking, key.embedder)).fetchone())
        if row is None:
            return None
        text_hash, spans, embeddings, dim, tokens = row
        return self._segments.put(key, Segment(key, text_hash, _spans(bytes(spans)),
                                               None if embeddings is None else bytes(embeddings), int(dim), int(tokens)))

    def put_segment(self, segment: Segment) -> None:
        key = segment.key
        with _stored("a segment could not be kept"), self.db.connection() as db:
            db.execute("INSERT INTO lcrag_segments (hash, chunking, embedder, text_hash, spans, embeddings, dim, tokens)"
                       " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (hash, chunking, embedder) DO UPDATE SET "
                       "text_hash = EXCLUDED.text_hash, spans = EXCLUDED.spans, embeddings = EXCLUDED.embeddings, "
                       "dim = EXCLUDED.dim, tokens = EXCLUDED.tokens, writes = lcrag_segments.writes + 1",
                       (key.content_hash, key.chunking, key.embedder, segment.text_hash, _span_bytes(segment.spans),
                        segment.embeddings, segment.dim, segment.tokens))
        self._segments.put(key, segment)

    def add_index_cost(self, collection_id: str, retriever: str, cost: IndexCost) -> None:
        with _stored("an index's cost could not be kept"), self.db.connection() as db:
            db.execute("INSERT INTO lcrag_index_costs AS c (collection, retriever, calls, prompt_tokens, "
                       "completion_tokens, seconds) SELECT %s, %s, %s, %s, %s, %s WHERE EXISTS (SELECT 1 FROM "
                       "lcrag_collections WHERE id = %s) ON CONFLICT (collection, retriever) DO UPDATE SET "
                       "calls = c.calls + EXCLUDED.calls, prompt_tokens = c.prompt_tokens + EXCLUDED.prompt_tokens, "
                       "completion_tokens = c.completion_tokens + EXCLUDED.completion_tokens, "
                       "seconds = c.seconds + EXCLUDED.seconds",
                       (collection_id, retriever, cost.calls, cost.prompt_tokens, cost.completion_tokens,
                        cost.seconds, collection_id))

    def index_costs(self, collection_id: str) -> dict[str, IndexCost]:
        with self.db.connection() as db:
            rows = db.execute("SELECT retriever, calls, prompt_tokens, completion_tokens, seconds FROM "
                              "lcrag_index_costs WHERE collection = %s ORDER BY retriever", (collection_id,)).fetchall()
        return {r[0]: IndexCost(int(r[1]), int(r[2]), int(r[3]), float(r[4])) for r in rows}

    def cached_answer(self, collection_id: str, version: int, key: str) -> bytes | None:
        row = self.db.read(lambda db: _binary(
            db, "SELECT value FROM lcrag_answers WHERE collection = %s AND version = %s AND key = %s",
            (collection_id, version, key)).fetchone())
        return None if row is None else bytes(row[0])

    def cache_answer(self, collection_id: str, version: int, key: str, answer: bytes,
                     keep: int = KEPT_ANSWERS) -> bool:
        with self.db.connection() as db:
            # Kept only while the collection is at that version: a change committing meanwhile (it holds the row)
            # is waited for, and its removal of the earlier versions' answers is never outrun.
            current = db.execute("SELECT version FROM lcrag_collections WHERE id = %s FOR SHARE",
                                 (collection_id,)).fetchone()
            if current is None or int(current[0]) != version:
                return False
            db.execute("INSERT INTO lcrag_answers (collection, version, key, value) VALUES (%s, %s, %s, %s) "
                       "ON CONFLICT (collection, version, key) DO UPDATE SET value = EXCLUDED.value, created = now()",
                       (collection_id, version, key, answer))
            db.execute("DELETE FROM lcrag_answers WHERE collection = %s AND version = %s AND key IN (SELECT key FROM "
                       "lcrag_answers WHERE collection = %s AND version = %s ORDER BY created DESC, key DESC OFFSET %s)",
                       (collection_id, version, collection_id, version, max(0, keep)))
        return True

    # -- indexing jobs ---------------------------------------------------------------------------------------
    def start_jobs(self, workers: int = 1) -> None:
        """Claim and run indexing jobs in ``workers`` background threads until :meth:`close`."""
        owner = f"{socket.gethostname()}:{os.getpid()}"
        for number in range(workers):
            thread = threading.Thread(target=self._work, args=(f"{owner}:{number}",), daemon=True,
                                      name=f"lcrag-jobs-{number}")
            thread.start()
            self._workers.append(thread)

    def _work(self, owner: str) -> None:
        while not self._stop.is_set():
            try:
                work(self.db, self.run_job, owner, self._stop, self.lease)
            except Exception as exc:  # noqa: BLE001 - the database went away for a while: try again
                log.warning("indexing jobs: %s; trying again in 1 s", getattr(exc, "detail", exc))
                self._stop.wait(1.0)

    def run_job(self, job: Job) -> tuple[Callable, str | None]:
        """Index the collection as it is now (a version at least the job's); what to record in the job's
        completion: the state reached, for the version indexed."""
        try:
            version = self.version(job.name)
            identity = self.identity(job.name)
        except NotFound:
            return (lambda db: None), "the collection was deleted"
        if not identity.startswith(job.collection + ":"):
            return (lambda db: None), "the collection was deleted"
        state, done, error, skipped = self._indexed(job.name, version)
        return (lambda db: self.set_state(job.name, version, state, done, error, tuple(skipped), db)), error

    def _indexed(self, name: str, version: int) -> tuple[str, int, str | None, list[str]]:
        """Run the service's indexing of the collection; (state, files done, error, skipped lines)."""
        files = len(self.file_records(name))
        last = [0.0]

        def progress(done: int, total: int) -> None:
            if time.monotonic() - last[0] >= PROGRESS_SECONDS:
                last[0] = time.monotonic()
                with self.db.connection() as db:
                    db.execute("UPDATE lcrag_collections SET done = %s, updated = %s WHERE name = %s AND version = %s",
                               (done, time.time(), name, version))

        try:
            skipped = [self.public(line) for line in self._index(name, self._synced(name), progress)]
        except EmptyCollection:
            return "empty", 0, None, []
        except (InputError, NotFound, StorageError) as exc:  # a StorageError's message names no path
            return "error", files, self.public(str(exc)), []
        except StoreDown:
            raise  # nothing wrong with the collection: the job fails and is tried again, once the database is back
        except OSError as exc:
            log.warning("indexing collection %s failed: %s", name, exc)
            return "error", files, self.public(f"indexing failed: the server's storage failed "
                                               f"({exc.strerror or exc})"), []
        except Exception as exc:  # noqa: BLE001 - whatever failed, the collection must not stay "indexing"
            log.exception("indexing collection %s failed", name)
            return "error", files, self.public(f"indexing failed: {type(exc).__name__}: {exc}"), []
        return "ready", files, None, skipped

    def shared_parses(self, local=None) -> SharedParses:
        """A parse cache shared through the database, over ``local`` (this machine's): the parses of a content
        whose local copy is removed go from it too."""
        self._parses = shared = SharedParses(self.db, local)
        removed, self._removed = self._removed, set()
        shared.drop(removed)
        return shared

    def watch(self, changed: Callable[[str], None]) -> None:
        """Call ``changed(name)`` for every collection another process changes or deletes (LISTEN lcrag_changes),
        in a background thread until :meth:`close`: what a replica keeps of it is let go at once, not at its next
        question, and so are its local copies of a removed file (:meth:`_let_go`). The same thread prunes finished
        jobs and what no file holds now and then (:meth:`keep_house`)."""
        def listen() -> None:
            while not self._stop.is_set():
                try:
                    with self.db.listening(CHANNEL) as wait:
                        while not self._stop.is_set():
                            for payload in wait(1.0):
                                changed(payload.rpartition(":")[0])
                                self._let_go(payload.rpartition(":")[0])
                            self._tidy()
                except Exception as exc:  # noqa: BLE001 - the database went away for a while: listen again
                    log.warning("collection changes: %s; listening again in 1 s", getattr(exc, "detail", exc))
                    self._stop.wait(1.0)

        thread = threading.Thread(target=listen, daemon=True, name="lcrag-changes")
        thread.start()
        self._workers.append(thread)

    def jobs(self) -> list[dict]:
        return self.db.jobs()

    def close(self) -> None:
        self._stop.set()
        for thread in self._workers:
            thread.join(10)
        self.db.close()


class SharedParses:
    """The sandbox's parse cache (:class:`lcrag.documents.sandbox.ParseCache`'s get and put) over this machine's
    and the database: a file parsed by any replica or worker is read, not parsed again, by every other (a parse is
    kept by its key: the file's content, name, limits and the parsers' versions)."""

    def __init__(self, db: PostgresStore, local=None):
        self.db, self.local = db, local

    def get(self, key: str) -> dict | None:
        outcome = self.local.get(key) if self.local is not None else None
        if outcome is not None:
            return outcome
        with self.db.connection() as db:
            row = _binary(db, "SELECT outcome FROM lcrag_parses WHERE key = %s", (key,)).fetchone()
        if row is None:
            return None
        try:
            outcome = _shape_checked(json.loads(zlib.decompress(row[0])))
        except (zlib.error, ValueError, UnicodeDecodeError, RecursionError):
            return None  # not one this version reads: parsed again (and replaced)
        if self.local is not None:
            self.local.put(key, outcome)
        return outcome

    def put(self, key: str, outcome: dict) -> None:
        """Keep a parse here and in the database, with its content (:func:`content_of`), while a file holds that
        content: a job that read a file being removed leaves no parse behind."""
        if self.local is not None:
            self.local.put(key, outcome)
        content = content_of(key)
        with self.db.connection() as db:
            db.execute("INSERT INTO lcrag_parses (key, content, outcome) SELECT %s, %s, %s WHERE EXISTS (SELECT 1 FROM "
                       "lcrag_files WHERE hash = %s) ON CONFLICT (key) DO UPDATE SET content = EXCLUDED.content, "
                       "outcome = EXCLUDED.outcome", (key, content, zlib.compress(encode(outcome), 1), content))

    def drop(self, content_hashes) -> int:
        """Remove this machine's parses of these contents (the database's go with their files: :func:`_collect`)."""
        return self.local.drop(content_hashes) if self.local is not None and content_hashes else 0
