"""A disk cache of query embeddings keyed by (embedder identity, exact query text).

A cached question (``lcrag ask`` whose answer comes from the completion cache) still retrieves the chunks that form
its prompt, and dense retrieval embeds the question: with the bundled MiniLM that alone imports onnxruntime and builds
a session (~0.4 s). :class:`CachedQueryEmbedder` answers a question seen before from ``CACHE/query-vectors.sqlite``
without creating the embedder at all: it is made by a factory on the first miss.

Only queries are cached: whatever embeds text in bulk (chunks, sentences, summaries, corpus pieces) goes through
:func:`lcrag.retrieval.embedders.uncached` to the wrapped embedder. The file is derived data, as the completion
cache is: a damaged file is set aside and recreated with one warning, a damaged entry is a miss that is replaced.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from lcrag.lazy import lazy_module
from lcrag.retrieval.embedders import Embedder, parse_embedder_spec
from lcrag.registry import EMBEDDERS
from lcrag.storage import file_lock, set_aside

if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use (see lcrag.lazy)
    np = lazy_module("numpy")

log = logging.getLogger("lcrag")

BUSY_TIMEOUT = 30.0  # seconds a writer waits for another process's write (as the completion cache)
FILE_NAME = "query-vectors.sqlite"
_COLUMNS = ["key", "vector"]
# Calls with more texts than this are not queries: they go to the wrapped embedder uncached.
MAX_QUERIES = 16


def query_key(embedder_name: str, text: str) -> str:
    return hashlib.sha256(json.dumps([embedder_name, text], ensure_ascii=False).encode("utf-8")).hexdigest()


class QueryVectorCache:
    """SQLite store of float32 vectors; safe to share between threads and processes (WAL, a busy timeout).

    Opening, checking and repairing follow :class:`lcrag.readers.cache.CompletionCache` (derived mode) with the
    shared helpers of :mod:`lcrag.storage`; the layering keeps retrieval from importing the readers' module."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        # One process checks (and repairs) at a time: another must not set aside a file just recreated.
        with file_lock(self.path.with_name(self.path.name + ".lock")):
            try:
                self._db = self._open()
            except sqlite3.DatabaseError as exc:
                self._set_aside(str(exc))
                self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=BUSY_TIMEOUT)
        try:
            status = db.execute("PRAGMA quick_check(1)").fetchone()[0]
            if status != "ok":
                raise sqlite3.DatabaseError(status.replace("\n", " "))
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vector BLOB NOT NULL)")
            db.commit()
            columns = [row[1] for row in db.execute("PRAGMA table_info(vectors)")]
            if columns != _COLUMNS:
                raise sqlite3.DatabaseError(f"table vectors has columns {columns}, not {_COLUMNS}")
        except BaseException:
            db.close()
            raise
        return db

    def _set_aside(self, reason: str) -> None:
        target = set_aside(self.path, reason)
        for suffix in ("-wal", "-shm"):  # they belong to the damaged file: a new database must not replay them
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

    def get(self, key: str, dimension: int | None = None) -> np.ndarray | None:
        """The vector stored under ``key``; None on a miss, or when the entry is not a vector (of ``dimension``)."""
        try:
            with self._lock:
                row = self._db.execute("SELECT vector FROM vectors WHERE key = ?", (key,)).fetchone()
        except sqlite3.DatabaseError as exc:
            self._warn_once("read", f"cannot be read ({exc}); queries are embedded again")
            return None
        if row is None:
            return None
        blob = row[0]
        if (not isinstance(blob, bytes) or not blob or len(blob) % 4
                or (dimension and len(blob) != 4 * dimension)):
            self._warn_once("entry", "an entry is not a query vector; it is embedded again and replaced")
            return None
        vector = np.frombuffer(blob, dtype="<f4").astype(np.float32)
        if not np.isfinite(vector).all():
            self._warn_once("entry", "an entry is not a query vector; it is embedded again and replaced")
            return None
        return vector

    def put(self, key: str, vector: np.ndarray) -> None:
        blob = np.ascontiguousarray(vector, dtype="<f4").tobytes()
        try:
            with self._lock:
                self._db.execute("INSERT OR REPLACE INTO vectors (key, vector) VALUES (?, ?)", (key, blob))
                self._db.commit()
        except sqlite3.DatabaseError as exc:
            self._warn_once("write", f"cannot be written ({exc}); query vectors are not cached")

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


class CachedQueryEmbedder:
    """An embedder whose query vectors come from a :class:`QueryVectorCache` when seen before.

    ``name`` (and ``dimension`` when given) are the wrapped embedder's, known without creating it, so on-disk
    indexes named by the embedder are found as before; the wrapped embedder is made by ``factory`` on first need
    (a query not in the cache, bulk embedding through :attr:`uncached`, or ``dimension`` when not given)."""

    def __init__(self, factory: Callable[[], Embedder], cache: QueryVectorCache, name: str,
                 dimension: int | None = None):
        self._factory = factory
        self._inner: Embedder | None = None
        self._lock = threading.Lock()
        self.cache = cache
        self.name = name
        self._dimension = dimension
        self.hits = 0
        self.misses = 0

    @property
    def uncached(self) -> Embedder:
        """The wrapped embedder (created now if need be): bulk embedding goes there, not through the cache."""
        if self._inner is None:
            with self._lock:
                if self._inner is None:
                    inner = self._factory()
                    if inner.name != self.name:  # the identity was computed without it: they must agree
                        log.warning("embedder %s calls itself %s; query vectors are cached under the first name",
                                    self.name, inner.name)
                    self._inner = inner
        return self._inner

    @property
    def created(self) -> bool:
        """Whether the wrapped embedder has been made."""
        return self._inner is not None

    @property
    def dimension(self) -> int:
        return self._dimension if self._dimension else self.uncached.dimension

    def embed(self, texts: list[str]) -> np.ndarray:
        """Query vectors: each text seen before with this embedder is read from the cache, the rest embedded in
        one call and stored. More than :data:`MAX_QUERIES` texts are not queries: embedded, not cached."""
        if len(texts) > MAX_QUERIES:
            return self.uncached.embed(texts)
        keys = [query_key(self.name, t) for t in texts]
        found = [self.cache.get(k, self._dimension) for k in keys]
        missing = [i for i, v in enumerate(found) if v is None]
        if missing:
            vectors = self.uncached.embed([texts[i] for i in missing])
            for i, vector in zip(missing, vectors):
                found[i] = np.asarray(vector, dtype=np.float32)
                self.cache.put(keys[i], found[i])
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        if not texts:
            return np.zeros((0, self._dimension or 0), dtype=np.float32)
        if len({len(v) for v in found}) > 1:  # entries of another width (a wrongly named embedder): embed afresh
            return self.uncached.embed(texts)
        return np.stack(found).astype(np.float32, copy=False)

    def close(self) -> None:
        self.cache.close()
        close = getattr(self._inner, "close", None)
        if close:
            close()


def cached_query_embedder(spec: str, factory: Callable[[], Embedder], cache_dir: str | Path,
                          **endpoint: object) -> Embedder:
    """The embedder ``spec`` names behind a query cache in ``cache_dir``, when its registration says how to name it
    without loading it (meta ``identity``); else ``factory()`` itself. ``endpoint``: base_url, api_key, timeout."""
    kind, name = parse_embedder_spec(spec)
    part = EMBEDDERS.get(kind)
    identity = part.meta.get("identity")
    if identity is None:
        return factory()
    try:
        cache = QueryVectorCache(Path(cache_dir) / FILE_NAME)
    except (OSError, sqlite3.Error) as exc:  # derived data: never in the way of an answer
        log.warning("%s: query vectors are not cached (%s)", Path(cache_dir) / FILE_NAME, exc)
        return factory()
    return CachedQueryEmbedder(factory, cache, identity(name, **endpoint), part.meta.get("dimension"))
