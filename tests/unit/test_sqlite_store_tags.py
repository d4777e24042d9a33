"""Entries of the SQLite key-value store put with a tag are removed together (KeyValueStore.forget), their bytes
gone from the database file and its write-ahead log, not only from its rows; the completion cache tags a completion
made for a question about a service's collection with it."""

from __future__ import annotations

from pathlib import Path

from lcrag.readers.base import Completion
from lcrag.readers.cache import CompletionCache, collection_tag, forget_collection
from lcrag.core.sqlite_store import KeyValueStore


def _bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*") if p.is_file())


def test_forgetting_a_tag_removes_its_entries_and_their_bytes_and_keeps_the_rest(tmp_path):
    path = tmp_path / "cache.sqlite"
    store = KeyValueStore(path, "entries", "value", "TEXT", ("computed again", "not kept"))
    store.put("a", "secret QX77123 " * 200, ("collection:vault",))
    store.put("b", "the harbour master is Ines", ("collection:port",))
    store.put("c", "untagged")
    assert b"QX77123" in _bytes(path)
    assert store.forget("collection:vault") == 1
    assert store.get("a") is None and store.get("b") and store.get("c")
    assert b"QX77123" not in _bytes(path)
    store.close()


def test_a_completion_cache_forgets_a_collections_completions(tmp_path):
    path = tmp_path / "completions.sqlite"
    cache = CompletionCache(path)
    cache.put("k1", Completion(text="QX77123", model="m", prompt_tokens=3, completion_tokens=1),
              (collection_tag("vault"),))
    cache.put("k2", Completion(text="Ines", model="m", prompt_tokens=3, completion_tokens=1))
    cache.close()
    assert forget_collection(path, "vault") == 1 and forget_collection(tmp_path / "none.sqlite", "vault") == 0
    cache = CompletionCache(path)
    assert cache.get("k1") is None and cache.get("k2").text == "Ines"
    cache.close()
