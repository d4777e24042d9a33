"""Deleting deletes on the PostgreSQL store (a real server): a removed content's parse, segments and blob go from the
database, and each replica's local copy, parse and mirror file go when it sweeps; a content another collection's file
still holds is kept, everywhere; finished jobs are pruned after the retention, queued ones never."""

from __future__ import annotations

import hashlib

import psycopg
import pytest

from lcrag.documents.sandbox import ParseCache, Sandbox
from lcrag.store.base import Segment, SegmentKey
from lcrag.store.postgres import BLOBS, PostgresCollections
from postgres_fixtures import database, postgres  # noqa: F401 - fixtures

TEXT = b"The vault's codeword is QX77123.\n"
DIGEST = hashlib.sha256(TEXT).hexdigest()


@pytest.fixture
def replica(database, tmp_path):
    store = PostgresCollections(database, tmp_path / "collections")
    sandbox = Sandbox(cache_dir=None)
    sandbox.cache = store.shared_parses(ParseCache(tmp_path / "parsed"))
    yield store, sandbox
    store.close()


def _rows(database: str, table: str, column: str) -> int:
    with psycopg.connect(database, autocommit=True) as db:
        return db.execute(f"SELECT count(*) FROM {table} WHERE {column} = %s", (DIGEST,)).fetchone()[0]


def _read(store: PostgresCollections, sandbox: Sandbox, collection: str) -> None:
    """What a job does: the collection mirrored here, each file parsed (kept here and in the database) and its
    segment written."""
    for path in store.paths(collection):
        assert sandbox.load(path)[0].text.startswith("The vault")
    store.put_segment(Segment(SegmentKey(DIGEST, "tokens:64", ""), "t", ((0, 10),), None, 0, 8))


def test_a_removed_contents_parse_segments_blob_and_local_copies_go_unless_another_collection_holds_it(
        replica, database, tmp_path):
    store, sandbox = replica
    for collection in ("a", "b"):
        store.create(collection)
        store.put_file(collection, f"{collection}.txt", iter([TEXT]), 1 << 20)
        _read(store, sandbox, collection)
    parsed = lambda: list((tmp_path / "parsed").glob(f"{DIGEST[:2]}/{DIGEST}-*.json.z"))  # noqa: E731
    blob = tmp_path / "collections" / BLOBS / DIGEST[:2] / DIGEST
    assert parsed() and blob.is_file() and _rows(database, "lcrag_parses", "content") == 2  # (each file's name)
    store.remove_file("a", "a.txt")
    store._let_go("a")
    assert store.sweep() == set()  # b's file holds it: kept
    assert parsed() and blob.is_file() and _rows(database, "lcrag_parses", "content") == 2
    assert _rows(database, "lcrag_segments", "hash") == 1 and _rows(database, "lcrag_blobs", "hash") == 1
    assert not (tmp_path / "collections" / "a" / "files" / "a.txt").exists()
    store.remove_file("b", "b.txt")
    store._let_go("b")
    assert store.sweep() == {DIGEST}
    assert parsed() == [] and not blob.exists() and not (tmp_path / "collections" / "b" / "files" / "b.txt").exists()
    for table, column in (("lcrag_parses", "content"), ("lcrag_segments", "hash"), ("lcrag_blobs", "hash")):
        assert _rows(database, table, column) == 0, table


def test_a_deleted_collections_mirror_goes_and_a_parse_made_after_its_file_went_is_not_kept(replica, database,
                                                                                              tmp_path):
    store, sandbox = replica
    store.create("a")
    store.put_file("a", "a.txt", iter([TEXT]), 1 << 20)
    _read(store, sandbox, "a")
    path = store.paths("a")[0]
    kept = tmp_path / "kept.txt"
    kept.write_bytes(TEXT)  # a job still reading the file when it is removed
    store.delete("a")
    store._let_go("a")
    assert not (tmp_path / "collections" / "a").exists()
    sandbox.cache.put(sandbox.key(kept), {"late": True})
    assert _rows(database, "lcrag_parses", "content") == 0 and not path.exists()


def test_finished_jobs_are_pruned_after_the_retention_and_queued_ones_never(database, tmp_path):
    store = PostgresCollections(database, tmp_path / "collections", lambda *_: [], job_retention=3600)
    store.create("a")
    store.put_file("a", "a.txt", iter([TEXT]), 1 << 20)  # queues a job
    with psycopg.connect(database, autocommit=True) as db:
        db.execute("INSERT INTO lcrag_jobs (collection, name, version, state, finished) VALUES "
                   "('x', 'x', 1, 'done', now() - interval '2 hours'), ('y', 'y', 1, 'done', now()), "
                   "('z', 'z', 1, 'failed', now() - interval '3 hours')")
        store.keep_house()
        left = sorted(db.execute("SELECT name, state FROM lcrag_jobs").fetchall())
    assert left == [("a", "queued"), ("y", "done")]
    store.close()


def test_the_listeners_sweep_looks_only_at_the_contents_it_saw_go(replica, database, tmp_path):
    # An upload into a large collection sweeps nothing; a removal seen in a listing this replica held sweeps its
    # content; a copy no listing here saw go waits for a whole sweep (start-up, a listing read whole).
    store, sandbox = replica
    store.create("a")
    store.put_file("a", "a.txt", iter([TEXT]), 1 << 20)
    store.put_file("a", "keep.txt", iter([b"kept text\n"]), 1 << 20)
    assert len(store.paths("a")) == 2  # the collection mirrored here: its listing held
    stray = tmp_path / "collections" / BLOBS / "ab" / ("ab" + "0" * 62)
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_bytes(b"a copy no file holds")
    store.sweep()  # (the whole sweep a replica makes at start-up)
    assert not stray.exists()
    stray.write_bytes(b"a copy no file holds")
    store.put_file("a", "new.txt", iter([b"new text\n"]), 1 << 20)
    store._let_go("a")
    assert store.sweep(whole=False) == set() and stray.exists()  # an addition: nothing looked at
    store.remove_file("a", "a.txt")
    store._let_go("a")
    assert store.sweep(whole=False) == {DIGEST} and stray.exists()  # only what went
    assert store.sweep() == {stray.name} and not stray.exists()
