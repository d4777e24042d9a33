"""Issue 36: the answer cache in the collection store (lcrag.service.answer_cache), embedded and PostgreSQL: a second
identical question is answered without a reader call — through another replica on the same database too — and a new
file or a deleted one (a new version) misses; a streamed cached answer is one event sequence; an answer a learned
router decided while holding an LC share is never kept. And places at the reader (lcrag.service.slots): with a pool
of two reader servers two questions are answered at once."""

from __future__ import annotations

import threading
from functools import partial

import pytest
from postgres_fixtures import database, postgres  # noqa: F401 - fixtures

from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.readers import streaming
from lcrag.service.answer_cache import dump, from_cache, load
from lcrag.service.answering import Answering
from lcrag.core.types import Answer, LLMCall

CRANE = "The crane reset code is 7781. Hold the red button for five seconds before entering the reset code."
PUMP = "The pump pressure limit is 4711 kilopascal. Open the bypass valve when the pump pressure alarm sounds."
QUESTION = "What is the crane reset code?"


def replica(tmp_path, name, reader, store=None, **options) -> Answering:
    settings = Settings(cache=False, cache_dir=tmp_path / name / "cache", chunking="words:20", k=2, strategy="rag")
    answering = Answering(settings, tmp_path / name / "collections", pipeline=Pipeline(settings, reader=reader),
                          store=store, answer_cache=True, **options)
    if store is not None:
        answering.collections.start_jobs(1)
    return answering


@pytest.fixture(params=["embedded", "postgresql"])
def store(request):
    """What makes a replica's store: the embedded one (None), or PostgreSQL on a new database."""
    if request.param == "embedded":
        return None
    from lcrag.store.postgres import PostgresCollections

    return partial(PostgresCollections, request.getfixturevalue("database"), lease=5.0)


def add(answering, collection, name, text):
    answering.collections.add_file(collection, name, iter([text.encode()]), 1 << 20)
    assert answering.collections.wait(collection, 60).state == "ready"


def test_an_identical_question_is_answered_from_the_store_and_a_new_version_misses(tmp_path, scripted_reader,
                                                                                   store):
    reader = scripted_reader(lambda m: "7781")
    answering = replica(tmp_path, "a", reader, store)
    try:
        answering.collections.create("ops")
        add(answering, "ops", "crane.txt", CRANE)
        first = answering.ask("ops", QUESTION, {})
        calls = len(reader.calls)
        again = answering.ask("ops", QUESTION, {})
        assert len(reader.calls) == calls and not from_cache(first) and from_cache(again)
        assert (again.text, again.route, [s.to_dict() for s in again.sources]) == (
            first.text, first.route, [s.to_dict() for s in first.sources])
        answering.ask("ops", QUESTION, {"k": 1})  # another choice: another answer
        answering.ask("ops", QUESTION, {}, history=[{"role": "user", "content": "Hello"},
                                                    {"role": "assistant", "content": "Hi"}])
        assert len(reader.calls) > calls + 1
        calls = len(reader.calls)
        add(answering, "ops", "pump.txt", PUMP)  # a new version
        assert not from_cache(answering.ask("ops", QUESTION, {})) and len(reader.calls) == calls + 1
        answering.collections.remove_file("ops", "pump.txt")
        answering.forget("ops")
        assert answering.collections.wait("ops", 60).state == "ready"
        assert not from_cache(answering.ask("ops", QUESTION, {})) and len(reader.calls) == calls + 2
        assert from_cache(answering.ask("ops", QUESTION, {}))
    finally:
        answering.close()


def test_another_replica_answers_from_the_store_without_its_reader(tmp_path, scripted_reader, database):
    from lcrag.store.postgres import PostgresCollections

    store = partial(PostgresCollections, database, lease=5.0)
    readers = [scripted_reader(lambda m: "7781"), scripted_reader(lambda m: "never asked")]
    a, b = (replica(tmp_path, name, reader, store) for name, reader in zip("ab", readers))
    try:
        a.collections.create("ops")
        add(a, "ops", "crane.txt", CRANE)
        first = a.ask("ops", QUESTION, {})
        assert b.collections.wait("ops", 60).state == "ready"
        events: list[tuple[str, dict]] = []
        through_b = b.ask("ops", QUESTION, {}, streaming.Listener(lambda kind, data: events.append((kind, data))))
        assert readers[1].calls == [] and through_b.text == first.text == "7781" and from_cache(through_b)
        assert [s.to_dict() for s in through_b.sources] == [s.to_dict() for s in first.sources]
        # streamed: what it read (its sources), then the answer's text as one token, after started
        assert [kind for kind, _ in events] == ["started", "retrieved", "token"] and events[2][1]["text"] == "7781"
        assert events[1][1]["chunks"] == [s.to_dict() for s in first.sources]
        add(b, "ops", "pump.txt", PUMP)  # a change through B: A misses
        assert a.collections.wait("ops", 60).state == "ready"
        a.forget("ops")
        calls = len(readers[0].calls)
        assert not from_cache(a.ask("ops", QUESTION, {})) and len(readers[0].calls) == calls + 1
    finally:
        a.close()
        b.close()


def test_the_answers_of_an_earlier_version_are_dropped_from_the_store(tmp_path, scripted_reader, store):
    answering = replica(tmp_path, "a", scripted_reader(lambda m: "7781"), store)
    try:
        answering.collections.create("ops")
        add(answering, "ops", "crane.txt", CRANE)
        answering.ask("ops", QUESTION, {})
        kept = answering.answers.version("ops")
        assert answering.collections.cached_answer(*kept, next(iter(_keys(answering)))) is not None
        add(answering, "ops", "pump.txt", PUMP)  # a new version
        assert _keys(answering, kept) == []
    finally:
        answering.close()


def test_a_version_keeps_its_last_answers_only(tmp_path, scripted_reader, store):
    """lcrag serve --kept-answers 2: a third question's answer pushes out the one written longest ago (an answer
    written again counts as new), so the store does not grow with every question asked."""
    reader = scripted_reader(lambda m: "7781")
    answering = replica(tmp_path, "a", reader, store, kept_answers=2)
    questions = [QUESTION, "What is the reset code of the crane?", "Which code resets the crane?"]
    try:
        answering.collections.create("ops")
        add(answering, "ops", "crane.txt", CRANE)
        for question in questions:
            answering.ask("ops", question, {})
        assert len(_keys(answering)) == 2
        calls = len(reader.calls)
        assert from_cache(answering.ask("ops", questions[2], {})) and from_cache(answering.ask("ops", questions[1], {}))
        assert not from_cache(answering.ask("ops", questions[0], {})) and len(reader.calls) == calls + 1
        assert len(_keys(answering)) == 2 and from_cache(answering.ask("ops", questions[0], {}))
    finally:
        answering.close()


def _keys(answering, version=None) -> list[str]:
    """The answer keys the store holds for ``version`` (default: the collection's now)."""
    cid, number = version or answering.answers.version("ops")
    store = answering.collections
    if hasattr(store, "database"):  # the embedded store's SQLite
        with store.database._lock:
            rows = store.database._db.execute("SELECT key FROM answers WHERE id = ? AND version = ?", (cid, number))
            return [row[0] for row in rows.fetchall()]
    with store.db.connection() as db:
        return [row[0] for row in db.execute("SELECT key FROM lcrag_answers WHERE collection = %s AND version = %s",
                                             (cid, number))]


def test_an_answer_holding_an_lc_share_is_never_kept(tmp_path, scripted_reader):
    reader = scripted_reader(lambda m: "7781")
    answering = replica(tmp_path, "a", reader)
    try:
        answering.collections.create("ops")
        add(answering, "ops", "crane.txt", CRANE)
        version = answering.answers.version("ops")
        routed = Answer("7781", QUESTION, "self-route", "rag", routing={"realized_lc_share": 0.5})
        assert not answering.answers.put(version, "k", routed, "ops")
        plain = Answer("7781", QUESTION, "rag", "rag", calls=[LLMCall("m", 10, 1, stage="answer")])
        assert answering.answers.put(version, "k", plain, "ops")
        kept = answering.answers.get(version, "k")
        assert kept.text == "7781" and from_cache(kept) and kept.calls[0].prompt_tokens == 10
        assert not answering.answers.put((version[0], version[1] - 1), "k", plain, "ops")  # an old version
        assert load(b"not json") is None and load(dump(plain).replace(b"lcrag-answer-1", b"other")) is None
    finally:
        answering.close()


def test_a_pool_of_two_reader_servers_answers_two_questions_at_once(tmp_path):
    from reader_servers import Stub

    stubs = [Stub(), Stub()]
    for stub in stubs:
        stub.delay = 0.3  # fixed latency: each answer takes as long
    settings = Settings(llm="openai:m", base_url=",".join(s.url for s in stubs), strategy="lc", chunking="words:50",
                        cache=False, cache_dir=tmp_path / "cache", context_window=8192)
    answering = Answering(settings, tmp_path / "collections")
    order: list[str] = []
    second_started = threading.Event()

    def listener(name: str) -> streaming.Listener:
        def on_event(kind, data):
            if kind == "started":
                order.append(f"started {name}")
                if name == "second":
                    second_started.set()
                else:  # the first holds its place until the second has one too (never, one at a time)
                    second_started.wait(10)
        return streaming.Listener(on_event)

    try:
        answering.collections.create("ops")
        add(answering, "ops", "crane.txt", CRANE)
        threads = [threading.Thread(target=lambda n=name: order.append(
            f"answered {n}: " + answering.ask("ops", f"Question: {n}", {}, listener(n)).text))
            for name in ("first", "second")]
        threads[0].start()
        while "started first" not in order:
            threading.Event().wait(0.01)
        threads[1].start()
        for thread in threads:
            thread.join(30)
        assert order[:2] == ["started first", "started second"]
        assert sorted(order[2:]) == ["answered first: the answer is first", "answered second: the answer is second"]
        assert answering.slots.size == 2 * 4  # each server's connections
    finally:
        answering.close()
        for stub in stubs:
            stub.kill()


def test_the_embedded_reader_and_a_reader_that_says_nothing_answer_one_at_a_time(tmp_path, scripted_reader):
    answering = replica(tmp_path, "a", scripted_reader())
    try:
        answering.slots.take()
        assert answering.slots.size == 1
        cancelled = threading.Event()
        cancelled.set()
        with pytest.raises(streaming.Cancelled):
            answering.slots.take(cancelled)
        answering.slots.give_back()
    finally:
        answering.close()


def test_a_store_that_cannot_keep_an_answer_still_answers_the_question(tmp_path, scripted_reader, caplog):
    reader = scripted_reader(lambda m: "7781")
    answering = replica(tmp_path, "a", reader)
    try:
        answering.collections.create("ops")
        add(answering, "ops", "crane.txt", CRANE)

        def full_disk(*args):
            raise OSError(28, "No space left on device")

        answering.collections.cache_answer = full_disk
        answer = answering.ask("ops", QUESTION, {})
        assert answer.text == "7781" and not from_cache(answer)
        assert "could not be kept in the answer cache" in caplog.text
        assert not from_cache(answering.ask("ops", QUESTION, {}))  # nothing was kept: answered again
    finally:
        answering.close()


@pytest.mark.parametrize("server_slots, together", [(1, 1), (3, 3), (None, 4)])
def test_one_reader_server_answers_as_many_at_once_as_its_slots(tmp_path, server_slots, together):
    """--server-slots: what one OpenAI-compatible server is sent at once, hence the questions answered at once."""
    from reader_servers import Stub

    stub = Stub()
    stub.delay = 1.0  # every answer takes as long: the first `together` are all running before one ends
    settings = Settings(llm="openai:m", base_url=stub.url, strategy="lc", chunking="words:50", cache=False,
                        cache_dir=tmp_path / "cache", context_window=8192, server_slots=server_slots)
    answering = Answering(settings, tmp_path / "collections", max_waiting=8)
    running, most, lock = [0], [0], threading.Lock()

    def on_event(kind, data):
        if kind == "started":
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])

    def ask(n):
        answering.ask("ops", f"Question: q{n}", {}, streaming.Listener(on_event))
        with lock:
            running[0] -= 1

    try:
        answering.collections.create("ops")
        add(answering, "ops", "crane.txt", CRANE)
        threads = [threading.Thread(target=ask, args=(n,)) for n in range(5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert answering.slots.size == together and most[0] == together
        assert len(stub.chats) == 5
    finally:
        answering.close()
        stub.kill()


def test_an_answer_over_the_kept_bound_is_answered_afresh_never_kept_trimmed(tmp_path, scripted_reader):
    """lcrag serve --max-kept-answer-kb: an answer larger as written is not kept (a cached answer is the one the
    question got, sources and all, so it is not kept trimmed), and one kept by an earlier lcrag without the bound is
    not served; a smaller one is kept as before."""
    reader = scripted_reader(lambda m: "7781 " * 1000 if "long" in str(m) else "7781")
    answering = replica(tmp_path, "a", reader, kept_answer_bytes=4096)
    try:
        answering.collections.create("ops")
        add(answering, "ops", "crane.txt", CRANE)
        long_question = "What is the crane reset code? Answer at long length."
        first = answering.ask("ops", long_question, {})
        assert len(dump(first)) > 4096 and not _keys(answering)
        calls = len(reader.calls)
        again = answering.ask("ops", long_question, {})
        assert not from_cache(again) and len(reader.calls) == calls + 1
        assert [s.to_dict() for s in again.sources] == [s.to_dict() for s in first.sources]
        assert not from_cache(answering.ask("ops", QUESTION, {})) and from_cache(answering.ask("ops", QUESTION, {}))
        answering.answers.max_bytes = 100  # now over the bound: kept before it, never served
        assert not from_cache(answering.ask("ops", QUESTION, {}))
    finally:
        answering.close()
