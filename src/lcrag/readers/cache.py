"""A disk cache of completions keyed by (model, messages, generation parameters)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from dataclasses import asdict
from pathlib import Path

from lcrag.readers.base import Completion, GenerationParams, Message, Reader


def completion_key(model: str, messages: list[Message], params: GenerationParams) -> str:
    payload = {"model": model, "messages": messages, "params": params.as_payload()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


class CompletionCache:
    """SQLite key-value store; safe to share between threads and processes."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS completions (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self._db.commit()

    def get(self, key: str) -> Completion | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM completions WHERE key = ?", (key,)).fetchone()
        return Completion(**json.loads(row[0])) if row else None

    def put(self, key: str, completion: Completion) -> None:
        value = json.dumps({**asdict(completion), "from_cache": False})
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO completions (key, value) VALUES (?, ?)", (key, value))
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM completions").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


class CachedReader:
    """Wraps a reader: a completion seen before is returned from disk, marked ``from_cache``, with its original counts."""

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

    def complete(self, messages: list[Message], params: GenerationParams) -> Completion:
        key = completion_key(self.inner.model, messages, params)
        hit = self.cache.get(key)
        if hit is not None:
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
