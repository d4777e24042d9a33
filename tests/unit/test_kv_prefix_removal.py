"""The embedded reader's saved KV states of LC prompts are tagged with the collection a question was about, and go
when a file is removed from it (states saved before the removal; a later one, and another collection's, stay)."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

from lcrag.readers.base import GenerationParams
from lcrag.readers.cache import question_tags
from lcrag.readers.call_context import Asking
from lcrag.readers.kv_store import KVStore, forget_collection_prefixes


def _saved(store: KVStore, key: str, collection: str | None) -> None:
    """A state saved as the reader's server saves one (``post`` writes the slot's file), for a question about
    ``collection`` (None: a document of no collection)."""
    def post(action: str, name: str) -> bool:
        (store.directory / name).write_bytes(b"the KV state of a prompt holding QX77123")
        return True

    document = SimpleNamespace(id=collection, collection_id="id" if collection else None)
    params = GenerationParams(asking=Asking("What is the codeword?", document))
    store.save(post, key, question_tags(params))


def test_a_collections_saved_states_go_when_it_loses_a_file_and_others_stay(tmp_path):
    store = KVStore(tmp_path / "kv")
    _saved(store, "old", "vault")
    _saved(store, "elsewhere", "port")
    _saved(store, "plain", None)
    past = time.time() - 60
    for key in ("old", "elsewhere", "plain"):
        for suffix in (".bin", ".tags"):
            if (tmp_path / "kv" / f"{key}{suffix}").exists():
                os.utime(tmp_path / "kv" / f"{key}{suffix}", (past, past))
    removed_at = time.time()
    _saved(store, "new", "vault")  # the collection as it is after the removal
    assert forget_collection_prefixes(tmp_path / "kv", "vault", removed_at) == 1
    assert sorted(p.name for p in (tmp_path / "kv").glob("*.bin")) == ["elsewhere.bin", "new.bin", "plain.bin"]
    assert not (tmp_path / "kv" / "old.tags").exists() and not (tmp_path / "kv" / "plain.tags").exists()
