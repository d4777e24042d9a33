"""One SQLite table of key -> value shared by threads and processes (WAL, a busy timeout), checked when opened.

Both disk caches (completions, query vectors) are this store with their own value format. A derived store (a cache
that can be recomputed) repairs damage: a damaged file is set aside with its write-ahead log and recreated, an
unreadable or unwritable entry is a miss, each said once. A store that holds user data (``derived=False``: a run
directory's cache) never repairs: every damage raises the error its owner's ``refuse`` builds.

An entry may be put with tags (what it was made from: a collection whose text its prompt held); :meth:`forget`
removes every entry of a tag, overwriting what it held on disk (``secure_delete``, the write-ahead log emptied), so
that a text removed from a collection is not left in a cache derived from it.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lcrag.core.files import file_lock, set_aside

log = logging.getLogger("lcrag")

BUSY_TIMEOUT = 30.0  # seconds a writer waits for another process's write to finish before giving up on one entry


class KeyValueStore:
    """``table`` (``key TEXT PRIMARY KEY``, ``value_column value_type NOT NULL``) in the SQLite file ``path``.

    ``refuse(what, reason)`` builds the error raised instead of repairing when ``derived`` is False; ``what`` is
    "damaged" (opening), "read" or "write". ``misses`` words what a derived store's failed read and write mean to
    its user, e.g. ``("answers are computed again", "answers are not cached")``.
    """

    def __init__(self, path: str | Path, table: str, value_column: str, value_type: str, misses: tuple[str, str],
                 derived: bool = True, refuse: Callable[[str, str], Exception] | None = None):
        self.path, self.table, self.derived = Path(path), table, derived
        self._value, self._type, self._misses, self._refuse = value_column, value_type, misses, refuse
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        # One process checks (and repairs) at a time: another must not set aside a file just recreated.
        with file_lock(self.path.with_name(self.path.name + ".lock")):
            try:
                self._db = self._open()
            except sqlite3.DatabaseError as exc:
                self._damaged(str(exc))
                self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        """A connection to a checked database (raises ``sqlite3.DatabaseError`` when it is damaged)."""
        db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=BUSY_TIMEOUT)
        expected = ["key", self._value]
        try:
            status = db.execute("PRAGMA quick_check(1)").fetchone()[0]
            if status != "ok":
                raise sqlite3.DatabaseError(status.replace("\n", " "))
            db.execute("PRAGMA journal_mode=WAL")
            if self.derived:  # a commit is not synced to disk (a checkpoint is): a power cut may lose the last
                db.execute("PRAGMA synchronous=NORMAL")  # entries, which are computed again; never a damaged file
            db.execute(f"CREATE TABLE IF NOT EXISTS {self.table} (key TEXT PRIMARY KEY, {self._value} {self._type} NOT NULL)")
            db.execute(f"CREATE TABLE IF NOT EXISTS {self.table}_tags (tag TEXT NOT NULL, key TEXT NOT NULL, "
                       "PRIMARY KEY (tag, key))")
            db.commit()
            columns = [row[1] for row in db.execute(f"PRAGMA table_info({self.table})")]
            if columns != expected:
                raise sqlite3.DatabaseError(f"table {self.table} has columns {columns}, not {expected}")
        except BaseException:
            db.close()
            raise
        return db

    def _damaged(self, reason: str) -> None:
        if not self.derived:
            raise self._refuse("damaged", reason)
        target = set_aside(self.path, reason)
        # The write-ahead log and its index belong to the damaged file: a new database must not replay them.
        for suffix in ("-wal", "-shm"):
            side = Path(f"{self.path}{suffix}")
            if side.exists():
                if target is not None:
                    os.replace(side, f"{target}{suffix}")
                else:
                    side.unlink(missing_ok=True)

    def warn_once(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning("%s: %s", self.path, message)

    def get(self, key: str) -> Any | None:
        """The value stored under ``key``, None on a miss (and, derived, when the file cannot be read)."""
        try:
            with self._lock:
                row = self._db.execute(f"SELECT {self._value} FROM {self.table} WHERE key = ?", (key,)).fetchone()
        except sqlite3.DatabaseError as exc:
            if not self.derived:
                raise self._refuse("read", str(exc)) from None
            self.warn_once("read", f"cannot be read ({exc}); {self._misses[0]}")
            return None
        return None if row is None else row[0]

    def put(self, key: str, value: Any, tags: tuple[str, ...] = ()) -> None:
        """Keep ``value`` under ``key``, tagged with ``tags`` (:meth:`forget`)."""
        try:
            with self._lock:
                self._db.execute(f"INSERT OR REPLACE INTO {self.table} (key, {self._value}) VALUES (?, ?)", (key, value))
                self._db.executemany(f"INSERT OR IGNORE INTO {self.table}_tags (tag, key) VALUES (?, ?)",
                                     [(tag, key) for tag in tags])
                self._db.commit()
        except sqlite3.DatabaseError as exc:
            if not self.derived:
                raise self._refuse("write", str(exc)) from None
            self.warn_once("write", f"cannot be written ({exc}); {self._misses[1]}")  # still returned, not remembered

    def forget(self, tag: str) -> int:
        """Remove every entry put with ``tag``, its bytes overwritten in the file and the write-ahead log emptied
        (as far as no other process is reading it meanwhile); how many went."""
        with self._lock:
            self._db.execute("PRAGMA secure_delete = ON")  # freed pages are zeroed, not left holding the values
            gone = self._db.execute(f"DELETE FROM {self.table} WHERE key IN (SELECT key FROM {self.table}_tags "
                                    "WHERE tag = ?)", (tag,)).rowcount
            self._db.execute(f"DELETE FROM {self.table}_tags WHERE tag = ?", (tag,))
            self._db.commit()
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the log's older copies of those pages
        return gone

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute(f"SELECT COUNT(*) FROM {self.table}").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
