"""Each question gets exactly what it asked for (issue 33): its choices resolve into frozen specs, and every cache of
built things is keyed on them and bounded. The caching logic is tested here with a scripted reader; the same over
the bundled models, from 8 threads, is tests/integration/test_concurrent_questions.py."""

from __future__ import annotations

import random
import threading
import time

import pytest

import lcrag.pipeline.pipeline
from lcrag.chunking import make_chunker
from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.core.registry import RETRIEVERS, Option
from lcrag.core.types import ScoredChunk
from lcrag.pipeline.specs import resolve
from lcrag.strategies.routing import learned as learned_router
from lcrag.core.types import Document

pytestmark = pytest.mark.unit

DOCUMENT = Document(id="d", text=" ".join(f"Sentence {i} tells fact {i}." for i in range(60)))


class FirstChunks:
    """A retriever returning the document's first ``depth`` chunks, whatever k asks: its option decides."""

    name = "first-chunks"

    def __init__(self, index, depth: int = 1):
        self.chunks, self.depth = index.chunks, depth

    def run(self, query: str, k: int | None = None) -> list[ScoredChunk]:
        return [ScoredChunk(c, 1.0) for c in self.chunks[: self.depth]]


@pytest.fixture
def first_chunks():
    RETRIEVERS.register("first-chunks", help="the first DEPTH chunks",
                        options=(Option("depth", int, 1, "chunks returned", min=1, max=50),))(FirstChunks)
    yield
    RETRIEVERS.remove("first-chunks")


def test_a_retriever_option_chosen_per_question_is_the_one_used(first_chunks, scripted_reader, tmp_path):
    """Item 1: three questions on one pipeline with depth 1, 3 and 5 read 1, 3 and 5 chunks (on 5281a3b, all 1)."""
    pipeline = Pipeline(Settings(strategy="rag", retriever="first-chunks", k=10, chunking="words:20",
                                 cache_dir=tmp_path, cache=False), reader=scripted_reader())
    read = [len(pipeline.ask(DOCUMENT, "Which fact?", options={"depth": depth}).chunks) for depth in (1, 3, 5, 3)]
    assert read == [1, 3, 5, 3]


def test_window_and_tree_navigation_are_the_retrievers_own_options():
    window = resolve(Settings(retriever="sentence-window", window=6)).retriever
    assert (window.kind, window.name, window.options) == ("retriever", "sentence-window", (("window", 6),))
    assert resolve(Settings(retriever="tree", tree_navigation="llm")).retriever.options == (("tree_navigation", "llm"),)
    assert resolve(Settings(retriever="bm25", window=6)).retriever.options == ()  # bm25 takes none: one for all


def test_routing_settings_are_the_routed_strategys_options():
    spec = resolve(Settings(strategy="self-route", route_threshold=0.3, order="document")).strategy
    assert dict(spec.options) == {"order": "document", "route_threshold": 0.3, "router": None, "lc_share": None,
                                  "lc_cost_share": None, "declines_to_lc": False, "cache_aware": False}
    assert dict(resolve(Settings(strategy="cascade", route_threshold=0.2, options={"widen": 4})).strategy.options) == {
        "order": "score", "route_threshold": 0.2, "widen": 4}
    assert resolve(Settings(strategy="rag", route_threshold=0.3)).strategy == resolve(Settings(strategy="rag")).strategy


def test_client_chosen_thresholds_keep_a_bounded_number_of_strategies_and_parse_the_router_once(
        scripted_reader, tmp_path, monkeypatch):
    """Item 2: 300 random thresholds with the shipped router keep at most 128 strategies, and the router file is
    parsed once (on 5281a3b: 300 strategies, the file parsed 4 times per question)."""
    learned_router._load_router.cache_clear()
    parsed = []
    parse = learned_router.Router.parse.__func__
    monkeypatch.setattr(learned_router.Router, "parse", classmethod(lambda cls, path: parsed.append(path)
                                                                     or parse(cls, path)))
    pipeline = Pipeline(Settings(cache_dir=tmp_path, cache=False), reader=scripted_reader())
    rng = random.Random(7)
    for _ in range(300):
        settings = pipeline.settings_for({"router": "lara", "route_threshold": rng.random(), "k": rng.randint(1, 9)})
        pipeline.strategy("self-route", settings)
    assert len(pipeline._strategies) <= lcrag.pipeline.pipeline._STRATEGIES_KEPT
    assert len(pipeline._choices) <= lcrag.pipeline.pipeline._CHOICES_KEPT
    assert parsed == ["lara"]
    kept = list(pipeline._strategies.values())
    assert all(s.condition.router is kept[0].condition.router for s in kept)  # one router shared by all


def test_lazy_parts_are_made_once_however_many_threads_ask_first(tmp_path, monkeypatch):
    """Item 3: 8 threads asking for the embedder at once make one (on 5281a3b, each made its own)."""
    made = []

    def slow_embedder(spec, **endpoint):
        made.append(spec)
        time.sleep(0.05)
        return object()

    monkeypatch.setattr(lcrag.pipeline.pipeline, "make_embedder", slow_embedder)
    pipeline = Pipeline(Settings(cache_dir=tmp_path, cache=False))
    barrier = threading.Barrier(8)
    seen = []

    def ask_for_it():
        barrier.wait()
        seen.append(pipeline.embedder)

    threads = [threading.Thread(target=ask_for_it) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and len({id(e) for e in seen}) == 1


def test_an_index_being_built_blocks_no_other_question(scripted_reader, tmp_path, monkeypatch):
    """Item 6: while one document is being chunked, other documents are indexed and strategies and settings are
    found (on 5281a3b they waited behind the pipeline-wide lock until the chunking ended)."""
    pipeline = Pipeline(Settings(strategy="rag", chunking="words:20", cache_dir=tmp_path, cache=False),
                        reader=scripted_reader())
    release, started = threading.Event(), threading.Event()

    class SlowChunker:
        key = "slow"

        def run(self, document):
            started.set()
            release.wait(10)
            return make_chunker("words", 20).run(document)

    real_chunker = pipeline.chunker
    monkeypatch.setattr(pipeline, "chunker", lambda chunking: SlowChunker() if chunking == "words:7" else
                        real_chunker(chunking))
    slow = threading.Thread(target=pipeline.index, args=(DOCUMENT, "words:7"))
    slow.start()
    assert started.wait(10)
    done = threading.Event()

    def meanwhile():
        pipeline.strategy("self-route", pipeline.settings_for({"route_threshold": 0.4}))
        pipeline.ask(Document(id="other", text="The other document says the code is 12."), "What is the code?")
        done.set()

    other = threading.Thread(target=meanwhile)
    other.start()
    finished = done.wait(5)
    release.set()
    slow.join()
    other.join()
    assert finished, "a question on another document waited for the index being built"


def test_a_follow_ups_quote_is_picked_by_the_question_as_it_stands_alone(scripted_reader, tmp_path):
    """Item 8: after "Tell me about the annual lantern festival of Dunmoor.", "What date?" quotes the sentence about
    the festival's date, not one that shares only "the" with the answer (as on 5281a3b)."""
    text = ("Sailors buy fish at the market near the sailor. The annual lantern festival of Dunmoor is held on "
            "the ninth of October. " + "The river runs past the mill and the weir. " * 40)
    pipeline = Pipeline(Settings(strategy="rag", chunking="words:40", k=1, condense="join", cache_dir=tmp_path,
                                 cache=False), reader=scripted_reader(lambda m: "The date is in the autumn."))
    answer = pipeline.ask(Document(id="dunmoor", text=text), "What date?",
                          history=[{"role": "user", "content": "Tell me about the annual lantern festival of Dunmoor."},
                                   {"role": "assistant", "content": "It is a festival of lanterns."}])
    assert "ninth of October" in answer.sources[0].snippet


def test_the_per_question_lists_come_from_one_place():
    """PER_QUESTION is the question sections' fields (plus max_tokens); the HTTP request's choices are its request
    model's fields, each a per-question setting; the MCP ask tool takes exactly the request's fields."""
    import inspect

    from lcrag.pipeline.config import PER_QUESTION
    from lcrag.service.answering import ANSWER_OPTIONS
    from lcrag.service.mcp.tools import LcragMCP
    from lcrag.service.requests import AskRequest

    assert {"strategy", "retriever", "k", "budget", "window", "route_threshold", "options", "max_tokens"} <= set(
        PER_QUESTION)
    assert not {"llm", "embedder", "cache_dir", "summary_llm"} & set(PER_QUESTION)
    assert set(ANSWER_OPTIONS) <= set(PER_QUESTION)
    tool = set(inspect.signature(LcragMCP.ask).parameters) - {"self", "ctx"}
    assert tool == set(AskRequest.model_fields) - {"stream"}
