"""The PostgreSQL collection store (lcrag.store.postgres over lcrag.store.postgres_database) on a real server: the
CollectionStore Protocol, versions and notifications, content-addressed files, and the job queue's leases: a job
whose worker died is taken by another, and none is completed twice."""

from __future__ import annotations

import time

import pytest

from lcrag.core.errors import OptionError
from lcrag.store.postgres_database import CHANNEL, StoreUnavailable
from lcrag.store.collections import NotFound, TooLarge
from lcrag.store.base import CollectionStore, Segment, SegmentKey
from lcrag.store.postgres import PostgresCollections
from postgres_fixtures import database, postgres  # noqa: F401 - fixtures



def indexed(name, files_dir, progress):  # the service's indexing, as a job runs it: every file read
    files = sorted(files_dir.iterdir())
    progress(len(files), len(files))
    return [f"{p}: not a text file" for p in files if p.read_bytes().startswith(b"\0")]


@pytest.fixture
def store(database, tmp_path):
    store = PostgresCollections(database, tmp_path / "collections", indexed, lease=1.0)
    yield store
    store.close()


def add(store, collection, content: bytes, filename="a.txt"):
    return store.put_file(collection, filename, iter([content]), 1 << 20)


def test_it_is_a_collection_store_and_every_change_is_a_new_version_told_to_all(store, tmp_path):
    assert isinstance(store, CollectionStore)
    before = store.create("docs")["status"]
    assert before["state"] == "empty"
    version = store.version("docs")
    with store.db.listening(CHANNEL) as wait:
        record, new = add(store, "docs", b"one")
        assert new and record.name == "a.txt" and wait(5) == [f"docs:{store.version('docs')}"]
    assert store.version("docs") > version and store.state("docs").state == "indexing"
    assert add(store, "docs", b"one")[1] is False  # the same content under its name: kept once, no new version
    assert add(store, "docs", b"two")[0].name == "a (2).txt"
    other = PostgresCollections(store.db.url, tmp_path / "replica")  # another replica: files copied from the database
    assert [p.name for p in other.paths("docs")] == ["a (2).txt", "a.txt"]
    assert other.file("docs", "a (2).txt").read_bytes() == b"two"
    assert other.identity("docs") == store.identity("docs")
    store.remove_file("docs", "a.txt")
    assert [p.name for p in other.paths("docs")] == ["a (2).txt"]  # the mirror follows the database
    store.delete("docs")
    for call in (other.state, other.files_dir, lambda n: add(store, n, b"x")):
        with pytest.raises(NotFound):
            call("docs")
    other.close()


def test_a_replica_is_told_of_another_ones_changes(store, tmp_path):
    told: list[str] = []
    store.watch(told.append)
    other = PostgresCollections(store.db.url, tmp_path / "replica")
    other.create("docs")
    deadline = time.time() + 10
    for n in range(200):  # changes until the listener, started in the background, hears one
        add(other, "docs", b"%d" % n, f"f{n}.txt")
        time.sleep(0.05)
        if "docs" in told or time.time() > deadline:
            break
    told.clear()
    other.delete("docs")
    while "docs" not in told and time.time() < deadline:
        time.sleep(0.05)
    assert "docs" in told
    other.close()


def test_a_parse_made_by_one_replica_is_read_by_another(store, tmp_path):
    from lcrag.documents.sandbox import ParseCache, Sandbox, documents_of

    path = tmp_path / "a.txt"
    path.write_text("The passkey is 48213.")
    store.create("docs")  # a parse is kept in the database while a file holds its content
    store.put_file("docs", "a.txt", iter([path.read_bytes()]), 1 << 20)
    first = Sandbox(cache_dir=None)
    first.cache = store.shared_parses()
    assert first.load(path)[0].text.startswith("The passkey")
    other = PostgresCollections(store.db.url, tmp_path / "replica")
    second = Sandbox(cache_dir=None)
    second.cache = other.shared_parses(ParseCache(tmp_path / "parsed"))
    key = second.key(path)
    outcome = second.cache.get(key)
    assert outcome is not None and documents_of(outcome, path)[0].text == "The passkey is 48213."
    assert second.cache.local.get(key) is not None  # kept on this machine too
    other.close()


def test_an_upload_over_the_limit_keeps_nothing(store):
    store.create("docs")
    with pytest.raises(TooLarge):
        store.put_file("docs", "big.txt", iter([b"x" * 600, b"y" * 600]), 1000)
    assert store.files("docs") == [] and not list(store.root.rglob(".upload-*"))


def test_state_recorded_for_an_old_version_is_ignored(store):
    store.create("docs")
    add(store, "docs", b"one")
    version = store.version("docs")
    add(store, "docs", b"two", "b.txt")
    assert not store.set_state("docs", version, "ready", 1)
    assert store.state("docs").state == "indexing"
    assert store.set_state("docs", store.version("docs"), "ready", 2)
    assert store.status("docs").state == "ready"


def test_segments_are_kept_by_content(store):
    key = SegmentKey("f" * 64, "words:300", "minilm")
    segment = Segment(key, "text", ((0, 5), (5, 9)), b"\0" * 16, 2, 9)
    store.put_segment(segment)
    assert store.segment(key) == segment and store.segment(SegmentKey("f" * 64, "words:300")) is None
    store.create("docs")
    identity, version = store.state("docs").id, store.version("docs")
    store.cache_answer(identity, version, "q", b"answer")
    store.cache_answer(identity, version - 1, "q", b"stale")  # a version the collection moved past: not kept
    assert store.cached_answer(identity, version, "q") == b"answer"
    assert store.cached_answer(identity, version + 1, "q") is None
    assert store.cached_answer(identity, version - 1, "q") is None


def test_what_no_file_or_version_holds_any_more_is_collected(store):
    """A removed file's blob and segments go unless another file (of any collection) holds the same content; the
    answers kept for a version go when the collection moves on, and all of them with the collection."""
    import hashlib

    def segment_of(content: bytes) -> None:
        key = SegmentKey(hashlib.sha256(content).hexdigest(), "words:300", "minilm")
        store.put_segment(Segment(key, "text", ((0, 4),), None, 0, 1))

    def kept(table: str, content: bytes) -> bool:  # in the database (a replica's memory may keep a segment it read:
        with store.db.connection() as db:  # by content, it is still right)
            return db.execute(f"SELECT 1 FROM {table} WHERE hash = %s",
                              (hashlib.sha256(content).hexdigest(),)).fetchone() is not None

    store.create("docs"), store.create("other")
    add(store, "docs", b"only here", "a.txt"), add(store, "docs", b"shared", "b.txt")
    add(store, "other", b"shared", "b.txt")
    segment_of(b"only here"), segment_of(b"shared")
    identity, version = store.state("docs").id, store.version("docs")  # as the answer cache keys them
    store.cache_answer(identity, version, "q", b"answer")
    store.remove_file("docs", "a.txt")
    assert not kept("lcrag_segments", b"only here") and not kept("lcrag_blobs", b"only here")
    assert store.cached_answer(identity, version, "q") is None  # a new version: the old one's answers are gone
    store.remove_file("docs", "b.txt")
    assert kept("lcrag_segments", b"shared") and kept("lcrag_blobs", b"shared")  # still in "other"
    store.cache_answer(store.state("other").id, store.version("other"), "q", b"answer")
    store.delete("other")
    assert not kept("lcrag_segments", b"shared") and not kept("lcrag_blobs", b"shared")
    with store.db.connection() as db:
        assert db.execute("SELECT count(*) FROM lcrag_answers").fetchone()[0] == 0


def test_a_job_whose_worker_died_is_taken_over_and_the_first_claim_writes_nothing(store):
    store.create("docs")
    add(store, "docs", b"content")
    add(store, "docs", b"\0binary", "b.txt")
    [first] = store.db.claim("dead worker", lease=0.5)
    assert store.db.claim("w2", lease=0.5) == []  # held
    time.sleep(0.7)
    [second] = store.db.claim("w2", lease=30)
    assert second.id == first.id and second.attempts == 2
    assert not store.db.complete(first, *store.run_job(first))  # woke too late: writes nothing
    assert store.state("docs").state == "indexing"
    assert store.db.complete(second, *store.run_job(second))
    assert not store.db.complete(second)
    [row] = store.jobs()
    assert row["state"] == "done" and row["completions"] == 1
    state = store.state("docs")
    assert (state.state, state.done, state.skipped) == ("ready", 2, ("b.txt: not a text file",))


def test_replicas_claiming_jobs_together_run_each_once(store, tmp_path):
    replicas = [store] + [PostgresCollections(store.db.url, tmp_path / f"r{i}", indexed, lease=1.0) for i in range(3)]
    for replica in replicas:
        replica.start_jobs(2)
    for i in range(12):
        store.create(f"c{i}")
        for j in range(3):
            add(replicas[j], f"c{i}", b"x%d-%d" % (i, j), f"f{j}.txt")
    deadline = time.time() + 60
    while any(store.state(f"c{i}").state != "ready" for i in range(12)) and time.time() < deadline:
        time.sleep(0.05)
    assert all(store.state(f"c{i}").done == 3 for i in range(12))
    done = [r for r in store.jobs() if r["state"] == "done"]
    assert all(r["completions"] == 1 for r in store.jobs())
    assert len({r["id"] for r in done}) == len(done) >= 12
    for replica in replicas[1:]:
        replica.close()


def test_a_bad_or_unreachable_store_is_one_line_without_the_password(postgres, tmp_path):
    with pytest.raises(OptionError, match="postgresql://"):
        PostgresCollections("mysql://u:secret@host/db", tmp_path)
    port = postgres.rsplit(":", 1)[1]
    with pytest.raises(StoreUnavailable) as caught:
        PostgresCollections(f"postgresql://u:secret@127.0.0.1:{port}/no_such_database", tmp_path)
    assert "secret" not in str(caught.value) and "\n" not in str(caught.value)
    assert "***@127.0.0.1" in str(caught.value)


def test_a_file_is_stored_and_read_back_in_parts(store, tmp_path, monkeypatch):
    """No file is whole in memory: its bytes go to the database in parts, and another replica writes them to its
    mirror part by part; a blob stored whole (before parts) is still read, and parts go with their blob."""
    import hashlib

    import lcrag.store.postgres as module

    monkeypatch.setattr(module, "BLOB_PART", 4)
    content = b"0123456789"
    store.create("docs")
    add(store, "docs", content, "a.txt")
    digest = hashlib.sha256(content).hexdigest()
    with store.db.connection() as db:
        parts = db.execute("SELECT part, content FROM lcrag_blob_parts WHERE hash = %s ORDER BY part",
                           (digest,)).fetchall()
        legacy = hashlib.sha256(b"stored whole").hexdigest()  # a blob written by an lcrag before parts
        db.execute("INSERT INTO lcrag_blobs (hash, content) VALUES (%s, %s)", (legacy, b"stored whole"))
        cid = db.execute("SELECT id FROM lcrag_collections WHERE name = 'docs'").fetchone()[0]
        db.execute("INSERT INTO lcrag_files (collection, name, hash, bytes, added) VALUES (%s, 'old.txt', %s, 12, 0)",
                   (cid, legacy))
    assert [(p, bytes(c)) for p, c in parts] == [(0, b"0123"), (1, b"4567"), (2, b"89")]
    other = PostgresCollections(store.db.url, tmp_path / "replica")
    try:
        assert other.file("docs", "a.txt").read_bytes() == content
        assert other.file("docs", "old.txt").read_bytes() == b"stored whole"
    finally:
        other.close()
    store.remove_file("docs", "a.txt")
    with store.db.connection() as db:
        assert db.execute("SELECT count(*) FROM lcrag_blob_parts").fetchone()[0] == 0


def test_deletes_racing_uploads_of_the_same_bytes_through_another_replica_never_fail(store, tmp_path, monkeypatch):
    """Issue 42: a delete of a collection (or of a file) collects the blob only it held, while another replica's
    upload of the same bytes has inserted its file but not committed; the upload commits while the blob is being
    deleted. Was: the delete failed on lcrag_files_hash_fkey (a 500); now it keeps that blob and finishes, and the
    uploaded file is whole, read back by a new replica. Each round holds the upload's transaction open until the
    delete has begun (threads, two store instances)."""
    import hashlib
    import threading

    content = b"the same bytes, uploaded while a delete collects them"
    digest = hashlib.sha256(content).hexdigest()
    other = PostgresCollections(store.db.url, tmp_path / "replica")
    inserted, deleting = threading.Event(), threading.Event()
    changed = other._changed

    def held_open(db, cid, name):  # the uploader's file row, uncommitted until the delete is under way
        changed(db, cid, name)
        inserted.set()
        deleting.wait(10)
        time.sleep(0.1)

    monkeypatch.setattr(other, "_changed", held_open)
    failures = []

    def attempt(call, *args):
        try:
            call(*args)
        except Exception as exc:  # noqa: BLE001 - any failure is the test's finding
            failures.append(f"{call.__name__}: {type(exc).__name__}: {exc}")

    def delete(round_number):
        inserted.wait(10)
        deleting.set()
        if round_number % 2:
            attempt(store.remove_file, "gone", "a.txt")
        else:
            attempt(store.delete, "gone")

    try:
        for round_number in range(12):
            inserted.clear(), deleting.clear()
            store.create("gone"), store.create("kept")
            add(store, "gone", content, "a.txt")  # only "gone" holds the content
            racing = [threading.Thread(target=attempt, args=(add, other, "kept", content, f"{round_number}.txt")),
                      threading.Thread(target=delete, args=(round_number,))]
            for thread in racing:
                thread.start()
            for thread in racing:
                thread.join(30)
            assert failures == [], failures
            assert [f.name for f in store.file_records("kept")] == [f"{round_number}.txt"]
            fresh = PostgresCollections(store.db.url, tmp_path / f"fresh-{round_number}")
            try:
                assert fresh.file("kept", f"{round_number}.txt").read_bytes() == content
            finally:
                fresh.close()
            with store.db.connection() as db:
                assert db.execute("SELECT count(*) FROM lcrag_blobs WHERE hash = %s", (digest,)).fetchone()[0] == 1
            store.delete("kept")
            if round_number % 2:
                store.delete("gone")
            with store.db.connection() as db:  # nothing holds it now: collected
                assert db.execute("SELECT count(*) FROM lcrag_blobs").fetchone()[0] == 0
    finally:
        other.close()


def test_a_full_disk_or_database_during_an_upload_leaves_nothing(store, tmp_path, monkeypatch):
    """Issue 42, item 4 on PostgreSQL: the temporary file, the blob and the file's row fail in turn as a full disk or
    database does: a StorageError (507) whose message names no path, and nothing stored (no file, no new version,
    no job, no temporary file); the same upload then stores it. The local copy failing after the commit is no
    failure of the upload (the mirror copies it from the database when read)."""
    import errno
    import os

    import psycopg

    import lcrag.store.postgres as module
    from lcrag.store.collections import StorageError

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "/srv/cache/.blobs/x")

    def database_full(*args, **kwargs):
        raise psycopg.errors.DiskFull('could not extend file "base/16384/2613": No space left on device')

    store.create("docs")
    version = store.version("docs")
    for where, name, failing in [(os, "fsync", disk_full), (module, "_store_blob", database_full)]:
        with monkeypatch.context() as patch:
            patch.setattr(where, name, failing)
            with pytest.raises(StorageError) as refused:
                add(store, "docs", b"content")
        assert refused.value.full and "base/" not in str(refused.value) and "/srv" not in str(refused.value)
        assert str(refused.value).startswith("a.txt could not be stored: the server's storage failed (")
        assert store.file_records("docs") == [] and store.version("docs") == version and store.jobs() == []
        assert [p.name for p in (tmp_path / "collections" / ".blobs").iterdir()] == []
    with monkeypatch.context() as patch:
        patch.setattr(module.os, "link", disk_full)  # the local copy, after the commit
        assert add(store, "docs", b"content")[1] is True
    other = PostgresCollections(store.db.url, tmp_path / "replica")
    try:
        assert other.file("docs", "a.txt").read_bytes() == b"content"
        assert store.file("docs", "a.txt").read_bytes() == b"content"  # copied back from the database
    finally:
        other.close()


def test_the_same_upload_again_indexes_a_collection_whose_indexing_failed(database, tmp_path):
    failing = [True]

    def index(name, files_dir, progress):
        if failing[0]:
            raise OSError(28, "No space left on device")
        return indexed(name, files_dir, progress)

    store = PostgresCollections(database, tmp_path / "collections", index, lease=1.0)
    store.start_jobs()
    try:
        store.create("docs")
        store.add_file("docs", "a.txt", iter([b"content"]), 1 << 20)
        status = store.wait("docs", 30)
        assert status.state == "error" and "No space left on device" in status.error, status
        failing[0] = False
        assert store.add_file("docs", "a.txt", iter([b"content"]), 1 << 20) == {"name": "a.txt", "bytes": 7}
        assert store.wait("docs", 30).state == "ready"
    finally:
        store.close()


def test_a_collections_file_count_is_kept_with_its_files_and_counted_once_in_a_store_made_before(store, tmp_path):
    # (its status reads the count kept by the files' trigger, never counting the rows at each poll)
    store.create("docs")
    for number in range(5):
        add(store, "docs", f"text {number}".encode(), f"f{number}.txt")
    store.remove_file("docs", "f1.txt")
    add(store, "docs", b"text 0", "f0.txt")  # the same content again: no new file

    def kept():
        with store.db.connection() as db:
            return db.execute("SELECT c.files, (SELECT count(*) FROM lcrag_files f WHERE f.collection = c.id) "
                              "FROM lcrag_collections c WHERE name = 'docs'").fetchone()

    assert kept() == (4, 4) and store.status("docs").files == 4
    with store.db.connection() as db:  # a store made before the count was kept
        db.execute("UPDATE lcrag_collections SET files = NULL")
    assert store.status("docs").files == 4
    PostgresCollections(store.db.url, tmp_path / "replica").close()  # a replica starting counts it once
    assert kept() == (4, 4)
