"""The bundled embedder runs each batch on one thread: many texts several batches at a time, a query on the thread
that asks (issue 43: a query's run took every core from the BM25 questions of the same server)."""

import threading

import numpy as np
import pytest

from lcrag.readers import streaming
from lcrag.retrieval import OnnxMiniLMEmbedder

TEXTS = [f"passage {i}: " + "the river ran past the mill and the town " * (i % 9 + 1) for i in range(60)]


@pytest.fixture(scope="module")
def parallel():
    embedder = OnnxMiniLMEmbedder(threads=3)
    yield embedder
    embedder.close()


def _threads_of_runs(embedder, monkeypatch) -> list[str]:
    """The names of the threads each batch of ``embedder`` runs on, from now on."""
    names: list[str] = []
    run = embedder._embed_batch

    def recorded(encodings):
        names.append(threading.current_thread().name)
        return run(encodings)

    monkeypatch.setattr(embedder, "_embed_batch", recorded)
    return names


def test_each_run_is_one_thread(parallel):
    assert parallel._session.get_session_options().intra_op_num_threads == 1


def test_batches_run_on_several_threads_give_each_text_its_own_vector(parallel, monkeypatch):
    names = _threads_of_runs(parallel, monkeypatch)
    together = parallel.embed(TEXTS)
    assert len(names) > 3 and {n.startswith("lcrag-embed") for n in names} == {True}
    assert len(set(names)) > 1  # (three threads and many batches: more than one of them ran)
    serial = OnnxMiniLMEmbedder(threads=1)
    assert np.allclose(together, serial.embed(TEXTS), atol=1e-5)
    assert np.allclose(together[17], serial.embed([TEXTS[17]])[0], atol=1e-4)


def test_a_query_runs_on_the_thread_that_asks(parallel, monkeypatch):
    names = _threads_of_runs(parallel, monkeypatch)
    parallel.embed(["Where does the river run?"])
    assert names == [threading.current_thread().name]


def test_a_cancelled_question_stops_between_batches(parallel, monkeypatch):
    listener = streaming.Listener()
    names = _threads_of_runs(parallel, monkeypatch)
    run = parallel._embed_batch

    def cancelling(encodings):
        listener.cancelled.set()
        return run(encodings)

    monkeypatch.setattr(parallel, "_embed_batch", cancelling)
    with streaming.listening(listener), pytest.raises(streaming.Cancelled):
        parallel.embed(TEXTS)
    batches = len(parallel._batched(parallel._encode(TEXTS)))
    assert len(names) < batches  # those in flight when it was seen finish; no other starts
