"""Keys per person (issue 43, item 5) across processes and over real HTTP on loopback (uvicorn, a scripted reader):
another process's revocation, a hanging key store, `lcrag keys`' one-line errors, each role's 403s, a scoped key's
404s for collections outside its patterns, keys managed over HTTP, the audit log and --api-key as an admin key (what a
key is and how it is kept: tests/unit/service/test_keys.py)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
from document_fixtures import crane_manual
from service_fixtures import running, wait_ready

from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.service.answering import Answering
from lcrag.service.http.app import create_app
from lcrag.service.keys import Keys, KeysUnavailable, SqliteDatabase
from lcrag.service.limits import Limits


@pytest.fixture
def keys(tmp_path):
    store = Keys(SqliteDatabase(tmp_path / "collections.sqlite"))
    yield store
    store.close()


def test_another_process_s_revocation_is_seen_within_the_refresh(keys, tmp_path):
    key = keys.add("alice", "reader")["key"]
    other = Keys(SqliteDatabase(tmp_path / "collections.sqlite"))  # another replica's copy
    other.refresh()
    assert other.identify(key) is not None
    keys.revoke("alice")
    assert other.identify(key) is not None and not other.stale()  # its copy, until it is a refresh old
    time.sleep(other.refresh_seconds)
    assert other.stale()
    other.refresh()
    assert other.identify(key) is None
    other.close()


class Hanging(SqliteDatabase):
    """The SQLite file, whose reads hang while ``hang`` is set (a database that stopped answering)."""

    def __init__(self, path):
        super().__init__(path)
        self.hang, self.entered = threading.Event(), threading.Event()

    @contextmanager
    def transaction(self, write: bool = True):
        if self.hang.is_set():
            self.entered.set()
            while self.hang.is_set():
                time.sleep(0.01)
        with super().transaction(write) as run:
            yield run


def test_while_the_store_hangs_others_use_a_copy_under_a_second_old_then_get_a_503(tmp_path):
    database = Hanging(tmp_path / "collections.sqlite")
    keys = Keys(database, refresh_seconds=0.1, wait_seconds=0.3)
    key = keys.add("alice", "reader")["key"]
    keys.refresh()
    time.sleep(0.1)
    database.hang.set()
    stuck = threading.Thread(target=keys.refresh)
    stuck.start()
    assert database.entered.wait(5)
    keys.refresh()  # at once: the copy is under a second old
    assert keys.identify(key) is not None
    time.sleep(1.0)
    with pytest.raises(KeysUnavailable, match="has not answered in 0.3 s"):
        keys.refresh()  # returns, while the store still hangs: it gave up waiting
    database.hang.clear()
    stuck.join(5)
    keys.refresh()
    assert keys.identify(key) is not None
    keys.close()


def lcrag_keys(tmp_path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lcrag.cli", "keys", *args, "--cache-dir", str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=120)


def test_lcrag_keys_prints_the_key_once_and_bad_input_is_one_line_exit_2(tmp_path):
    added = lcrag_keys(tmp_path, "add", "alice", "--role", "writer", "--collections", "team-a*,shared")
    assert added.returncode == 0 and added.stdout.strip().startswith("lcrag_"), added.stderr
    listed = lcrag_keys(tmp_path, "list")
    assert "alice" in listed.stdout and "team-a*,shared" in listed.stdout and added.stdout.strip() not in listed.stdout
    for args, words in ((("add", "alice"), "exists"), (("add", "bob", "--role", "boss"), "unknown role"),
                        (("revoke", "carol"), "no key named 'carol'")):
        done = lcrag_keys(tmp_path, *args)
        assert done.returncode == 2 and words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done
    assert lcrag_keys(tmp_path, "revoke", "alice").returncode == 0
    assert "alice" not in lcrag_keys(tmp_path, "list").stdout


# -- over HTTP ---------------------------------------------------------------------------------------------------------
@pytest.fixture
def served(tmp_path, scripted_reader):
    """A service (the answer is always "7781") with collections team-a and team-b, each holding the crane manual,
    and keys: reader and writer over team-a*, admin over every collection, scoped admin over team-a*."""
    settings = Settings(cache=False, cache_dir=tmp_path / "cache", chunking="words:20", k=2, strategy="rag")
    answering = Answering(settings, tmp_path / "collections", pipeline=Pipeline(settings, reader=scripted_reader(
        lambda m: "7781")), price_as="gpt-4o-mini")
    keys = Keys(SqliteDatabase(tmp_path / "collections.sqlite"))
    made = {name: keys.add(name, role, patterns)["key"] for name, role, patterns in (
        ("reader", "reader", ["team-a*"]), ("writer", "writer", ["team-a*"]), ("admin", "admin", []),
        ("scoped-admin", "admin", ["team-a*"]))}
    with running(create_app(answering, "operator-key", Limits(max_upload_bytes=1 << 20))) as url:
        for name in ("team-a", "team-b"):
            assert httpx.post(f"{url}/v1/collections", json={"name": name}, headers=bearer("operator-key")).is_success
            upload(url, name, crane_manual(tmp_path), bearer("operator-key"))
            wait_ready(url, name, bearer("operator-key"))
        yield url, {name: bearer(key) for name, key in made.items()}
    keys.close()


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def upload(url, name, path, headers, as_name=None):
    with open(path, "rb") as f:
        return httpx.post(f"{url}/v1/collections/{name}/files", files={"file": (as_name or path.name, f)},
                          headers=headers, timeout=60)


def ask(url, collection, headers):
    return httpx.post(f"{url}/v1/ask", json={"collection": collection, "question": "Crane reset code?"},
                      headers=headers, timeout=60)


def refused(response, status: int, words: str) -> bool:
    body = response.json()
    return response.status_code == status and words in body["error"]["message"] and "\n" not in response.text


def test_a_reader_asks_and_reads_but_cannot_change(served, tmp_path):
    url, key = served
    assert ask(url, "team-a", key["reader"]).json()["text"] == "7781"
    assert httpx.get(f"{url}/v1/collections/team-a/files/crane.pdf", headers=key["reader"]).status_code == 200
    assert refused(upload(url, "team-a", crane_manual(tmp_path), key["reader"], "b.txt"), 403, "needs a writer key")
    assert refused(httpx.delete(f"{url}/v1/collections/team-a/files/crane.pdf", headers=key["reader"]), 403, "writer")
    assert refused(httpx.delete(f"{url}/v1/collections/team-a", headers=key["reader"]), 403, "needs an admin key")
    assert httpx.get(f"{url}/v1/collections/team-a", headers=key["reader"]).json()["files"][0]["name"] == "crane.pdf"


def test_a_key_scoped_to_team_a_never_sees_team_b(served):
    url, key = served
    for holder in ("reader", "writer", "scoped-admin"):
        headers = key[holder]
        assert [c["name"] for c in httpx.get(f"{url}/v1/collections", headers=headers).json()["data"]] == ["team-a"]
        assert [m["id"] for m in httpx.get(f"{url}/v1/models", headers=headers).json()["data"]] == ["lcrag/team-a"]
        unknown = httpx.get(f"{url}/v1/collections/team-nope", headers=headers).json()
        for response in (httpx.get(f"{url}/v1/collections/team-b", headers=headers), ask(url, "team-b", headers),
                         httpx.get(f"{url}/v1/collections/team-b/files/crane.pdf", headers=headers),
                         httpx.delete(f"{url}/v1/collections/team-b", headers=headers),
                         httpx.post(f"{url}/v1/chat/completions", headers=headers, json={
                             "model": "lcrag/team-b", "messages": [{"role": "user", "content": "Crane reset code?"}]})):
            assert response.status_code == 404, response.text  # as for a collection that does not exist
            assert response.json()["error"]["message"] == unknown["error"]["message"].replace("team-nope", "team-b")
    assert httpx.get(f"{url}/healthz", headers=key["reader"]).json() == {"status": "ok"}  # no count of all
    assert refused(httpx.post(f"{url}/v1/collections", json={"name": "team-b2"}, headers=key["scoped-admin"]),
                   403, "only collections matching team-a*")
    assert httpx.post(f"{url}/v1/collections", json={"name": "team-a2"}, headers=key["scoped-admin"]).status_code == 201
    assert httpx.get(f"{url}/v1/collections/team-b", headers=key["admin"]).status_code == 200


def test_a_writer_uploads_and_deletes_files_but_not_collections(served, tmp_path):
    url, key = served
    assert upload(url, "team-a", crane_manual(tmp_path), key["writer"], "copy.txt").status_code == 201
    assert httpx.delete(f"{url}/v1/collections/team-a/files/copy.txt", headers=key["writer"]).status_code == 200
    assert refused(httpx.post(f"{url}/v1/collections", json={"name": "team-a9"}, headers=key["writer"]), 403, "admin")
    assert refused(httpx.delete(f"{url}/v1/collections/team-a", headers=key["writer"]), 403, "admin")


def test_keys_over_http_are_an_unscoped_admin_s_and_a_revoked_key_is_refused(served):
    url, key = served
    for holder in ("reader", "writer", "scoped-admin"):
        assert httpx.get(f"{url}/v1/keys", headers=key[holder]).status_code == 403
        assert httpx.get(f"{url}/v1/audit", headers=key[holder]).status_code == 403
    made = httpx.post(f"{url}/v1/keys", json={"name": "dana", "role": "reader", "collections": ["team-b"]},
                      headers=key["admin"])
    assert made.status_code == 201 and made.json()["key"].startswith("lcrag_")
    dana = bearer(made.json()["key"])
    assert [c["name"] for c in httpx.get(f"{url}/v1/collections", headers=dana).json()["data"]] == ["team-b"]
    listed = httpx.get(f"{url}/v1/keys", headers=key["admin"]).json()["data"]
    assert {k["name"] for k in listed} == {"reader", "writer", "admin", "scoped-admin", "dana"}
    assert not any("key" in k or "hash" in k for k in listed)
    assert httpx.post(f"{url}/v1/keys", json={"name": "dana"}, headers=key["admin"]).status_code == 409
    assert httpx.post(f"{url}/v1/keys", json={"name": "eve", "role": "root"}, headers=key["admin"]).status_code == 400
    assert httpx.delete(f"{url}/v1/keys/nobody", headers=key["admin"]).status_code == 404
    assert httpx.delete(f"{url}/v1/keys/dana", headers=key["admin"]).json() == {"revoked": "dana"}
    assert refused(httpx.get(f"{url}/v1/collections", headers=dana), 401, "missing or wrong API key")
    assert httpx.get(f"{url}/v1/collections", headers=bearer("wrong")).status_code == 401
    assert httpx.get(f"{url}/v1/collections").status_code == 401


def test_the_audit_log_says_who_changed_what(served, tmp_path):
    url, key = served
    upload(url, "team-a", crane_manual(tmp_path), key["writer"], "w.txt")
    httpx.delete(f"{url}/v1/collections/team-a/files/w.txt", headers=key["writer"])
    httpx.post(f"{url}/v1/keys", json={"name": "dana"}, headers=key["admin"])
    httpx.delete(f"{url}/v1/keys/dana", headers=bearer("operator-key"))
    log = httpx.get(f"{url}/v1/audit", params={"limit": 4}, headers=key["admin"]).json()
    assert [(e["actor"], e["action"], e["collection"]) for e in log["data"]] == [
        ("api-key", "key.revoke", None), ("admin", "key.add", None), ("writer", "file.delete", "team-a"),
        ("writer", "file.upload", "team-a")]
    assert log["data"][3]["detail"].startswith("w.txt") and log["next"] == log["data"][-1]["id"]
    older = httpx.get(f"{url}/v1/audit", params={"before": log["next"], "limit": 1000}, headers=key["admin"]).json()
    assert [(e["actor"], e["action"], e["collection"]) for e in older["data"]][:4] == [
        ("api-key", "file.upload", "team-b"), ("api-key", "collection.create", "team-b"),
        ("api-key", "file.upload", "team-a"), ("api-key", "collection.create", "team-a")]
    assert [(e["actor"], e["action"]) for e in older["data"][4:]] == [("cli", "key.add")] * 4 and older["next"] is None
    assert httpx.get(f"{url}/v1/audit", params={"limit": 100000}, headers=key["admin"]).status_code == 422


def test_keys_that_cannot_be_read_are_a_503_and_the_api_key_still_works(tmp_path, scripted_reader):
    settings = Settings(cache=False, cache_dir=tmp_path / "cache", chunking="words:20", k=2, strategy="rag")
    answering = Answering(settings, tmp_path / "collections", pipeline=Pipeline(settings, reader=scripted_reader(
        lambda m: "7781")), price_as="gpt-4o-mini")
    (tmp_path / "not-a-database").mkdir()  # SQLite cannot open a folder: the store fails on every read
    broken = Keys(SqliteDatabase(tmp_path / "not-a-database"))
    with running(create_app(answering, "operator-key", keys=broken)) as url:
        response = httpx.get(f"{url}/v1/collections", headers=bearer("lcrag_0123456789ab_someone"))
        assert refused(response, 503, "the keys cannot be checked") and response.headers["retry-after"] == "1"
        assert "not-a-database" not in response.text and str(tmp_path) not in response.text
        assert httpx.get(f"{url}/v1/collections", headers=bearer("operator-key")).status_code == 200
        assert httpx.get(f"{url}/healthz").json() == {"status": "ok"}


def test_a_server_without_keys_stays_open_and_once_a_key_is_added_asks_for_one(tmp_path, scripted_reader):
    settings = Settings(cache=False, cache_dir=tmp_path / "cache", chunking="words:20", k=2, strategy="rag")
    answering = Answering(settings, tmp_path / "collections", pipeline=Pipeline(settings, reader=scripted_reader(
        lambda m: "7781")), price_as="gpt-4o-mini")
    with running(create_app(answering)) as url:
        assert httpx.post(f"{url}/v1/collections", json={"name": "notes"}).status_code == 201
        assert httpx.get(f"{url}/v1/audit").json()["data"][0]["actor"] == "anonymous"
        keys = Keys(SqliteDatabase(tmp_path / "collections.sqlite"))
        key = keys.add("alice", "reader")["key"]
        keys.revoke("alice")
        deadline = time.monotonic() + 1.0
        while httpx.get(f"{url}/v1/collections").status_code != 401:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert httpx.get(f"{url}/v1/collections", headers=bearer(key)).status_code == 401  # revoked: still closed
        keys.close()
