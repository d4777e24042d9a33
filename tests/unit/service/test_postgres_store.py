"""The PostgreSQL store (lcrag.postgres_store) on a real server: versions and notifications, content-addressed files,
and the job queue's leases: a job whose worker died is taken by another, and none is completed twice."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest

from lcrag.errors import OptionError
from lcrag.postgres_store import CHANNEL, PostgresStore, StoreUnavailable, work
from postgres_fixtures import database, postgres  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow


def first_free(taken, digest):
    return next(n for n in ("a.txt", "a (2).txt", "a (3).txt") if n not in taken or taken[n] == digest)


def add(store, collection, content: bytes, key="k"):
    return store.add_file(collection, "a.txt", content, hashlib.sha256(content).hexdigest(), key, first_free)


def test_a_change_raises_the_version_and_is_notified(database):
    store = PostgresStore(database)
    store.create("docs")
    _, before = store.identity("docs")
    with store.listening(CHANNEL) as wait:
        assert add(store, "docs", b"one") == ("a.txt", True)
        assert wait(5) == [f"docs:{before + 1}"]
    assert store.identity("docs")[1] == before + 1
    assert add(store, "docs", b"one") == ("a.txt", False)  # the same content under its name: kept once
    assert add(store, "docs", b"two") == ("a (2).txt", True)
    assert [f.name for f in store.files("docs")] == ["a (2).txt", "a.txt"]
    assert add(store, "nope", b"x") is None
    assert store.delete("docs") and store.identity("docs") is None and not store.delete("docs")
    store.close()


def test_the_same_file_in_two_collections_is_one_job(database):
    store = PostgresStore(database)
    for name in ("a", "b"):
        store.create(name)
        add(store, name, b"shared content")
    assert len(store.jobs()) == 1
    [job] = store.claim("w1")
    assert store.complete(job, b"segment")
    assert all(f.done for name in ("a", "b") for f in store.files(name))
    store.create("c")
    add(store, "c", b"shared content")  # its segment is made: no job
    assert len(store.jobs()) == 1


def test_a_lease_that_ran_out_is_taken_over_and_the_first_claim_writes_nothing(database):
    store = PostgresStore(database)
    store.create("docs")
    add(store, "docs", b"content")
    [first] = store.claim("dead worker", lease=0.5)
    assert store.claim("w2", lease=0.5) == []  # held
    time.sleep(0.7)
    [second] = store.claim("w2", lease=30)
    assert second.id == first.id and second.attempts == 2
    assert not store.complete(first, b"late")  # the dead worker woke: its claim is no longer the job's
    assert store.complete(second, b"segment")
    assert not store.complete(second, b"again")
    [row] = store.jobs()
    assert row["state"] == "done" and row["completions"] == 1
    assert store.segments([(second.hash, second.key)]) == {(second.hash, second.key): b"segment"}


def test_workers_in_parallel_complete_each_job_once(database):
    store = PostgresStore(database)
    store.create("docs")
    for i in range(40):
        store.add_file("docs", f"f{i}.txt", b"x%d" % i, hashlib.sha256(b"x%d" % i).hexdigest(), "k",
                       lambda taken, digest, i=i: f"f{i}.txt")
    stop = threading.Event()
    handled: list[int] = []

    def handle(jobs):
        handled.extend(j.id for j in jobs)
        return {j.id: (b"seg", None) for j in jobs}

    threads = [threading.Thread(target=work, args=(store, handle, f"w{i}", stop, 3, 5, 0.1)) for i in range(4)]
    for t in threads:
        t.start()
    deadline = time.time() + 30
    while not all(f.done for f in store.files("docs")) and time.time() < deadline:
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(10)
    assert sorted(handled) == sorted(set(handled)) and len(handled) == 40
    assert all(r["completions"] == 1 and r["attempts"] == 1 for r in store.jobs())


def test_a_bad_or_unreachable_store_is_one_line_without_the_password(postgres):
    with pytest.raises(OptionError, match="postgresql://"):
        PostgresStore("mysql://u:secret@host/db")
    port = postgres.rsplit(":", 1)[1]
    with pytest.raises(StoreUnavailable) as caught:
        PostgresStore(f"postgresql://u:secret@127.0.0.1:{port}/no_such_database", connect_timeout=2)
    assert "secret" not in str(caught.value) and "\n" not in str(caught.value)
    assert "***@127.0.0.1" in str(caught.value)
