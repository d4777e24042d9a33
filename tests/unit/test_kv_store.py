"""The on-disk store of document prefixes' KV states: saved once under a temporary name, restored with a touch,
least recently used evicted past the byte limit, a state the reader cannot restore discarded (fake server)."""

from __future__ import annotations

import os
import time

from lcrag.readers.kv_store import KVStore


class FakeSlots:
    """Writes ``size`` bytes on save, restores only files that start with the right header."""

    def __init__(self, directory, size=100):
        self.directory, self.size, self.calls = directory, size, []

    def __call__(self, action, filename):
        self.calls.append((action, filename))
        path = self.directory / filename
        if action == "save":
            path.write_bytes(b"KV" + b"\0" * (self.size - 2))
            return True
        return path.is_file() and path.read_bytes().startswith(b"KV")


def test_saved_once_under_a_temporary_name_then_restored(tmp_path):
    store, slots = KVStore(tmp_path, 10_000), FakeSlots(tmp_path)
    assert store.restore(slots, "doc") is False  # nothing saved yet: no call to the server
    store.save(slots, "doc")
    store.save(slots, "doc")
    assert [a for a, _ in slots.calls] == ["save"] and slots.calls[0][1].startswith(".doc.")
    assert store.path("doc").is_file() and not list(tmp_path.glob(".*.tmp"))
    assert store.restore(slots, "doc") is True


def test_least_recently_used_states_go_past_the_limit(tmp_path):
    store, slots = KVStore(tmp_path, 250), FakeSlots(tmp_path)
    for i, key in enumerate(["a", "b"]):
        store.save(slots, key)
        os.utime(store.path(key), (time.time() - 100 + i, time.time() - 100 + i))
    assert store.restore(slots, "a")  # a is now the most recently used
    store.save(slots, "c")
    assert sorted(p.stem for p in tmp_path.glob("*.bin")) == ["a", "c"]


def test_a_state_the_reader_cannot_restore_is_discarded(tmp_path, caplog):
    store, slots = KVStore(tmp_path, 10_000), FakeSlots(tmp_path)
    store.path("doc").write_bytes(b"garbage")
    assert store.restore(slots, "doc") is False
    assert not store.path("doc").exists() and "discarded a KV state file" in caplog.text


def test_a_failed_save_leaves_no_file(tmp_path):
    store = KVStore(tmp_path, 10_000)
    store.save(lambda action, name: False, "doc")
    assert not list(tmp_path.iterdir())
