"""Collections that grow file by file (issue 36, items 1 and 2): a file added or removed changes the collection's
answers and sources (real BM25; real MiniLM for hybrid), the same file in two collections is processed once,
indexing never holds the reader's lock, and LC over a collection larger than the window reads whole top files."""

from __future__ import annotations



CRANE = "The crane reset code is 7781. Hold the red button for five seconds before entering the reset code."
PUMP = "The pump pressure limit is 4711 kilopascal. Open the bypass valve when the pump pressure alarm sounds."


def test_the_embedded_store_is_a_collection_store_whose_version_moves_with_its_files(tmp_path):
    from lcrag.store.embedded import EmbeddedStore
    from lcrag.store.base import CollectionStore, Segment, SegmentKey

    store = EmbeddedStore(tmp_path / "collections")
    try:
        assert isinstance(store, CollectionStore)
        store.create("ops")
        first = store.state("ops").version
        record, new = store.put_file("ops", "crane.txt", iter([CRANE.encode()]), 1 << 20)
        assert new and record.size == len(CRANE) and store.version("ops") == first + 1
        assert store.put_file("ops", "crane.txt", iter([CRANE.encode()]), 1 << 20)[1] is False  # the same: kept once
        assert store.version("ops") == first + 1 and [r.content_hash for r in store.file_records("ops")] == [
            record.content_hash]
        store.remove_file("ops", "crane.txt")
        assert store.version("ops") == first + 2 and store.file_records("ops") == []
        key = SegmentKey(record.content_hash, "words:20:0", "e")
        store.put_segment(Segment(key, "t", ((0, 5),), b"\0" * 8, 2))
        assert store.segment(key) == Segment(key, "t", ((0, 5),), b"\0" * 8, 2)
        identity = store.identity("ops")
        store.cache_answer(identity, 3, "q", b"a")
        assert store.cached_answer(identity, 3, "q") == b"a" and store.cached_answer(identity, 4, "q") is None
    finally:
        store.close()


def test_the_embedded_store_collects_what_no_file_holds_any_more(tmp_path):
    """As the PostgreSQL store does: a removed file's segments go unless another file (of any collection, found among
    the files of its size) holds the same content; a deleted collection's answers and version go with it."""
    import hashlib
    import sqlite3

    from lcrag.store.embedded import EmbeddedStore
    from lcrag.store.base import Segment, SegmentKey

    store = EmbeddedStore(tmp_path / "collections")

    def segment_of(content: str) -> None:
        for chunking in ("words:20:0", "words:300:0"):
            key = SegmentKey(hashlib.sha256(content.encode()).hexdigest(), chunking, "e")
            store.put_segment(Segment(key, "t", ((0, 4),), None, 0, 1))

    def kept(content: str) -> int:
        return sum(store.segment(SegmentKey(hashlib.sha256(content.encode()).hexdigest(), c, "e")) is not None
                   for c in ("words:20:0", "words:300:0"))

    try:
        store.create("ops"), store.create("other")
        for collection, name, text in (("ops", "crane.txt", CRANE), ("ops", "pump.txt", PUMP),
                                       ("other", "pump copy.txt", PUMP)):
            store.put_file(collection, name, iter([text.encode()]), 1 << 20)
        segment_of(CRANE), segment_of(PUMP)
        store.remove_file("ops", "crane.txt")
        assert kept(CRANE) == 0 and kept(PUMP) == 2
        store.remove_file("ops", "pump.txt")
        assert kept(PUMP) == 2  # still in "other", under another name
        identity, version = store.identity("other"), store.version("other")
        assert store.cache_answer(identity, version, "q", b"answer")
        store.delete("other")
        assert not store.cache_answer(identity, version, "asked before the delete", b"answered after it")
        assert kept(PUMP) == 0
        with sqlite3.connect(tmp_path / "collections.sqlite") as db:
            assert db.execute("SELECT count(*) FROM answers WHERE id = ?", (identity,)).fetchone()[0] == 0
            assert db.execute("SELECT count(*) FROM versions WHERE id = ?", (identity,)).fetchone()[0] == 0
        store.create("other")
        assert store.identity("other") != identity and store.version("other") == 1  # made again: a new collection
    finally:
        store.close()
