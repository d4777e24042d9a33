"""A full disk or database during an upload (issue 42, item 4): each step that writes (the temporary file, its link
into place, the version recorded in the database, the indexing) fails in turn, injected at the call, over real HTTP
on loopback with a scripted reader; the upload is 507 in one JSON line and leaves nothing half-done (listing, status
and answers agree), and the same upload after space is freed is stored and indexed. Then the same for real: `lcrag
serve` with its cache on a small tmpfs (root only: skipped where it cannot be mounted)."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from reader_servers import Stub
from service_fixtures import free_port, lcrag_process, running, wait_ready

from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.service.answering import Answering
from lcrag.service.http.app import create_app
from lcrag.store.collections import StorageError
from lcrag.store.embedded import StoreDatabase
from lcrag.service.limits import Limits
from lcrag.core.files import out_of_space

FIRST = "# Crane\nThe reset code of the crane is 7781.\n"
SECOND = "# Hoist\nThe hoist limit of the crane is 12 tonnes.\n"


def database_full() -> sqlite3.OperationalError:
    """SQLite's own "database or disk is full" (SQLITE_FULL): a database held to one page grows past it."""
    db = sqlite3.connect(":memory:")
    db.execute("PRAGMA max_page_count = 1")
    try:
        db.execute("CREATE TABLE grows (x)")
    except sqlite3.OperationalError as exc:
        return exc
    finally:
        db.close()
    raise AssertionError("SQLite grew past max_page_count")


def disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device", "/srv/lcrag/cache/collections/ops/files/x")


def database_is_full(*args, **kwargs):
    raise database_full()


# Where an upload meets the full disk or database: what to patch, and with what.
STEPS = {
    "temporary file": (os, "fsync", disk_full),
    "link into place": (os, "link", disk_full),
    "version recorded": (StoreDatabase, "bump", database_is_full),
}


@pytest.fixture
def service(tmp_path, scripted_reader):
    settings = Settings(cache=False, cache_dir=tmp_path / "cache", chunking="words:20", k=4, strategy="rag")
    answering = Answering(settings, tmp_path / "collections", price_as="gpt-4o-mini",
                          pipeline=Pipeline(settings, reader=scripted_reader(lambda m: "12 tonnes")))
    return running(create_app(answering, None, Limits(max_upload_bytes=1 << 20))), answering


def upload(url, name, text):
    return httpx.post(f"{url}/v1/collections/ops/files", files={"file": (name, text.encode())}, timeout=60)


def cited(url) -> set[str]:
    asked = httpx.post(f"{url}/v1/ask", json={"collection": "ops", "question": "What is the hoist limit?"},
                       timeout=60)
    assert asked.status_code == 200, asked.text
    return {source["file"] for source in asked.json()["sources"]}


def assert_agree(url, root: Path, files: list[str]) -> None:
    """The listing, the status, the folder and the answers all hold ``files``, and no temporary file is left."""
    status = wait_ready(url, "ops")
    described = httpx.get(f"{url}/v1/collections/ops").json()
    assert [f["name"] for f in described["files"]] == files, described
    assert status["state"] == "ready" and status["files"] == len(files), status
    assert sorted(os.listdir(root / "ops" / "files")) == files
    assert cited(url) <= set(files)


def test_full_disk_and_database_are_recognised():
    assert out_of_space(OSError(errno.ENOSPC, "full")) and out_of_space(OSError(errno.EDQUOT, "quota"))
    assert out_of_space(database_full()) and not out_of_space(sqlite3.OperationalError("database is locked"))
    assert not out_of_space(OSError(errno.EACCES, "denied"))

    class DiskFull(Exception):  # PostgreSQL's, as psycopg raises it (its sqlstate)
        sqlstate = "53100"

    assert out_of_space(DiskFull()) and StorageError("x could not be stored", DiskFull()).full
    refused = StorageError("a.md could not be stored", database_full())
    assert refused.full and str(refused) == ("a.md could not be stored: the server's storage failed (database or "
                                             "disk is full)")


@pytest.mark.parametrize("step", STEPS)
def test_an_upload_that_meets_a_full_disk_leaves_nothing_and_its_retry_indexes_it(service, monkeypatch, step):
    server, answering = service
    root = answering.collections.root
    where, name, failing = STEPS[step]
    with server as url:
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"}).status_code == 201
        assert upload(url, "crane.md", FIRST).status_code == 201
        assert_agree(url, root, ["crane.md"])
        with monkeypatch.context() as patch:
            patch.setattr(where, name, failing)
            refused = upload(url, "hoist.md", SECOND)
        assert refused.status_code == 507, refused.text
        assert refused.headers["content-type"] == "application/json" and "\n" not in refused.text
        message = refused.json()["error"]["message"]
        assert message.startswith("hoist.md could not be stored: the server's storage failed (")
        assert "/srv" not in message and str(root) not in message
        assert_agree(url, root, ["crane.md"])
        assert upload(url, "hoist.md", SECOND).status_code == 201  # space freed: the same upload again
        assert_agree(url, root, ["crane.md", "hoist.md"])
        assert "hoist.md" in cited(url)


def test_indexing_that_meets_a_full_disk_is_finished_by_the_same_upload_again(service, monkeypatch):
    """The upload is stored (201) and its indexing fails on the full disk: the collection says so, and uploading the
    same file again (the same content under the same name) indexes it. Was: 201 and nothing indexed."""
    server, answering = service
    root = answering.collections.root
    index = answering.base.index
    with server as url:
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"}).status_code == 201
        monkeypatch.setattr(answering.base, "index", disk_full)
        assert upload(url, "hoist.md", SECOND).status_code == 201
        status = wait_ready(url, "ops")
        assert status["state"] == "error", status
        assert status["error"] == "indexing failed: the server's storage failed (No space left on device: x)"
        monkeypatch.setattr(answering.base, "index", index)
        again = upload(url, "hoist.md", SECOND)
        assert again.status_code == 201 and again.json()["name"] == "hoist.md", again.text
        assert_agree(url, root, ["hoist.md"])
        assert cited(url) == {"hoist.md"}


def test_segments_that_cannot_be_kept_are_the_collections_error_without_paths(service, monkeypatch):
    server, answering = service
    with server as url:
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"}).status_code == 201
        real = answering.collections.database._db
        monkeypatch.setattr(answering.collections.database, "_db", FullOnInsert(real))
        assert upload(url, "hoist.md", SECOND).status_code == 201
        status = wait_ready(url, "ops")
        assert status["state"] == "error", status
        assert status["error"] == ("a segment could not be kept: the server's storage failed (database or disk is "
                                   "full)")
        monkeypatch.setattr(answering.collections.database, "_db", real)
        assert upload(url, "hoist.md", SECOND).status_code == 201
        assert wait_ready(url, "ops")["state"] == "ready"


class FullOnInsert:
    """A connection whose segment writes fail as a full database's do; everything else passes through."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def execute(self, sql, *args):
        if sql.startswith("INSERT OR REPLACE INTO segments"):
            raise database_full()
        return self.db.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self.db, name)


def test_removing_a_file_with_the_database_full_is_507_and_removes_nothing(service, monkeypatch):
    server, answering = service
    root = answering.collections.root
    with server as url:
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"}).status_code == 201
        assert upload(url, "hoist.md", SECOND).status_code == 201
        assert_agree(url, root, ["hoist.md"])
        with monkeypatch.context() as patch:
            patch.setattr(StoreDatabase, "bump", database_is_full)
            refused = httpx.delete(f"{url}/v1/collections/ops/files/hoist.md")
            assert refused.status_code == 507, refused.text
            assert_agree(url, root, ["hoist.md"])
            patch.setattr(StoreDatabase, "forget", database_is_full)  # a delete frees the disk: never refused
            assert httpx.delete(f"{url}/v1/collections/ops").status_code == 200
        assert httpx.get(f"{url}/v1/collections/ops").status_code == 404


# -- for real: a small tmpfs -------------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A 4 MB tmpfs at ``tmp_path/disk`` (root only); unmounted after."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
                                           capture_output=True).returncode != 0:
        pytest.skip("a tmpfs cannot be mounted here (needs root)")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def fill(disk: Path, leave: int) -> Path:
    """A file taking all of ``disk``'s free space but ``leave`` bytes (in whole pages)."""
    stats = os.statvfs(disk)
    filler = disk / "filler"
    with open(filler, "wb") as out:
        out.write(b"\0" * (stats.f_bavail * stats.f_frsize - leave))
    return filler


def test_a_real_full_disk_under_lcrag_serve(small_disk):
    reader = Stub(answer=lambda prompt: "12 tonnes")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cache = small_disk / "cache"
    body = SECOND + "tonnes " * 4000  # 28 KB: 7 pages
    pages = -(-len(body.encode()) // 4096) * 4096
    serve = ["serve", "--port", str(port), "--cache-dir", str(cache), "--llm", "openai:stand-in",
             "--base-url", reader.url, "--context-window", "8192"]
    with reader_stopped(reader), lcrag_process(*serve, url=url, cache_dir=cache):
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"}).status_code == 201
        assert upload(url, "crane.md", FIRST).status_code == 201
        assert_agree(url, cache / "collections", ["crane.md"])
        for leave in (pages // 2, pages):  # the temporary file does not fit; it fits, and then the database is full
            filler = fill(small_disk, leave)
            refused = upload(url, "hoist.md", body)
            assert refused.status_code == 507, refused.text
            assert refused.json()["error"]["message"].startswith("hoist.md could not be stored: the server's "
                                                                 "storage failed (")
            filler.unlink()
            assert_agree(url, cache / "collections", ["crane.md"])
        assert upload(url, "hoist.md", body).status_code == 201
        assert_agree(url, cache / "collections", ["crane.md", "hoist.md"])
        assert "hoist.md" in cited(url)


@contextmanager
def reader_stopped(reader):
    try:
        yield reader
    finally:
        reader.kill()
