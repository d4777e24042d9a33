"""Ingestion does the work a question may need (issue 43, item 1): two real `lcrag serve --store` replicas over a
real PostgreSQL, the bundled embedder and the stand-in reader of tests/reader_servers.py. The indexing job embeds
every file's chunks and sentences once (one replica's job; the other loads what it stored); dense, hybrid and
sentence-window questions sent through both replicas at once right after the collection is ready are answered from
the stored vectors: no embedding segment is written a second time (a question that embedded would write its file's segment again), and the answers cite the file
that holds the fact. On the embedded store, a collection indexed by a server that did not offer dense is refused at
once (503, Retry-After, naming the retriever) while BM25 answers, and is indexed again for it."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import httpx
import psycopg
from postgres_fixtures import database, postgres  # noqa: F401 - fixtures
from reader_servers import Stub, closest_line
from service_fixtures import free_port, lcrag_process, wait_ready

from lcrag.documents.synthetic import DEFAULT_FACTS, needle_document

OFFERED = ("--retrievers", "bm25", "--retrievers", "dense", "--retrievers", "hybrid", "--retrievers", "sentence-window")
EMBEDDED = ("dense", "hybrid", "sentence-window")


def replica(stack: ExitStack, folder: Path, reader: str, *args: str) -> str:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    stack.enter_context(lcrag_process("serve", "--port", str(port), "--cache-dir", str(folder),
                                      "--llm", f"openai:stand-in@{reader}", *args, url=url, cache_dir=folder))
    return url


def ask(url: str, question: str, retriever: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/ask", json={"collection": "notes", "question": question, "strategy": "rag",
                                             "retriever": retriever}, timeout=300)


def test_dense_right_after_ready_through_both_replicas_is_answered_from_vectors_the_job_stored_once(
        database, tmp_path):
    reader = Stub(answer=closest_line)
    files = {f"part-{n}.txt": needle_document(400, facts=(fact,), seed=40 + n)
             for n, fact in enumerate(DEFAULT_FACTS[:4])}
    with ExitStack() as stack:
        a, b = (replica(stack, tmp_path / name, reader.url, "--store", database, "--max-waiting", "32", *OFFERED)
                for name in "ab")
        httpx.post(f"{a}/v1/collections", json={"name": "notes"}).raise_for_status()
        for name, (document, _) in files.items():
            httpx.post(f"{a}/v1/collections/notes/files", files={"file": (name, document.text.encode())}
                       ).raise_for_status()
        assert wait_ready(b, "notes", timeout=300)["state"] == "ready"
        with psycopg.connect(database, autocommit=True) as db:
            stored = db.execute("SELECT count(*), max(writes) FROM lcrag_segments WHERE embedder <> ''").fetchone()
        assert stored == (2 * len(files), 1)  # every file's chunks and sentences embedded by the job, once
        asked = [(url, name, facts[0], retriever) for name, (_, facts) in files.items()
                 for url in (a, b) for retriever in EMBEDDED]
        with ThreadPoolExecutor(len(asked)) as pool:
            answers = list(pool.map(lambda q: (q, ask(q[0], q[2].question, q[3])), asked))
        for (url, name, fact, retriever), answer in answers:
            assert answer.status_code == 200, (retriever, answer.text)
            assert answer.json()["sources"][0]["file"] == name, (retriever, answer.json()["sources"])
        with psycopg.connect(database, autocommit=True) as db:
            again = db.execute("SELECT count(*), max(writes) FROM lcrag_segments WHERE embedder <> ''").fetchone()
        assert again == (2 * len(files), 1)  # no question embedded a file (it would have written its segment again)


def test_a_collection_indexed_without_dense_refuses_it_at_once_and_is_indexed_again_for_it(tmp_path):
    reader = Stub(answer=closest_line)
    document, facts = needle_document(400, facts=(DEFAULT_FACTS[0],), seed=3)
    with ExitStack() as stack:
        first = replica(stack, tmp_path / "cache", reader.url, "--retrievers", "bm25")
        httpx.post(f"{first}/v1/collections", json={"name": "notes"}).raise_for_status()
        httpx.post(f"{first}/v1/collections/notes/files", files={"file": ("notes.txt", document.text.encode())}
                   ).raise_for_status()
        assert wait_ready(first, "notes")["state"] == "ready"
    with ExitStack() as stack:  # the same cache directory, now offering dense: its vectors were never made
        url = replica(stack, tmp_path / "cache", reader.url, *OFFERED)
        refused = ask(url, facts[0].question, "dense")
        assert refused.status_code == 503 and refused.headers["retry-after"].isdigit(), refused.text
        message = refused.json()["error"]["message"]
        assert "retriever dense" in message and "still being indexed" in message and "\n" not in message
        assert ask(url, facts[0].question, "bm25").status_code == 200  # BM25 meanwhile: answered
        deadline = time.time() + 300
        while (answer := ask(url, facts[0].question, "dense")).status_code == 503 and time.time() < deadline:
            time.sleep(float(answer.headers["retry-after"]) / 10)
        assert answer.status_code == 200 and answer.json()["sources"], answer.text
