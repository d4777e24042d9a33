"""A cancelled question stops at its next step boundary: a slow retrieval step that does not look at the cancel
itself is followed by no assembly and no reader call; a routed strategy whose first answer came back after the
cancel never starts its second step; long loops (``streaming.checked``), a retriever's summary calls in worker
threads and a bulk embedding stop within a few items, the rows embedded before the cancel kept for the next build."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from lcrag.assembly import ContextAssembler
from lcrag.readers import streaming
from lcrag.readers.base import Completion, GenerationParams, complete_many
from lcrag.retrieval.dense import embed_rows
from lcrag.strategies import PromptSet, QueryContext, make_strategy
from lcrag.core.types import Chunk, Document, Ranked, ScoredChunk

DOC = Document("The crane reset code is 7781. " * 20, "ops")


class SlowRetriever:
    """A retrieval step that takes its time and never looks at the cancel: the client leaves while it runs."""

    name = "slow"

    def __init__(self, listener: streaming.Listener):
        self.listener, self.runs = listener, 0

    def run(self, query: str, k: int | None = None) -> list[ScoredChunk]:
        self.runs += 1
        leaving = threading.Thread(target=self.listener.cancelled.set)  # the client goes, from another thread
        leaving.start()
        leaving.join()
        chunk = Chunk(0, 0, 30, DOC.text[:30])
        return [ScoredChunk(chunk, 1.0)]


class SlowIndex:
    def __init__(self, retriever: SlowRetriever):
        self.slow, self.counted = retriever, 0

    def retriever(self, spec) -> SlowRetriever:
        return self.slow

    def search(self, spec, query: str, depth: int | None) -> Ranked:
        return Ranked(self.slow.run(query, depth))

    def chunk_tokens(self, chunks, tokenizer) -> list[int]:
        self.counted += len(chunks)
        return [8 for _ in chunks]


def context(reader, index, budget: int | None = None) -> QueryContext:
    return QueryContext(document=DOC, reader=reader, index=lambda: index, retriever="slow",
                        assembler=ContextAssembler(k=None if budget else 3, budget=budget), prompts=PromptSet(),
                        params=GenerationParams(max_tokens=8))


@pytest.mark.parametrize("strategy", ["rag", "op-rag", "self-route", "cascade"])
def test_a_question_cancelled_during_retrieval_stops_before_assembly_and_the_reader(strategy, scripted_reader):
    listener = streaming.Listener()
    index = SlowIndex(SlowRetriever(listener))
    reader = scripted_reader()
    with streaming.listening(listener), pytest.raises(streaming.Cancelled):
        make_strategy(strategy).run(context(reader, index, budget=64), "Crane reset code?")
    assert index.slow.runs == 1  # retrieval ran, and was not run again by a later step
    assert index.counted == 0  # the budget's assembly never counted a chunk
    assert reader.calls == []


def test_without_a_cancel_the_same_question_is_answered(scripted_reader):
    index = SlowIndex(SlowRetriever(streaming.Listener()))  # its own listener, not the question's
    reader = scripted_reader(lambda m: "7781")
    with streaming.listening(streaming.Listener()):
        answer = make_strategy("rag").run(context(reader, index, budget=64), "Crane reset code?")
    assert answer.text == "7781" and index.counted == 1 and len(reader.calls) == 1


@pytest.mark.parametrize("strategy", ["self-route", "cascade"])
def test_a_routed_strategy_cancelled_during_its_first_call_never_starts_the_next_step(strategy, scripted_reader):
    listener = streaming.Listener()

    def declines_and_the_client_leaves(messages):
        listener.cancelled.set()  # the reader's answer comes back after the client left
        return "unanswerable"

    reader = scripted_reader(declines_and_the_client_leaves)
    index = SlowIndex(SlowRetriever(streaming.Listener()))
    with streaming.listening(listener), pytest.raises(streaming.Cancelled):
        make_strategy(strategy).run(context(reader, index), "Crane reset code?")
    assert len(reader.calls) == 1 and index.slow.runs == 1  # neither the wider RAG nor LC started


def test_a_long_loop_stops_within_a_check_of_the_cancel():
    listener, seen = streaming.Listener(), []
    with streaming.listening(listener), pytest.raises(streaming.Cancelled):
        for item in streaming.checked(range(1_000_000), every=100):
            seen.append(item)
            if item == 250:
                listener.cancelled.set()
    assert len(seen) == 300  # stopped at the next look after the cancel, not at the end
    assert list(streaming.checked(range(5), every=1)) == [0, 1, 2, 3, 4]  # no listener: never raises


def test_summary_calls_in_worker_threads_see_their_questions_cancel(scripted_reader):
    listener = streaming.Listener()
    lock = threading.Lock()

    def first_call_cancels(messages):
        with lock:
            listener.cancelled.set()
        return "a summary"

    reader = scripted_reader(first_call_cancels)
    requests = [([{"role": "user", "content": f"part {n}"}], GenerationParams()) for n in range(40)]
    with streaming.listening(listener), pytest.raises(streaming.Cancelled):
        complete_many(reader, requests, max_concurrency=4)
    assert len(reader.calls) <= 4  # the calls already started when the first returned; no later one started
    assert complete_many(reader, requests[:3], max_concurrency=4)[0].text == "a summary"  # not listened: all run


class CountingEmbedder:
    def __init__(self, listener: streaming.Listener | None = None, cancel_after: int = 0):
        self.listener, self.cancel_after, self.batches = listener, cancel_after, 0

    def __call__(self, batches):
        for texts in batches:
            self.batches += 1
            if self.listener is not None and self.batches == self.cancel_after:
                self.listener.cancelled.set()
            yield np.ones((len(texts), 4), dtype=np.float32)


def test_a_bulk_embedding_stops_between_batches_and_the_next_build_resumes(tmp_path):
    listener = streaming.Listener()
    cancelled = CountingEmbedder(listener, cancel_after=2)
    path = tmp_path / "vectors.npy"
    with streaming.listening(listener), pytest.raises(streaming.Cancelled):
        embed_rows(100, lambda lo, hi: ["text"] * (hi - lo), cancelled, path, batch=10)
    assert cancelled.batches == 2 and not path.exists()
    resumed = CountingEmbedder()
    vectors = embed_rows(100, lambda lo, hi: ["text"] * (hi - lo), resumed, path, batch=10)
    assert resumed.batches == 8 and vectors.shape == (100, 4)  # the two batches embedded before the cancel kept
