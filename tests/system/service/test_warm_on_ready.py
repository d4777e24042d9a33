"""Issue 43, item 1: a replica that did not index a collection loads it when told it is ready (its document, every
offered retriever's index as the job stored it, and the embedder its queries need), before its first question: that
question then loads nothing, and the first BM25 questions after ready no longer wait for the load."""

from __future__ import annotations

import time
from functools import partial

from postgres_fixtures import database, postgres  # noqa: F401 - fixtures
from counting_embedder import CRANE, PUMP, CountingEmbedder

from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.service.answering import Answering
from lcrag.store.postgres import PostgresCollections


def replica(tmp_path, name, reader, embedder, database, jobs: bool) -> Answering:
    settings = Settings(cache=False, cache_dir=tmp_path / name / "cache", chunking="words:10", k=2, strategy="rag")
    answering = Answering(settings, tmp_path / name / "collections",
                          pipeline=Pipeline(settings, reader=reader, embedder=embedder),
                          store=partial(PostgresCollections, database, lease=5.0), answer_cache=False,
                          retrievers=("bm25", "dense", "hybrid"))
    if jobs:  # (B runs none: A's job indexes, B is told)
        answering.collections.start_jobs(1)
    answering.collections.watch(answering.forget)  # as lcrag serve does with a shared store
    return answering


def kept(answering: Answering, name: str, seconds: float = 30) -> bool:
    """Whether ``answering`` holds the collection's current document within ``seconds``, unasked."""
    give_up = time.monotonic() + seconds
    while time.monotonic() < give_up:
        with answering._documents.lock:
            entry = answering._documents.entries.get(name)
        if entry is not None and entry[0] == answering.collections.identity(name):
            answering._warming.submit(lambda: None).result(30)  # (one thread: the warm-up under way is over)
            return True
        time.sleep(0.05)
    return False


def test_a_replica_loads_a_collection_another_made_ready_before_its_first_question(tmp_path, scripted_reader,
                                                                                   database, monkeypatch):
    embedders = [CountingEmbedder(), CountingEmbedder()]
    a, b = (replica(tmp_path, name, scripted_reader(lambda m: "7781"), embedder, database, name == "a")
            for name, embedder in zip("ab", embedders))
    try:
        a.warm_on_change = False  # (the indexing replica keeps what its job made: only B is looked at)
        a.collections.create("ops")
        for name, text in (("crane.txt", CRANE), ("pump.txt", PUMP)):
            a.collections.add_file("ops", name, iter([text.encode()]), 1 << 20)
        assert a.collections.wait("ops", 60).state == "ready"
        assert kept(b, "ops")
        assert embedders[1].calls == []  # nothing of the collection embedded
        loads = []
        for method in ("vectors", "bm25"):
            monkeypatch.setattr(b.segments, method, lambda *args, m=method, **kw: loads.append(m))
        for retriever in ("bm25", "dense", "hybrid"):
            assert b.ask("ops", "What is the crane reset code?", {"retriever": retriever}).text == "7781"
        assert loads == []  # every index the questions read was loaded before them
        assert embedders[1].calls == [1, 1]  # the dense and hybrid questions embedded their queries only
    finally:
        a.close()
        b.close()


def test_a_replica_told_to_stay_cold_loads_nothing_unasked(tmp_path, scripted_reader, database):
    embedders = [CountingEmbedder(), CountingEmbedder()]
    a, b = (replica(tmp_path, name, scripted_reader(lambda m: "7781"), embedder, database, name == "a")
            for name, embedder in zip("ab", embedders))
    try:
        b.warm_on_change = False
        a.collections.create("ops")
        a.collections.add_file("ops", "crane.txt", iter([CRANE.encode()]), 1 << 20)
        assert a.collections.wait("ops", 60).state == "ready"
        assert not kept(b, "ops", seconds=2) and embedders[1].calls == []
    finally:
        a.close()
        b.close()

