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
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from lcrag.core.lazy import lazy_module
from lcrag.retrieval.embedders import Embedder, parse_embedder_spec
from lcrag.core.registry import EMBEDDERS
from lcrag.core.sqlite_store import KeyValueStore

if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use (see lcrag.core.lazy)
    np = lazy_module("numpy")

log = logging.getLogger("lcrag")

FILE_NAME = "query-vectors.sqlite"
# Calls with more texts than this are not queries: they go to the wrapped embedder uncached.
MAX_QUERIES = 16


def query_key(embedder_name: str, text: str) -> str:
    return hashlib.sha256(json.dumps([embedder_name, text], ensure_ascii=False).encode("utf-8")).hexdigest()


class QueryVectorCache:
    """SQLite store of float32 vectors; safe to share between threads and processes (WAL, a busy timeout); derived
    data, repaired as the completion cache is (:class:`lcrag.core.sqlite_store.KeyValueStore`)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._store = KeyValueStore(self.path, "vectors", "vector", "BLOB",
                                    ("queries are embedded again", "query vectors are not cached"))

    def get(self, key: str, dimension: int | None = None) -> np.ndarray | None:
        """The vector stored under ``key``; None on a miss, or when the entry is not a vector (of ``dimension``)."""
        blob = self._store.get(key)
        if blob is None:
            return None
        vector = None
        if isinstance(blob, bytes) and blob and not len(blob) % 4 and (not dimension or len(blob) == 4 * dimension):
            vector = np.frombuffer(blob, dtype="<f4").astype(np.float32)
        if vector is None or not np.isfinite(vector).all():
            self._store.warn_once("entry", "an entry is not a query vector; it is embedded again and replaced")
            return None
        return vector

    def put(self, key: str, vector: np.ndarray) -> None:
        self._store.put(key, np.ascontiguousarray(vector, dtype="<f4").tobytes())

    def __len__(self) -> int:
        return len(self._store)

    def close(self) -> None:
        self._store.close()


class CachedQueryEmbedder:
    """An embedder whose query vectors come from a :class:`QueryVectorCache` when seen before.

    ``name`` (and ``dimension`` when given) are the wrapped embedder's, known without creating it, so on-disk
    indexes named by the embedder are found without loading its model; the wrapped embedder is made by ``factory`` on first need
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
