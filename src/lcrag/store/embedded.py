"""The embedded collection store (:class:`lcrag.store.base.CollectionStore`): what ``lcrag serve`` uses with no
store given. Collections are folders under the cache directory (:class:`lcrag.store.collections.Collections`:
files, uploads, names, indexing state); versions, segments and cached answers are one SQLite file beside them
(``collections.sqlite``, WAL, shared by the processes of one machine)."""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from lcrag.documents.sandbox import ParseCache
from lcrag.store.collections import LISTED_CHANGES, Collections, Listed, NotFound, StorageError
from lcrag.store.derived import forget_collection_caches, forget_contents
from lcrag.store.base import KEPT_ANSWERS, CollectionState, FileRecord, IndexCost, Segment, SegmentKey

log = logging.getLogger(__name__)

PARSED = "parsed"  # the parse cache, beside the collections in the cache directory

_SCHEMA = """
CREATE TABLE IF NOT EXISTS versions (id TEXT PRIMARY KEY, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS segments (
    content_hash TEXT NOT NULL, chunking TEXT NOT NULL, embedder TEXT NOT NULL, text_hash TEXT NOT NULL,
    spans TEXT NOT NULL, embeddings BLOB, dim INTEGER NOT NULL, tokens INTEGER NOT NULL,
    PRIMARY KEY (content_hash, chunking, embedder));
CREATE TABLE IF NOT EXISTS index_costs (
    id TEXT NOT NULL, retriever TEXT NOT NULL, calls INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL, seconds REAL NOT NULL, PRIMARY KEY (id, retriever));
CREATE TABLE IF NOT EXISTS answers (
    id TEXT NOT NULL, version INTEGER NOT NULL, key TEXT NOT NULL, answer BLOB NOT NULL,
    PRIMARY KEY (id, version, key));
"""


class StoreDatabase:
    """The SQLite half of the embedded store: collection versions, segments, answers; one connection, behind one
    lock (statements are short)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, timeout=30.0, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA secure_delete=ON")  # a deleted answer's bytes are overwritten, not left in the file
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def version(self, collection_id: str) -> int:
        with self._lock:
            row = self._db.execute("SELECT version FROM versions WHERE id = ?", (collection_id,)).fetchone()
        return row[0] if row else 1

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """The connection in one write transaction: all of the block's statements or none (a full database fails
        one midway)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # (SQLite may have rolled it back itself)
                    self._db.execute("ROLLBACK")
                raise

    def bump(self, collection_id: str) -> int:
        """A new version of the collection; the answers kept for earlier ones go (none is served again). Both or
        neither: a ``sqlite3.Error`` (a full database) leaves the version as it was."""
        with self._transaction() as db:
            version = db.execute(
                "INSERT INTO versions (id, version) VALUES (?, 2) ON CONFLICT (id) DO UPDATE SET version = version + 1 "
                "RETURNING version", (collection_id,)).fetchone()[0]
            db.execute("DELETE FROM answers WHERE id = ? AND version < ?", (collection_id, version))
        return version

    def segment(self, key: SegmentKey) -> Segment | None:
        with self._lock:
            row = self._db.execute(
                "SELECT text_hash, spans, embeddings, dim, tokens FROM segments WHERE content_hash = ? AND chunking = ? "
                "AND embedder = ?", (key.content_hash, key.chunking, key.embedder)).fetchone()
        if row is None:
            return None
        spans = tuple((int(s), int(e)) for s, e in json.loads(row[1]))
        return Segment(key, row[0], spans, row[2], row[3], row[4])

    def put_segment(self, segment: Segment) -> None:
        key = segment.key
        with self._lock, _stored("a segment could not be kept"):
            self._db.execute("INSERT OR REPLACE INTO segments VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                             (key.content_hash, key.chunking, key.embedder, segment.text_hash,
                              json.dumps(segment.spans), segment.embeddings, segment.dim, segment.tokens))

    def add_index_cost(self, collection_id: str, retriever: str, cost: IndexCost) -> None:
        with self._lock, _stored("an index's cost could not be kept"):
            self._db.execute("INSERT INTO index_costs VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id, retriever) DO UPDATE "
                             "SET calls = calls + excluded.calls, prompt_tokens = prompt_tokens + "
                             "excluded.prompt_tokens, completion_tokens = completion_tokens + "
                             "excluded.completion_tokens, seconds = seconds + excluded.seconds",
                             (collection_id, retriever, cost.calls, cost.prompt_tokens, cost.completion_tokens,
                              cost.seconds))

    def index_costs(self, collection_id: str) -> dict[str, IndexCost]:
        with self._lock:
            rows = self._db.execute("SELECT retriever, calls, prompt_tokens, completion_tokens, seconds FROM "
                                    "index_costs WHERE id = ? ORDER BY retriever", (collection_id,)).fetchall()
        return {row[0]: IndexCost(*row[1:]) for row in rows}

    def drop_segments(self, content_hashes: set[str]) -> int:
        """Delete the segments of these contents (every chunking and embedder); how many went."""
        with self._lock:
            return sum(self._db.execute("DELETE FROM segments WHERE content_hash = ?", (h,)).rowcount
                       for h in content_hashes)

    def forget(self, collection_id: str) -> None:
        """A deleted collection's version and answers (a collection made again under its name has another id)."""
        with self._transaction() as db:
            db.execute("DELETE FROM answers WHERE id = ?", (collection_id,))
            db.execute("DELETE FROM versions WHERE id = ?", (collection_id,))

    def answer(self, collection_id: str, version: int, key: str) -> bytes | None:
        with self._lock:
            row = self._db.execute("SELECT answer FROM answers WHERE id = ? AND version = ? AND key = ?",
                                   (collection_id, version, key)).fetchone()
        return row[0] if row else None

    def keep_answer(self, collection_id: str, version: int, key: str, answer: bytes, keep: int) -> bool:
        """Keep an answer and the ``keep`` written last (a replaced row takes a new rowid: rowids are write order),
        only while the collection is at ``version``: a change meanwhile removed its answers, and a deleted
        collection's version went with them (a collection never changed, at version 1 without a row, holds no file
        to answer from)."""
        with self._lock:
            kept = self._db.execute("INSERT OR REPLACE INTO answers SELECT ?, ?, ?, ? WHERE (SELECT version FROM "
                                    "versions WHERE id = ?) = ?", (collection_id, version, key, answer, collection_id,
                                                                    version)).rowcount > 0
            self._db.execute("DELETE FROM answers WHERE id = ? AND version = ? AND rowid <= (SELECT rowid FROM answers "
                             "WHERE id = ? AND version = ? ORDER BY rowid DESC LIMIT 1 OFFSET ?)",
                             (collection_id, version, collection_id, version, max(0, keep)))
        return kept

    def scrub(self) -> None:
        """Empty the write-ahead log into the file (its older copies of pages held deleted rows' bytes)."""
        with self._lock:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        with self._lock:
            self._db.close()


class EmbeddedStore(Collections):
    """Collections in folders plus :class:`StoreDatabase`: the embedded :class:`CollectionStore`."""

    def __init__(self, root: Path, index: Callable[[str, Path, Callable[[int, int], None]], list[str]] | None = None,
                 database: Path | None = None):
        super().__init__(root, index)
        self.database = StoreDatabase(database or self.root.parent / "collections.sqlite")
        # The parses kept beside the collections (lcrag.service.answering's sandbox): a removed content's go.
        self.parses = ParseCache(self.root.parent / PARSED)
        # The changes this process made, by collection id: (version, file, removed), the newest last. A version
        # not among them was made by another process sharing the folder (lcrag mcp): its listing is made again.
        self._journal: dict[str, deque[tuple[int, str | None, bool]]] = {}
        self._listed: dict[str, Listed] = {}  # by name: the files as last listed, brought up to date per version
        self._journal_lock = threading.Lock()

    def _changed(self, name: str, filename: str | None = None, removed: bool = False) -> None:
        with self._journal_lock, _stored(f"collection {name!r} could not be changed"):
            identity = self.identity(name)
            version = self.database.bump(identity)
            self._journal.setdefault(identity, deque(maxlen=LISTED_CHANGES)).append((version, filename, removed))

    def version(self, name: str) -> int:
        return self.database.version(self.identity(name))

    def listed(self, name: str) -> Listed:
        """The collection's files at its version now: the listing kept for an earlier version brought up to date
        with the files this process changed since (only they are looked at), else the folder listed whole."""
        try:
            directory = self.files_dir(name)
        except NotFound:
            with self._journal_lock:  # what was listed of a deleted collection goes
                self._listed.pop(name, None)
            raise
        with self._journal_lock:  # the version and the changes that made it, together
            identity = self.identity(name)
            version = self.database.version(identity)
            journal = list(self._journal.get(identity, ()))
            kept = self._listed.get(name)
        if kept is not None and kept.id == identity and kept.version == version:
            return kept
        touched = _touched(journal, kept.version, version) if kept is not None and kept.id == identity else None
        if touched is None:
            listed = Listed.of(identity, version, directory)
            # changes recorded before the folder was read, applied again: a file whose removal was recorded may
            # still be there, being unlinked
            listed = listed.updated(version, directory, _touched(journal, 0, version, whole=False) or {})
        else:
            listed = kept.updated(version, directory, touched)
        with self._journal_lock:
            current = self._listed.get(name)
            if current is None or current.id != identity or current.version <= version:
                self._listed[name] = listed
        return listed

    def state(self, name: str) -> CollectionState:
        status = self.status(name)
        return CollectionState(name, self.identity(name), self.version(name), status.state, status.files,
                               status.done, status.error, tuple(status.skipped), status.updated)

    @staticmethod
    def identity_of(state: CollectionState) -> str:
        return state.id  # the collection's id: its changes are this process's own, and forget its document

    def set_state(self, name: str, version: int, state: str, done: int = 0, error: str | None = None,
                  skipped: tuple[str, ...] = ()) -> bool:
        """The embedded store's indexing state is its indexing thread's own (:meth:`Collections.reindex`); a state
        from elsewhere is recorded only for the version current now."""
        if version != self.version(name):
            return False
        status = self.status(name)
        status.state, status.done, status.error, status.skipped, status.updated = (state, done, error, list(skipped),
                                                                                     time.time())
        with self._lock:
            self._status[name] = status
        return True

    def delete(self, name: str) -> None:
        """Delete the collection, its version and answers, the completions cached for questions about it, and the
        segments and parses of contents no other file holds."""
        identity, held, before = self.identity(name), self._contents(self.paths(name)), time.time()
        super().delete(name)  # first: a full disk or database is freed by it, never stops it
        try:
            self.database.forget(identity)
            self._collect(name, held, before)
        except sqlite3.Error as exc:  # left rows are of an id no collection has again: never served, only kept
            log.warning("collection %s deleted, but its answers or segments could not be dropped: %s", name, exc)

    def remove_file(self, name: str, filename: str) -> None:
        """Remove one file, the answers and completions cached for the collection (their prompts may have held its
        text), and its segments and parses unless another file of any collection holds the same content."""
        held, before = self._contents([self.file(name, filename)]), time.time()
        super().remove_file(name, filename)
        try:
            self._collect(name, held, before)
        except sqlite3.Error as exc:  # the segments stay, as a cache of that content: the file is removed
            log.warning("%s removed from %s, but its segments could not be dropped: %s", filename, name, exc)

    @staticmethod
    def _contents(paths: list[Path]) -> dict[str, int]:
        """The content hash and size of each file that can still be read."""
        held = {}
        for path in paths:
            try:
                held[file_digest(path)] = path.stat().st_size
            except OSError:  # gone meanwhile: its content is looked for like any other
                continue
        return held

    def _collect(self, name: str, held: dict[str, int], before: float) -> None:
        """After files of collection ``name`` went: the completions cached for questions about it and its indexes
        made ``before`` (:mod:`lcrag.store.derived`), and the segments, parses and RAPTOR trees of the contents in
        ``held`` that no stored file holds now (only files of the same size are hashed to find out; a segment
        dropped while an upload of the same bytes arrives is made again); the store's file and log overwritten where
        they held what went."""
        forget_collection_caches(self.root.parent, name, before)
        sizes = set(held.values())
        kept = set()
        for other in self.names():
            try:
                kept |= {file_digest(self.files_dir(other) / n) for n, info in self.listing(other)
                         if info.st_size in sizes}
            except OSError:  # a collection deleted meanwhile holds nothing
                continue
        gone = set(held) - kept
        if gone:
            log.info("%d segment(s), %d parse(s) and %d RAPTOR tree(s) of %d removed content(s) dropped",
                     self.database.drop_segments(gone), self.parses.drop(gone),
                     forget_contents(self.root.parent, gone), len(gone))
        self.database.scrub()

    def file_records(self, name: str) -> list[FileRecord]:
        """The Protocol's :meth:`CollectionStore.files` (``files`` here lists names and sizes, as the API shows)."""
        return [FileRecord(path.name, file_digest(path), path.stat().st_size, path.stat().st_mtime)
                for path in self.paths(name)]

    def local_path(self, name: str, filename: str) -> Path:
        return self.file(name, filename)

    def segment(self, key: SegmentKey) -> Segment | None:
        return self.database.segment(key)

    def put_segment(self, segment: Segment) -> None:
        self.database.put_segment(segment)

    def add_index_cost(self, collection_id: str, retriever: str, cost: IndexCost) -> None:
        self.database.add_index_cost(collection_id, retriever, cost)

    def index_costs(self, collection_id: str) -> dict[str, IndexCost]:
        return self.database.index_costs(collection_id)

    def cached_answer(self, collection_id: str, version: int, key: str) -> bytes | None:
        return self.database.answer(collection_id, version, key)

    def cache_answer(self, collection_id: str, version: int, key: str, answer: bytes,
                     keep: int = KEPT_ANSWERS) -> bool:
        return self.database.keep_answer(collection_id, version, key, answer, keep)

    def close(self) -> None:
        self.database.close()


@contextmanager
def _stored(what: str) -> Iterator[None]:
    """A failure of the database as a :class:`StorageError` saying ``what`` could not be done (507 when full)."""
    try:
        yield
    except sqlite3.Error as exc:
        raise StorageError(what, exc) from None


def _touched(journal: list[tuple[int, str | None, bool]], since: int, version: int,
             whole: bool = True) -> dict[str, bool] | None:
    """The files changed after version ``since`` up to ``version`` (name -> removed, the last change of each), or
    None when the journal does not hold every one of those versions (``whole``) or a change of unknown file."""
    touched: dict[str, bool] = {}
    expected = since + 1
    for at, filename, removed in journal:
        if at <= since or at > version:
            continue
        if filename is None or (whole and at != expected):
            return None
        touched[filename] = removed
        expected = at + 1
    return touched if not whole or expected == version + 1 else None


def file_digest(path: Path) -> str:
    """The SHA-256 of a file's bytes, streamed."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
