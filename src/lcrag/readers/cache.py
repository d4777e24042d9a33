"""A disk cache of completions keyed by (reader identity, messages, generation parameters).

The global cache (``CACHE/completions.sqlite``) is derived data: a damaged file is set aside and recreated with one
warning, and a damaged entry is a miss that the next answer replaces. A run directory's own cache is user data
(``derived=False``): damage there is reported as a :class:`RunDirectoryError`, never repaired.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
from dataclasses import asdict, fields
from pathlib import Path

from lcrag.errors import RunDirectoryError
from lcrag.readers.base import Completion, GenerationParams, Message, Reader, reader_identity
from lcrag.storage import file_lock, set_aside

log = logging.getLogger("lcrag")

# Seconds a writer waits for another process's write to finish before giving up on one entry.
BUSY_TIMEOUT = 30.0
_COLUMNS = ["key", "value"]
_REQUIRED = ("text", "model", "prompt_tokens", "completion_tokens")
_RUN_CACHE_ADVICE = ("its cached answers cannot be trusted; move the file away to recompute them "
                     "(this repeats their LLM calls) or restore it from a backup")


def completion_key(identity: str, messages: list[Message], params: GenerationParams) -> str:
    payload = {"model": identity, "messages": messages, "params": params.as_payload()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def _field_ok(name: str, value: object) -> bool:
    if name in ("text", "model"):
        return isinstance(value, str)
    if name == "system_fingerprint":
        return value is None or isinstance(value, str)
    if name == "logprobs":
        return value is None or (isinstance(value, list) and all(isinstance(p, dict) for p in value))
    if name == "from_cache":
        return isinstance(value, bool)
    if name == "seconds":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0  # token counts


def parse_completion(value: object) -> Completion | None:
    """The completion stored as ``value`` (JSON text), or None when it is not one (not JSON, wrong fields)."""
    try:
        data = json.loads(value) if isinstance(value, (str, bytes)) else None
    except ValueError:
        return None
    if not isinstance(data, dict) or not set(_REQUIRED) <= data.keys():
        return None
    # Fields this version does not know (written by a newer one) are left out, not treated as damage.
    known = {name: v for name, v in data.items() if name in {f.name for f in fields(Completion)}}
    if not all(_field_ok(name, v) for name, v in known.items()):
        return None
    return Completion(**known)


class CompletionCache:
    """SQLite key-value store; safe to share between threads and processes (WAL, a busy timeout).

    ``derived=True`` (the global cache): damage is repaired (set aside, recreated, one warning); ``derived=False``
    (a run directory's cache, user data): damage raises :class:`RunDirectoryError` naming the file and the damage.
    """

    def __init__(self, path: str | Path, derived: bool = True):
        self.path = Path(path)
        self.derived = derived
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
        try:
            status = db.execute("PRAGMA quick_check(1)").fetchone()[0]
            if status != "ok":
                raise sqlite3.DatabaseError(status.replace("\n", " "))
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS completions (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            db.commit()
            columns = [row[1] for row in db.execute("PRAGMA table_info(completions)")]
            if columns != _COLUMNS:
                raise sqlite3.DatabaseError(f"table completions has columns {columns}, not {_COLUMNS}")
        except BaseException:
            db.close()
            raise
        return db

    def _damaged(self, reason: str) -> None:
        if not self.derived:
            raise RunDirectoryError(f"{self.path}: damaged SQLite database ({reason}); {_RUN_CACHE_ADVICE}")
        target = set_aside(self.path, reason)
        # The write-ahead log and its index belong to the damaged file: a new database must not replay them.
        for suffix in ("-wal", "-shm"):
            side = Path(f"{self.path}{suffix}")
            if side.exists():
                if target is not None:
                    os.replace(side, f"{target}{suffix}")
                else:
                    side.unlink(missing_ok=True)

    def _warn_once(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning("%s: %s", self.path, message)

    def get(self, key: str) -> Completion | None:
        """The completion stored under ``key``; None on a miss (and, in a derived cache, on a damaged entry)."""
        try:
            with self._lock:
                row = self._db.execute("SELECT value FROM completions WHERE key = ?", (key,)).fetchone()
        except sqlite3.DatabaseError as exc:
            if not self.derived:
                raise RunDirectoryError(f"{self.path}: cannot be read ({exc}); {_RUN_CACHE_ADVICE}") from None
            self._warn_once("read", f"cannot be read ({exc}); answers are computed again")
            return None
        if row is None:
            return None
        completion = parse_completion(row[0])
        if completion is None:
            if not self.derived:
                raise RunDirectoryError(f"{self.path}: the entry {key} is not a completion; {_RUN_CACHE_ADVICE}")
            self._warn_once("entry", "an entry is not a completion; it is computed again and replaced")
        return completion

    def put(self, key: str, completion: Completion) -> None:
        value = json.dumps({**asdict(completion), "from_cache": False})
        try:
            with self._lock:
                self._db.execute("INSERT OR REPLACE INTO completions (key, value) VALUES (?, ?)", (key, value))
                self._db.commit()
        except sqlite3.DatabaseError as exc:
            if not self.derived:
                raise RunDirectoryError(f"{self.path}: cannot be written ({exc}); the answer was not saved") from None
            # Derived data: the answer is still returned, only not remembered.
            self._warn_once("write", f"cannot be written ({exc}); answers are not cached")

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM completions").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


class CachedReader:
    """Wraps a reader: a completion seen before is returned from disk, marked ``from_cache``, with its original counts.

    Entries are keyed by the reader's identity (see :func:`reader_identity`), so readers that share a model name
    but not a model never share answers.
    """

    def __init__(self, reader: Reader, cache: CompletionCache, miss_log: str | Path | None = None):
        self.inner = reader
        self.cache = cache
        self.hits = 0
        self.misses = 0
        # One line per real LLM call (its cache key): lets a resumed run prove it repeated none.
        self.miss_log = Path(miss_log) if miss_log else None
        self._log_lock = threading.Lock()

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def identity(self) -> str:
        return reader_identity(self.inner)

    @property
    def context_window(self) -> int:
        return self.inner.context_window

    @property
    def tokenizer(self):
        return self.inner.tokenizer

    @property
    def max_concurrency(self) -> int:
        return getattr(self.inner, "max_concurrency", 1)

    def count_prompt_tokens(self, messages: list[Message]) -> int:
        return self.inner.count_prompt_tokens(messages)

    def _same_build(self, hit: Completion) -> bool:
        """False when the server reported another build of the model than the one that wrote ``hit``."""
        current = getattr(self.inner, "system_fingerprint", None)
        return not (current and hit.system_fingerprint and current != hit.system_fingerprint)

    def complete(self, messages: list[Message], params: GenerationParams) -> Completion:
        key = completion_key(self.identity, messages, params)
        hit = self.cache.get(key)
        if hit is not None and self._same_build(hit):
            self.hits += 1
            hit.from_cache = True
            hit.seconds = 0.0
            return hit
        completion = self.inner.complete(messages, params)
        self.cache.put(key, completion)
        with self._log_lock:
            self.misses += 1
            if self.miss_log:
                with self.miss_log.open("a", encoding="utf-8") as f:
                    f.write(key + "\n")
        return completion

    def close(self) -> None:
        self.cache.close()
        close = getattr(self.inner, "close", None)
        if close:
            close()
