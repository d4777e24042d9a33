"""Issue 43, item 1: a collection's indexing job makes every offered retriever's index, and a question never builds
one. A question for an index not made yet (a file whose embedding segment is missing) is refused at once (503, with
Retry-After, naming the retriever) without the embedder being called, while BM25 on the same collection answers; the
job stores each file's embeddings once, and a question loads them."""

from __future__ import annotations

import httpx
import pytest
from postgres_fixtures import database, postgres  # noqa: F401 - fixtures
from counting_embedder import CRANE, PUMP, CountingEmbedder
from service_fixtures import running, wait_ready

from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.service.answering import Answering
from lcrag.service.http.app import create_app
from lcrag.service.limits import Limits
from lcrag.store.embedded import EmbeddedStore
from lcrag.store.segments import IndexNotReady
from lcrag.store.base import IndexCost
from lcrag.store.postgres import PostgresCollections

def make(tmp_path, reader, embedder, retrievers) -> Answering:
    settings = Settings(cache=False, cache_dir=tmp_path / "cache", chunking="words:10", k=2, strategy="rag")
    return Answering(settings, tmp_path / "collections", pipeline=Pipeline(settings, reader=reader, embedder=embedder),
                     retrievers=retrievers)


def fill(answering: Answering) -> None:
    answering.collections.create("ops")
    for name, text in (("crane.txt", CRANE), ("pump.txt", PUMP)):
        answering.collections.add_file("ops", name, iter([text.encode()]), 1 << 20)
    assert answering.collections.wait("ops").state == "ready"


@pytest.mark.parametrize("retriever", ["dense", "hybrid", "sentence-window"])
def test_a_collection_without_embeddings_refuses_a_dense_question_at_once_without_embedding(
        tmp_path, scripted_reader, retriever):
    embedder = CountingEmbedder()
    answering = make(tmp_path, scripted_reader(lambda m: "7781"), embedder, ("bm25",))  # its job embeds nothing
    try:
        fill(answering)
        assert embedder.calls == []
        with pytest.raises(IndexNotReady, match=f"retriever {retriever}: collection 'ops' is still being indexed"):
            answering.ask("ops", "What is the crane reset code?", {"retriever": retriever})
        with pytest.raises(IndexNotReady):
            answering.search("ops", "crane reset code", 2, retriever)
        assert embedder.calls == []  # neither the question nor the search embedded anything, not even the query
        assert answering.ask("ops", "What is the crane reset code?", {"retriever": "bm25"}).text == "7781"
    finally:
        answering.close()


def test_the_indexing_job_stores_each_files_embeddings_and_a_question_only_loads_them(tmp_path, scripted_reader):
    embedder = CountingEmbedder()
    answering = make(tmp_path, scripted_reader(lambda m: "4711"), embedder,
                     ("bm25", "dense", "hybrid", "sentence-window"))
    written = []
    put = answering.collections.put_segment
    answering.collections.put_segment = lambda segment: written.append(segment.key) or put(segment)
    try:
        fill(answering)
        embedded = [key for key in written if key.embedder == embedder.name]
        assert len(embedded) == len(set(embedded)) == 4  # each file's chunk and sentence embeddings, once, by the job
        chunks_embedded = sum(embedder.calls)
        assert chunks_embedded >= 2
        answering.forget("ops")
        answering.base.memory.drop(lambda key: True)  # as another replica: nothing of the collection in memory
        retrievers = ("dense", "hybrid", "sentence-window")
        for retriever in retrievers:
            answer = answering.ask("ops", "What is the pump pressure limit?", {"retriever": retriever})
            assert answer.sources and answer.sources[0].file == "pump.txt"
        assert embedder.calls[-len(retrievers):] == [1] * len(retrievers)  # the queries only
        assert sum(embedder.calls) - chunks_embedded == len(retrievers)
        assert [key for key in written if key.embedder == embedder.name] == embedded  # nothing written again
    finally:
        answering.close()


def test_a_ready_collection_indexed_without_a_retriever_is_indexed_again_for_it(tmp_path, scripted_reader):
    """A collection indexed by a server that did not offer dense (an upgrade, a changed --retrievers) is refused at
    once, and its indexing runs again in the background, once; then dense answers from stored vectors."""
    first = make(tmp_path, scripted_reader(lambda m: "7781"), CountingEmbedder(), ("bm25",))
    try:
        fill(first)
    finally:
        first.close()
    embedder = CountingEmbedder()
    answering = make(tmp_path, scripted_reader(lambda m: "7781"), embedder, ("bm25", "dense"))
    try:
        with pytest.raises(IndexNotReady, match="retriever dense"):
            answering.search("ops", "crane reset code", 2, "dense")
        assert answering.collections.wait("ops").state == "ready"
        assert answering.search("ops", "crane reset code", 1, "dense")[0]["file"] == "crane.txt"
        assert embedder.calls[-1] == 1  # the query; the chunks were embedded by the job
    finally:
        answering.close()


def test_over_http_a_question_for_an_index_not_made_is_a_503_with_retry_after_and_bm25_answers(
        tmp_path, scripted_reader):
    answering = make(tmp_path, scripted_reader(lambda m: "7781"), CountingEmbedder(), ("bm25",))
    with running(create_app(answering, None, Limits(retrievers=("bm25", "dense")))) as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"}).raise_for_status()
        httpx.post(f"{url}/v1/collections/ops/files", files={"file": ("crane.txt", CRANE.encode())}).raise_for_status()
        assert wait_ready(url, "ops")["state"] == "ready"
        body = {"collection": "ops", "question": "What is the crane reset code?"}
        for stream in (False, True):
            refused = httpx.post(f"{url}/v1/ask", json=body | {"retriever": "dense", "stream": stream}, timeout=60)
            assert refused.status_code == 503 and refused.headers["retry-after"].isdigit()
            error = refused.json()["error"]
            assert "\n" not in error["message"] and "retriever dense" in error["message"]
            assert "still being indexed" in error["message"]
        answered = httpx.post(f"{url}/v1/ask", json=body | {"retriever": "bm25"}, timeout=60)
        assert answered.status_code == 200 and answered.json()["text"] == "7781"


@pytest.mark.parametrize("kind", ["embedded", "postgresql"])
def test_a_collections_index_costs_add_up_per_retriever_in_either_store(tmp_path, kind, request):
    store = (EmbeddedStore(tmp_path / "collections") if kind == "embedded"
             else PostgresCollections(request.getfixturevalue("database"), tmp_path / "mirror"))
    try:
        store.create("ops")
        collection = store.state("ops").id
        assert store.index_costs(collection) == {}
        store.add_index_cost(collection, "raptor", IndexCost(3, 300, 60, 1.5))
        store.add_index_cost(collection, "raptor", IndexCost(1, 100, 20, 0.5))  # a later job: one file's tree
        store.add_index_cost(collection, "tree", IndexCost(2, 50, 10, 0.25))
        assert store.index_costs(collection) == {"raptor": IndexCost(4, 400, 80, 2.0), "tree": IndexCost(2, 50, 10, 0.25)}
        assert store.index_costs("another") == {}
    finally:
        store.close()


def test_over_mcp_a_question_or_search_for_an_index_not_made_is_a_tool_error_saying_so(tmp_path, scripted_reader):
    pytest.importorskip("mcp")
    import asyncio

    from lcrag.service.mcp.tools import LcragMCP, ToolError

    embedder = CountingEmbedder()
    answering = make(tmp_path, scripted_reader(lambda m: "7781"), embedder, ("bm25",))
    try:
        fill(answering)
        server = LcragMCP(answering, Limits(retrievers=("bm25", "dense")))
        for call in (server.ask(question="What is the crane reset code?", collection="ops", retriever="dense"),
                     server.search(query="crane reset code", collection="ops", retriever="dense")):
            with pytest.raises(ToolError, match="^retriever dense: collection 'ops' is still being indexed"):
                asyncio.run(call)
        assert embedder.calls == []
        answered = asyncio.run(server.ask(question="What is the crane reset code?", collection="ops"))
        assert answered.answer == "7781"
    finally:
        answering.close()


def test_a_question_loading_stored_vectors_never_holds_up_bm25_on_the_same_collection(tmp_path, scripted_reader):
    import threading
    from concurrent.futures import ThreadPoolExecutor

    answering = make(tmp_path, scripted_reader(lambda m: "4711"), CountingEmbedder(), ("bm25", "dense"))
    try:
        fill(answering)
        answering.forget("ops")
        answering.base.memory.drop(lambda key: True)  # as another replica: its first dense question loads them
        entered, release = threading.Event(), threading.Event()
        vectors = answering.segments.vectors

        def held(*args, **kwargs):  # a slow store: the dense question's load is held here
            entered.set()
            release.wait(60)
            return vectors(*args, **kwargs)

        answering.segments.vectors = held
        with ThreadPoolExecutor(2) as pool:
            dense = pool.submit(answering.search, "ops", "pump pressure limit", 1, "dense")
            assert entered.wait(30)
            bm25 = pool.submit(answering.search, "ops", "pump pressure limit", 1, "bm25")
            try:
                assert bm25.result(timeout=20)[0]["file"] == "pump.txt"  # answered while the load is held
            finally:
                release.set()
            assert dense.result(timeout=60)[0]["file"] == "pump.txt"
    finally:
        answering.close()
