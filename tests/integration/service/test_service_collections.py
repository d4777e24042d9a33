"""Collections over real HTTP on loopback (uvicorn), with a scripted reader: a deleted collection never answers again,
memory is bounded and freed, a file that breaks indexing puts the collection in error (and a good one brings it
back), names keep their letters and never overwrite, crashed uploads are cleaned up, and messages quote no server
path (issue 25, items 4, 5, 6, 12, 13, 16)."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from document_fixtures import crane_manual
from service_fixtures import running, wait_ready

from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.service.answering import Answering
from lcrag.service.http.app import create_app
from lcrag.service.limits import Limits


@pytest.fixture
def service(tmp_path, scripted_reader):
    def make(answer=lambda m: "7781", memory_bytes=64 << 20):
        settings = Settings(cache=False, cache_dir=tmp_path / "cache", chunking="words:20", k=2, strategy="rag")
        pipeline = Pipeline(settings, reader=scripted_reader(answer), memory_bytes=memory_bytes)
        answering = Answering(settings, tmp_path / "collections", pipeline=pipeline, price_as="gpt-4o-mini")
        return running(create_app(answering, None, Limits(max_upload_bytes=1 << 20))), answering
    return make


def upload(url, name, path, as_name=None):
    with open(path, "rb") as f:
        return httpx.post(f"{url}/v1/collections/{name}/files", files={"file": (as_name or path.name, f)}, timeout=60)


def ask(url, collection, question="Crane reset code?"):
    return httpx.post(f"{url}/v1/ask", json={"collection": collection, "question": question}, timeout=60)


def text_file(tmp_path, name, text):
    path = tmp_path / "upload" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def memory_hashes(answering) -> set[str]:
    """The content hashes of every document whose index or context any of the service's pipelines keeps."""
    return {key[1] for key in answering.base.memory.keys()}


# -- item 4: stale answers after delete --------------------------------------------------------------------------
def test_indexing_that_ends_after_a_delete_never_answers_for_the_new_collection(service, tmp_path):
    server, answering = service()
    entered, release = threading.Event(), threading.Event()
    build = answering.base.index

    def slow_index(document, chunking=None):  # holds the upload's indexing until the collection is deleted
        entered.set()
        release.wait(30)
        return build(document, chunking)

    answering.base.index = slow_index
    with server as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        assert upload(url, "ops", crane_manual(tmp_path)).status_code == 201
        assert entered.wait(30)
        assert httpx.delete(f"{url}/v1/collections/ops").status_code == 200
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"}).status_code == 201
        release.set()
        answering.collections.wait("ops")
        reply = ask(url, "ops")
        assert reply.status_code == 400 and "'ops' is empty" in reply.json()["error"]["message"]
        assert httpx.get(f"{url}/v1/collections/ops").json()["status"]["state"] == "empty"
        assert httpx.get(f"{url}/v1/collections/ops").json()["files"] == []


def test_a_collection_whose_last_file_is_removed_is_empty_not_in_error(service, tmp_path):
    server, answering = service()
    with server as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        assert upload(url, "ops", crane_manual(tmp_path)).status_code == 201
        assert answering.collections.wait("ops").state == "ready" and ask(url, "ops").status_code == 200
        name = httpx.get(f"{url}/v1/collections/ops").json()["files"][0]["name"]
        assert httpx.delete(f"{url}/v1/collections/ops/files/{name}").status_code == 200
        status = answering.collections.wait("ops")
        assert (status.state, status.files, status.error) == ("empty", 0, None)
        reply = ask(url, "ops")  # never answered from the removed file's kept document
        assert reply.status_code == 400 and "'ops' is empty: upload a file" in reply.json()["error"]["message"]


def test_a_collection_polled_for_ready_may_leave_out_its_files(service, tmp_path):
    server, answering = service()
    with server as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        assert upload(url, "ops", crane_manual(tmp_path)).status_code == 201
        answering.collections.wait("ops")
        whole = httpx.get(f"{url}/v1/collections/ops").json()
        brief = httpx.get(f"{url}/v1/collections/ops", params={"files": "false"}).json()
        assert "files" not in brief and brief["status"] == whole["status"] and brief["status"]["files"] == 1
        assert len(whole["files"]) == 1
        assert httpx.get(f"{url}/v1/collections/ops", params={"files": "maybe"}).status_code in (400, 422)


def test_a_collection_created_again_is_another_collection(service, tmp_path):
    server, answering = service()
    with server as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        upload(url, "ops", crane_manual(tmp_path))
        wait_ready(url, "ops")
        assert ask(url, "ops").json()["text"] == "7781"
        first = answering.collections.identity("ops")
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"}).status_code == 201  # creating again: same
        assert answering.collections.identity("ops") == first
        httpx.delete(f"{url}/v1/collections/ops")
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        assert answering.collections.identity("ops") != first
        assert ask(url, "ops").status_code == 400


# -- item 5: memory per upload ----------------------------------------------------------------------------------
def test_a_reindex_releases_the_previous_index_and_a_delete_releases_all(service, tmp_path):
    server, answering = service()
    with server as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        for i in range(3):
            upload(url, "ops", text_file(tmp_path, f"note{i}.txt", f"Note {i}: the crane reset code is 77{i}."))
            assert wait_ready(url, "ops")["state"] == "ready"
            assert ask(url, "ops").status_code == 200
            assert memory_hashes(answering) == {answering.document("ops").content_hash}  # only the latest content
        httpx.delete(f"{url}/v1/collections/ops")
        assert memory_hashes(answering) == set()


def test_indexes_beyond_the_memory_bound_are_dropped_and_built_again_when_asked(service, tmp_path):
    server, answering = service(memory_bytes=1)  # room for the one index in use only
    with server as url:
        for name in ("a", "b"):
            httpx.post(f"{url}/v1/collections", json={"name": name})
            upload(url, name, text_file(tmp_path, f"{name}.txt", f"Collection {name}: the reset code is 7781."))
            assert wait_ready(url, name)["state"] == "ready"
        assert len(answering.base.memory) == 1
        assert ask(url, "a").json()["text"] == "7781" and ask(url, "b").json()["text"] == "7781"


# -- item 6: a file that breaks indexing --------------------------------------------------------------------------
def test_a_jsonl_nested_too_deep_is_an_error_naming_it_and_a_good_file_recovers(service, tmp_path):
    server, _ = service()
    deep = tmp_path / "upload" / "deep.jsonl"
    deep.parent.mkdir()
    deep.write_text('{"text": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with server as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        upload(url, "ops", deep)
        status = wait_ready(url, "ops", timeout=30)
        assert status["state"] == "error" and "deep.jsonl:1: JSON nested too deeply" in status["error"]
        assert ask(url, "ops").status_code == 400
        upload(url, "ops", crane_manual(tmp_path))
        status = wait_ready(url, "ops", timeout=30)
        assert status["state"] == "ready" and len(status["skipped"]) == 1 and "deep.jsonl" in status["skipped"][0]
        assert ask(url, "ops").json()["text"] == "7781"


def test_any_failure_while_indexing_is_an_error_state_never_indexing_forever(service, tmp_path):
    server, answering = service()
    build = answering.base.index

    def broken(document, chunking=None):
        raise RuntimeError("the index builder broke")

    answering.base.index = broken
    with server as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        upload(url, "ops", text_file(tmp_path, "a.txt", "The crane reset code is 7781."))
        status = wait_ready(url, "ops", timeout=30)
        assert status["state"] == "error" and "RuntimeError: the index builder broke" in status["error"]
        answering.base.index = build
        upload(url, "ops", crane_manual(tmp_path))
        assert wait_ready(url, "ops", timeout=30)["state"] == "ready"
        assert ask(url, "ops").json()["text"] == "7781"


# -- item 12: names that collide ---------------------------------------------------------------------------------
def test_names_keep_their_letters_and_never_overwrite(service, tmp_path):
    server, _ = service()
    with server as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        contract = text_file(tmp_path, "contract.txt", "Договор: the crane reset code is 7781.")
        invoice = text_file(tmp_path, "invoice.txt", "Счёт: the hoist limit is 12 tonnes.")
        assert upload(url, "ops", contract, "договор.txt").json()["name"] == "договор.txt"
        assert upload(url, "ops", invoice, "счёт.txt").json()["name"] == "счёт.txt"
        assert upload(url, "ops", contract, "счёт.txt").json()["name"] == "счёт (2).txt"  # numbered, not replaced
        assert upload(url, "ops", invoice, "счёт.txt").json()["name"] == "счёт.txt"  # the same file: kept once
        assert upload(url, "ops", invoice, "cafe\u0301.txt").json()["name"] == "caf\u00e9.txt"  # NFC
        files = httpx.get(f"{url}/v1/collections/ops").json()["files"]
        assert [f["name"] for f in files] == ["café.txt", "договор.txt", "счёт (2).txt", "счёт.txt"]
        assert httpx.get(f"{url}/v1/collections/ops/files/счёт.txt").text == invoice.read_text(encoding="utf-8")


def test_a_name_too_long_to_store_is_refused_with_a_400(service, tmp_path):
    server, _ = service()
    with server as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        reply = upload(url, "ops", text_file(tmp_path, "a.txt", "text"), "n" * 296 + ".txt")
        assert reply.status_code == 400 and "at most 200 bytes" in reply.json()["error"]["message"]
        assert len(reply.json()["error"]["message"]) < 200
        reply = upload(url, "ops", text_file(tmp_path, "a.txt", "text"), "ж" * 120 + ".txt")  # 244 bytes in UTF-8
        assert reply.status_code == 400


def test_a_download_by_a_name_too_long_to_store_is_a_404_never_a_500(service, tmp_path):
    server, _ = service()
    with server as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        for name in ("ж" * 200 + ".txt", "n" * 255, ".upload-x", "a\\b.txt"):  # 405 bytes is past the file system's
            reply = httpx.get(f"{url}/v1/collections/ops/files/{name}")
            assert reply.status_code == 404 and reply.json()["error"]["message"].startswith("no file")


def test_every_request_is_answered_by_one_pipeline_and_one_index(service, tmp_path):
    server, answering = service()
    with server as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        upload(url, "ops", text_file(tmp_path, "a.txt", "The crane reset code is 7781."))
        wait_ready(url, "ops")
        for k in (1, 2, 3):
            reply = httpx.post(f"{url}/v1/ask", json={"collection": "ops", "question": "Code?", "k": k}, timeout=60)
            assert reply.status_code == 200
        assert len(answering.base._choices) == 3  # three choices of k, one pipeline
        indexes = [key for key in answering.base.memory.keys() if key[0] == "index"]
        assert len(indexes) == 1  # one index of the document serves every k


# -- item 13: leftover temporary files ----------------------------------------------------------------------------
def test_uploads_cut_short_by_a_crash_are_removed_at_start_up(service, tmp_path):
    files = tmp_path / "collections" / "ops" / "files"
    files.mkdir(parents=True)
    (files / "a.txt").write_text("The crane reset code is 7781.")
    (files / ".upload-k2j4x9").write_bytes(b"x" * 100_000)  # what kill -9 during the final copy leaves
    server, _ = service()
    with server as url:
        assert [f["name"] for f in httpx.get(f"{url}/v1/collections/ops").json()["files"]] == ["a.txt"]
        assert sorted(p.name for p in files.iterdir()) == ["a.txt"]


# -- item 16: no server paths in messages -------------------------------------------------------------------------
def test_status_and_errors_name_files_by_their_uploaded_names_only(service, tmp_path):
    server, _ = service()
    with server as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        upload(url, "ops", text_file(tmp_path, "blank.txt", "   \n"))
        status = wait_ready(url, "ops", timeout=30)
        assert status["state"] == "error" and "blank.txt is empty" in status["error"]
        reply = ask(url, "ops")
        assert reply.status_code == 400 and "blank.txt is empty" in reply.json()["error"]["message"]
        upload(url, "ops", crane_manual(tmp_path))
        status = wait_ready(url, "ops", timeout=30)
        assert status["state"] == "ready" and status["skipped"] == ["blank.txt is empty"]
        shown = json.dumps(httpx.get(f"{url}/v1/collections").json()) + reply.text
        assert str(tmp_path) not in shown and "/files/" not in shown


def test_a_file_is_looked_up_only_by_a_name_that_could_be_stored(tmp_path):
    from lcrag.store.collections import Collections, NotFound

    collections = Collections(tmp_path / "collections")
    collections.create("ops")
    (collections.files_dir("ops") / "счёт.txt").write_text("x")
    assert collections.file("ops", "счёт.txt").name == "счёт.txt"
    for name in ["ж" * 200 + ".txt", ".upload-x", "../collection.json", "nope.txt"]:
        with pytest.raises(NotFound):
            collections.file("ops", name)
