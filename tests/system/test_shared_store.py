"""Two real `lcrag serve` replicas on one real PostgreSQL (started by the tests, tests/postgres_fixtures.py), with the
bundled reader and embedder: a file uploaded through one is answered through the other as the embedded store answers
it; a collection deleted through one is gone from the other at once; the replica indexing a collection killed with
SIGKILL, the other takes its job over and finishes it, nothing lost and nothing indexed twice; sixteen clients spread
over both get no 5xx."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import httpx
import psycopg
import pytest
from postgres_fixtures import database, postgres  # noqa: F401 - fixtures
from service_fixtures import free_port, lcrag_process, wait_ready

from lcrag.store.postgres import PostgresCollections
from lcrag.documents.synthetic import DEFAULT_FACTS, needle_document

HYBRID = "retrieval:\n  retriever: hybrid\n"


def replica(stack: ExitStack, tmp_path, name: str, *args: str) -> tuple[str, object]:
    """A `lcrag serve` process with its own cache directory; its URL and process."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cache = tmp_path / name
    process = stack.enter_context(lcrag_process("serve", "--port", str(port), "--cache-dir", str(cache), *args,
                                                url=url, cache_dir=cache))
    return url, process


def comparable(answer: dict) -> dict:
    return {"text": answer["text"], "route": answer["route"],
            "sources": [(s["file"], s.get("chunk"), s["snippet"]) for s in answer["sources"]]}


def ask(url: str, collection: str, question: str, **options) -> httpx.Response:
    return httpx.post(f"{url}/v1/ask", json={"collection": collection, "question": question, **options},
                      timeout=300)


def test_a_file_uploaded_through_one_replica_is_answered_through_the_other_as_the_embedded_store_does(
        database, tmp_path):
    document, facts = needle_document(400, facts=tuple(DEFAULT_FACTS[:2]), seed=7)
    questions = [fact.question for fact in facts]
    with ExitStack() as stack:
        embedded, _ = replica(stack, tmp_path, "embedded")
        a, _ = replica(stack, tmp_path, "a", "--store", database)
        b, _ = replica(stack, tmp_path, "b", "--store", database)
        for url in (embedded, a):
            httpx.post(f"{url}/v1/collections", json={"name": "notes"}).raise_for_status()
            httpx.post(f"{url}/v1/collections/notes/files",
                       files={"file": ("notes.txt", document.text.encode())}).raise_for_status()
        assert wait_ready(embedded, "notes", timeout=300)["state"] == "ready"
        assert wait_ready(b, "notes", timeout=300)["state"] == "ready"
        assert httpx.get(f"{b}/v1/collections/notes").json()["files"] == [{"name": "notes.txt",
                                                                         "bytes": len(document.text.encode())}]
        for question in questions:
            for options in ({"strategy": "rag"}, {}):
                shared, alone = ask(b, "notes", question, **options), ask(embedded, "notes", question, **options)
                assert shared.status_code == alone.status_code == 200, shared.text
                assert comparable(shared.json()) == comparable(alone.json())
        assert httpx.delete(f"{b}/v1/collections/notes").status_code == 200
        assert httpx.get(f"{a}/v1/collections/notes").status_code == 404  # at once: no wait, no retry
        assert ask(a, "notes", questions[0]).status_code == 404
        assert httpx.get(f"{a}/v1/collections").json()["data"] == []


def _running_job(db: str, timeout: float = 120) -> dict:
    deadline = time.time() + timeout
    with psycopg.connect(db, autocommit=True) as connection:
        while time.time() < deadline:
            row = connection.execute("SELECT id, owner, attempts FROM lcrag_jobs WHERE state = 'running'").fetchone()
            if row is not None:
                return {"id": row[0], "owner": row[1], "attempts": row[2]}
            time.sleep(0.02)
    raise TimeoutError("no job started")


def test_the_replica_indexing_a_collection_killed_the_other_finishes_it_nothing_lost_nothing_twice(
        database, tmp_path):
    (tmp_path / "hybrid.yaml").write_text(HYBRID)
    files = 60
    loader = PostgresCollections(database, tmp_path / "loader")  # files put in place before indexing is asked
    loader.create("big")
    for n in range(files):
        text, _ = needle_document(400, facts=(DEFAULT_FACTS[n % len(DEFAULT_FACTS)],), seed=1000 + n)
        loader.put_file("big", f"part-{n:03}.txt", iter([text.text.encode()]), 1 << 24)
    loader.close()
    with ExitStack() as stack:
        options = ("--store", database, "--job-lease", "3", "--config", str(tmp_path / "hybrid.yaml"))
        a, process_a = replica(stack, tmp_path, "a", *options)
        b, process_b = replica(stack, tmp_path, "b", *options)
        last, _ = needle_document(300, facts=(DEFAULT_FACTS[0],), seed=5)
        httpx.post(f"{a}/v1/collections/big/files", files={"file": ("last.txt", last.text.encode())}).raise_for_status()
        job = _running_job(database)
        pid = int(job["owner"].split(":")[1])
        victim, survivor = (a, b) if pid == process_a.pid else (b, a)
        assert pid in (process_a.pid, process_b.pid)
        os.kill(pid, signal.SIGKILL)  # while it indexes (61 files take seconds to read and embed)
        status = wait_ready(survivor, "big", timeout=600)
        assert (status["state"], status["files"], status["done"]) == ("ready", files + 1, files + 1), status
        with psycopg.connect(database, autocommit=True) as connection:
            jobs = connection.execute("SELECT state, attempts, completions FROM lcrag_jobs").fetchall()
            writes = connection.execute("SELECT writes FROM lcrag_segments WHERE embedder <> ''").fetchall()
        assert jobs == [("done", 2, 1)]  # taken over once, completed once
        # every file's chunks embedded (dense and hybrid are offered by default, and share them), each once
        assert len(writes) == files + 1 and {w for (w,) in writes} == {1}
        answer = ask(survivor, "big", DEFAULT_FACTS[0].question, strategy="rag")
        assert answer.status_code == 200 and answer.json()["sources"], answer.text
        assert victim != survivor


def test_sixteen_clients_spread_over_two_replicas_get_no_5xx(database, tmp_path):
    document, facts = needle_document(300, facts=tuple(DEFAULT_FACTS[:2]), seed=11)
    with ExitStack() as stack:
        urls = [replica(stack, tmp_path, name, "--store", database, "--max-waiting", "16")[0] for name in "ab"]

        def client(number: int) -> list[int]:
            mine, other = urls[number % 2], urls[(number + 1) % 2]
            name = f"c{number}"
            with httpx.Client(timeout=120) as http:  # a loaded machine: slow is not what this test measures
                codes = [http.post(f"{mine}/v1/collections", json={"name": name}).status_code,
                         http.post(f"{mine}/v1/collections/{name}/files",
                                   files={"file": (f"n{number}.txt", document.text.encode())}).status_code]
                codes.append(200 if wait_ready(other, name, timeout=300)["state"] == "ready" else 500)
                for question in (facts[number % 2].question, facts[(number + 1) % 2].question):
                    codes.append(ask(other, name, question, strategy="rag").status_code)
                    codes.append(http.get(f"{mine}/v1/collections").status_code)
                codes.append(http.delete(f"{other}/v1/collections/{name}").status_code)
                codes.append(http.get(f"{mine}/v1/collections/{name}").status_code)
            return codes

        with ThreadPoolExecutor(16) as pool:
            codes = [code for result in pool.map(client, range(16)) for code in result]
    assert not [c for c in codes if c >= 500]
    assert codes.count(404) == 16 and set(codes) <= {200, 201, 404}


def test_a_worker_indexes_for_replicas_that_leave_it_to_workers(database, tmp_path):
    import subprocess
    import sys

    document, facts = needle_document(300, facts=tuple(DEFAULT_FACTS[:1]), seed=3)
    with ExitStack() as stack:
        a, _ = replica(stack, tmp_path, "a", "--store", database, "--index-workers", "0")
        httpx.post(f"{a}/v1/collections", json={"name": "notes"}).raise_for_status()
        httpx.post(f"{a}/v1/collections/notes/files", files={"file": ("n.txt", document.text.encode())}).raise_for_status()
        time.sleep(1.0)
        assert httpx.get(f"{a}/v1/collections/notes").json()["status"]["state"] == "indexing"  # nobody indexes yet
        worker = subprocess.Popen([sys.executable, "-m", "lcrag.cli", "worker", "--store", database, "--cache-dir",
                                   str(tmp_path / "worker")], stderr=subprocess.PIPE, text=True)
        try:
            assert wait_ready(a, "notes", timeout=300)["state"] == "ready"
            assert ask(a, "notes", facts[0].question, strategy="rag").status_code == 200
        finally:
            worker.terminate()
            assert worker.wait(60) == 0, worker.stderr.read()
        with psycopg.connect(database, autocommit=True) as connection:
            [owner] = connection.execute("SELECT DISTINCT owner FROM lcrag_jobs").fetchone()
        assert owner.split(":")[1] == str(worker.pid)


@pytest.mark.parametrize("url", ["mysql://u:secret@h/db", "postgresql://u:secret@127.0.0.1:1/none"])
def test_a_bad_store_is_one_line_exit_2_without_the_password(url, tmp_path):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "lcrag.cli", "serve", "--store", url, "--cache-dir",
                             str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "secret" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "store" in result.stderr, result.stderr
