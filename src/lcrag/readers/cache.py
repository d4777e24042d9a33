"""A disk cache of completions keyed by (reader identity, messages, generation parameters).

The global cache (``CACHE/completions.sqlite``) is derived data: a damaged file is set aside and recreated with one
warning, and a damaged entry is a miss that the next answer replaces. A run directory's own cache is user data
(``derived=False``): damage there is reported as a :class:`RunDirectoryError`, never repaired.

A completion made while answering a question about a service's collection is tagged with the collection
(:func:`collection_tag`): when a file is removed from it, :func:`forget_collection` removes those completions, whose
prompts held its text.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
from dataclasses import asdict, fields
from pathlib import Path

from lcrag.core.errors import RunDirectoryError
from lcrag.readers.base import Completion, GenerationParams, Message, Reader, reader_identity
from lcrag.core.sqlite_store import KeyValueStore

log = logging.getLogger("lcrag")

_REQUIRED = ("text", "model", "prompt_tokens", "completion_tokens")
_RUN_CACHE_ADVICE = ("its cached answers cannot be trusted; move the file away to recompute them "
                     "(this repeats their LLM calls) or restore it from a backup")


def completion_key(identity: str, messages: list[Message], params: GenerationParams) -> str:
    payload = {"model": identity, "messages": messages, "params": params.as_payload()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def collection_tag(name: str) -> str:
    return f"collection:{name}"


def question_tags(params: GenerationParams) -> tuple[str, ...]:
    """The tags of a completion made with ``params``: its question's collection, when it asks about one (a
    service's collection document carries its ``collection_id``)."""
    document = params.asking.document if params.asking is not None else None
    if document is None or getattr(document, "collection_id", None) is None:
        return ()
    return (collection_tag(document.id),)


def forget_collection(path: str | Path, name: str) -> int:
    """Remove from the completion cache at ``path`` (when there is one) every completion made for a question
    about collection ``name``; how many went (a cache that cannot be changed is said in the log: 0)."""
    if not Path(path).is_file():
        return 0
    try:
        cache = CompletionCache(path)
        try:
            return cache.forget(collection_tag(name))
        finally:
            cache.close()
    except (OSError, sqlite3.Error) as exc:
        log.warning("%s: the completions cached for collection %s could not be removed (%s)", path, name, exc)
        return 0


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
        self._store = KeyValueStore(self.path, "completions", "value", "TEXT",
                                    ("answers are computed again", "answers are not cached"), derived, self._refuse)

    def _refuse(self, what: str, reason: str) -> RunDirectoryError:
        if what == "damaged":
            return RunDirectoryError(f"{self.path}: damaged SQLite database ({reason}); {_RUN_CACHE_ADVICE}")
        if what == "read":
            return RunDirectoryError(f"{self.path}: cannot be read ({reason}); {_RUN_CACHE_ADVICE}")
        return RunDirectoryError(f"{self.path}: cannot be written ({reason}); the answer was not saved")

    def get(self, key: str) -> Completion | None:
        """The completion stored under ``key``; None on a miss (and, in a derived cache, on a damaged entry)."""
        value = self._store.get(key)
        if value is None:
            return None
        completion = parse_completion(value)
        if completion is None:
            if not self.derived:
                raise RunDirectoryError(f"{self.path}: the entry {key} is not a completion; {_RUN_CACHE_ADVICE}")
            self._store.warn_once("entry", "an entry is not a completion; it is computed again and replaced")
        return completion

    def put(self, key: str, completion: Completion, tags: tuple[str, ...] = ()) -> None:
        self._store.put(key, json.dumps({**asdict(completion), "from_cache": False}), tags)

    def forget(self, tag: str) -> int:
        """Remove every completion put with ``tag``; how many went."""
        return self._store.forget(tag)

    def __len__(self) -> int:
        return len(self._store)

    def close(self) -> None:
        self._store.close()


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

    @property
    def parameter_count(self) -> int | None:
        return getattr(self.inner, "parameter_count", None)

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
        self.cache.put(key, completion, question_tags(params))
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
