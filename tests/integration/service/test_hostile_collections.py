"""Collections under races, storage failures and planted or look-alike names (issue 34, items 11, 15, 16 and the
names): over real HTTP on loopback (uvicorn in a thread), with a scripted reader; the reindex race on the
Collections object itself, made certain by delaying the start of the first indexing thread."""

from __future__ import annotations

import errno
import os
import shutil
import threading
import time
import unicodedata

import httpx
import pytest
from service_fixtures import running, wait_ready

from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.service.answering import Answering
from lcrag.service.http.app import create_app
from lcrag.store.collections import Collections, mixed_scripts
from lcrag.service.limits import Limits

MANUAL = "Crane manual.\nThe reset code of the crane is 7781.\nThe hoist limit of the crane is 12 tonnes.\n"


@pytest.fixture
def service(tmp_path, scripted_reader):
    settings = Settings(cache=False, cache_dir=tmp_path / "cache", chunking="words:20", k=2, strategy="rag")
    answering = Answering(settings, tmp_path / "collections", price_as="gpt-4o-mini",
                          pipeline=Pipeline(settings, reader=scripted_reader(lambda m: "7781")))
    return running(create_app(answering, None, Limits(max_upload_bytes=1 << 20))), answering


def upload(url, collection, name, text=MANUAL):
    return httpx.post(f"{url}/v1/collections/{collection}/files", files={"file": (name, text.encode())}, timeout=60)


def assert_json_without_paths(response, status, root):
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json", response.text
    assert str(root) not in response.text and "/tmp" not in response.text, response.text


# -- item 11 ------------------------------------------------------------------------------------------------------
def test_concurrent_reindexes_never_join_a_thread_not_yet_started(tmp_path, monkeypatch):
    """The first run's thread starts late (as under load); a second reindex meanwhile must not join it unstarted."""
    indexed = []
    collections = Collections(tmp_path / "collections", lambda name, files, progress: indexed.append(name) or [])
    collections.create("ops")
    (tmp_path / "collections" / "ops" / "files" / "a.txt").write_text(MANUAL)
    start, first = threading.Thread.start, []

    def late_start(thread):
        if not first:  # the first indexing thread: registered, then started 0.3 s later
            first.append(thread)
            time.sleep(0.3)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", late_start)
    failures = []
    monkeypatch.setattr(threading, "excepthook", lambda args: failures.append(args.exc_value))
    runs = [threading.Thread(target=collections.reindex, args=("ops",)) for _ in range(2)]
    for run in runs:
        start(run)
        time.sleep(0.05)
    for run in runs:
        run.join(10)
    assert collections.wait("ops", timeout=10).state == "ready"
    # Both changes arrived before the pass began: one pass indexes them together (issue 36), no thread chain.
    assert failures == [] and indexed == ["ops"]


# -- item 15 ------------------------------------------------------------------------------------------------------
def test_a_collection_deleted_while_an_upload_is_placed_is_a_json_404(service, monkeypatch):
    server, answering = service
    place = Collections._place

    def deleted_meanwhile(tmp, directory, wanted):
        assert httpx.delete(f"{url}/v1/collections/ops", timeout=10).status_code == 200
        return place(tmp, directory, wanted)

    with server as url:
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"}).status_code == 201
        monkeypatch.setattr(Collections, "_place", staticmethod(deleted_meanwhile))
        refused = upload(url, "ops", "manual.txt")
        assert_json_without_paths(refused, 404, answering.collections.root)
        assert "was deleted while manual.txt was being uploaded" in refused.json()["error"]["message"]
        assert httpx.get(f"{url}/v1/collections").json()["data"] == []
        assert not any(answering.collections.root.iterdir())  # no temporary file, no leftover


# -- item 16 ------------------------------------------------------------------------------------------------------
def test_storage_failures_are_json_without_paths_and_delete_takes_the_collection_away(service, monkeypatch):
    server, answering = service
    root = answering.collections.root
    with server as url:
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"}).status_code == 201

        def full(source, target, *args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device", str(target))

        with monkeypatch.context() as patch:  # a full disk when the upload is placed
            patch.setattr(os, "link", full)
            refused = upload(url, "ops", "manual.txt")
        assert_json_without_paths(refused, 507, root)
        assert refused.json()["error"]["message"] == ("manual.txt could not be stored: the server's storage failed "
                                                      "(No space left on device)")
        assert upload(url, "ops", "manual.txt").status_code == 201
        wait_ready(url, "ops")

        def stuck(path, ignore_errors=False, onerror=None, onexc=None, **kwargs):  # a read-only or immutable file
            exc = PermissionError(errno.EPERM, "Operation not permitted", str(path / "files" / "manual.txt"))
            if onexc is not None:
                onexc(os.unlink, exc.filename, exc)
            elif onerror is not None:
                onerror(os.unlink, exc.filename, (type(exc), exc, None))
            else:
                raise exc

        with monkeypatch.context() as patch:
            patch.setattr(shutil, "rmtree", stuck)
            deleted = httpx.delete(f"{url}/v1/collections/ops")
        assert deleted.status_code == 200, deleted.text
        assert httpx.get(f"{url}/v1/collections").json()["data"] == []
        assert httpx.get(f"{url}/v1/collections/ops").status_code == 404
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"}).status_code == 201  # the name is free again

        def read_only(document, *args, **kwargs):  # the index cache cannot be written
            raise PermissionError(errno.EACCES, "Permission denied",
                                  str(root.parent / "cache" / "indexes" / "463af0c1" / "chunks.json"))

        monkeypatch.setattr(answering.base, "index", read_only)
        assert upload(url, "ops", "manual.txt").status_code == 201
        status = wait_ready(url, "ops")
        assert status["state"] == "error" and str(root.parent) not in status["error"], status
        assert status["error"] == "indexing failed: the server's storage failed (Permission denied: chunks.json)"
    # What could not be removed is gone at the next start.
    assert [p.name[:9] for p in root.iterdir() if p.name.startswith(".")] == [".deleted-"]
    Collections(root)
    assert not [p for p in root.iterdir() if p.name.startswith(".")]


def test_an_unwritable_collections_directory_is_a_json_500_without_paths(service, monkeypatch):
    server, answering = service
    with server as url:
        def read_only(*args, **kwargs):
            raise OSError(errno.EROFS, "Read-only file system", str(answering.collections.root / "ops"))

        monkeypatch.setattr(type(answering.collections.root), "mkdir", read_only)
        refused = httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        assert_json_without_paths(refused, 500, answering.collections.root)
        assert "(Read-only file system)" in refused.json()["error"]["message"]


# -- planted links, look-alike names, decomposed names ----------------------------------------------------------
def test_symbolic_links_planted_in_the_collections_directory_are_never_followed(service, tmp_path):
    server, answering = service
    secret = tmp_path / "secret.txt"
    secret.write_text("the server's secret")
    root = answering.collections.root
    with server as url:
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"}).status_code == 201
        assert upload(url, "ops", "manual.txt").status_code == 201
        wait_ready(url, "ops")
        (root / "ops" / "files" / "planted.txt").symlink_to(secret)
        outside = tmp_path / "elsewhere"
        (outside / "files").mkdir(parents=True)
        (outside / "files" / "secret.txt").symlink_to(secret)
        (root / "linked").symlink_to(outside)
        assert httpx.get(f"{url}/v1/collections/ops/files/planted.txt").status_code == 404
        assert [f["name"] for f in httpx.get(f"{url}/v1/collections/ops").json()["files"]] == ["manual.txt"]
        assert [c["name"] for c in httpx.get(f"{url}/v1/collections").json()["data"]] == ["ops"]
        assert httpx.get(f"{url}/v1/collections/linked/files/secret.txt").status_code == 404
        assert httpx.delete(f"{url}/v1/collections/linked").status_code == 404
        assert secret.exists() and (root / "linked").is_symlink()
        assert answering.collections.paths("ops") == [root / "ops" / "files" / "manual.txt"]


def test_look_alike_names_are_refused_and_names_in_one_script_kept(service):
    server, _ = service
    with server as url:
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"}).status_code == 201
        assert upload(url, "ops", "paypal.txt").status_code == 201
        refused = upload(url, "ops", "p\u0430ypal.txt")  # a Cyrillic а among Latin letters
        assert refused.status_code == 400, refused.text
        assert "mixes Cyrillic and Latin" in refused.json()["error"]["message"]
        for name in ("договор.txt", "счёт (2).md", "報告書_final.txt", "ελληνικά.txt", "café.txt", "2024-Q3.txt"):
            assert upload(url, "ops", name).status_code == 201, name
        names = {f["name"] for f in httpx.get(f"{url}/v1/collections/ops").json()["files"]}
        assert "p\u0430ypal.txt" not in names and "договор.txt" in names
    assert mixed_scripts("pаypal") == ["Cyrillic", "Latin"] and mixed_scripts("αlpha") == ["Greek", "Latin"]
    assert mixed_scripts("報告書 final レポート") is None and mixed_scripts("서울 report") is None


def test_a_file_is_found_by_any_normal_form_of_its_name(service):
    server, _ = service
    with server as url:
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"}).status_code == 201
        assert upload(url, "ops", unicodedata.normalize("NFD", "café.txt")).json()["name"] == "café.txt"
        for form in ("NFC", "NFD"):
            name = unicodedata.normalize(form, "café.txt")
            got = httpx.get(f"{url}/v1/collections/ops/files/{name}")
            assert got.status_code == 200 and got.text == MANUAL, (form, got.status_code)
