"""A pool of OpenAI-compatible reader servers (lcrag.readers.pool) against stand-in servers on loopback: least
outstanding for calls without a document, document affinity, a failing or killed server skipped with back-off and its
calls retried on another (no question lost), a server that comes back used again, a stream cut mid-answer resumed
without repeating text, the cached-token share in /metrics, and --base-url given several ways."""

import json
from dataclasses import replace
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client import generate_latest
from reader_servers import PIECES, Stub, answer_of

from lcrag.pipeline.config import Config, Settings
from lcrag.core.errors import LcragError, ReaderError
from lcrag.core.http_client import ServerUnavailable, resolve_endpoint
from lcrag.readers import GenerationParams, PooledReader, make_reader, server_stats, streaming
from lcrag.readers.call_context import Asking
from lcrag.readers.pool import ServerPool, pooled_reader
from lcrag.service.metrics import Metrics
from lcrag.core.types import Document

PARAMS = GenerationParams(max_tokens=8)


@pytest.fixture
def stubs():
    started = []

    def start(n=2, **settings):
        for _ in range(n):
            stub = Stub()
            for name, value in settings.items():
                setattr(stub, name, value)
            started.append(stub)
        return started[-n:]

    yield start
    for stub in started:
        stub.kill()


def pool_of(stubs, backoff=0.2, max_backoff=2.0, timeout=20.0, affinity=True) -> PooledReader:
    return pooled_reader("m", [s.url for s in stubs], context_window=8192, timeout=timeout, backoff=backoff,
                         max_backoff=max_backoff, affinity=affinity)


def ask(reader, document: Document | None, question: str):
    """A question's answering call, as a strategy makes it: the question it is for in its parameters."""
    prompt = f"{document.text if document else ''}\nQuestion: {question}"
    return reader.complete([{"role": "user", "content": prompt}], replace(PARAMS, asking=Asking(question, document)))


def documents(n: int) -> list[Document]:
    return [Document(f"Document {i} says: " + " ".join(f"fact{i}-{j}" for j in range(200)), id=f"d{i}")
            for i in range(n)]


# -- choosing a server -----------------------------------------------------------------------------------------------

def test_least_outstanding_takes_turns_and_prefers_the_idle_server():
    pool = ServerPool(["a", "b", "c"])
    picks = [pool._take(None)[0] for _ in range(3)]
    assert sorted(picks) == [0, 1, 2]  # ties in turn
    pool._done(0, failed=False)
    pool._done(2, failed=False)
    assert pool._take(None)[0] in (0, 2) and pool._take(None)[0] in (0, 2)  # 1 is still busy
    assert [s["outstanding"] for s in pool.stats()] == [1, 1, 1]


def test_calls_without_a_document_are_spread_over_the_servers(stubs):
    a, b = stubs(2, delay=0.2)
    reader = pool_of([a, b])
    with ThreadPoolExecutor(8) as run:
        answers = list(run.map(lambda i: ask(reader, None, f"q{i}"), range(8)))
    assert [c.text for c in answers] == [f"the answer is q{i}" for i in range(8)]
    assert len(a.chats) == len(b.chats) == 4


def test_a_document_keeps_its_server_and_documents_spread(stubs):
    a, b = stubs(2)
    reader = pool_of([a, b])
    docs = documents(12)
    for question in range(3):
        for doc in docs:
            ask(reader, doc, f"question {question}")
    homes = [[s for s in (a, b) if any(doc.text in p for p in s.chats)] for doc in docs]
    assert all(len(h) == 1 for h in homes)  # each document's questions all went to one server
    assert {id(h[0]) for h in homes} == {id(a), id(b)}  # and the documents are spread over both
    # counted exactly as each server reported them; every question after a document's first hit its prefix
    for stub, stats in zip((a, b), reader.server_stats()):
        assert stats["completions"] == len(stub.reported)
        for field in ("prompt_tokens", "cached_prompt_tokens"):
            assert stats[field] == sum(u[field] if field in u else u["prompt_tokens_details"]["cached_tokens"]
                                       for u in stub.reported)
    reported = [u for stub in (a, b) for u in stub.reported]
    assert sum(u["prompt_tokens_details"]["cached_tokens"] > 200 for u in reported) == 24


def test_without_affinity_a_document_goes_to_both_servers(stubs):
    a, b = stubs(2)
    reader = pool_of([a, b], affinity=False)
    doc = documents(1)[0]
    for question in range(4):
        ask(reader, doc, f"question {question}")
    assert len(a.chats) == len(b.chats) == 2


def test_affinity_moves_only_a_down_servers_documents_and_brings_them_back(stubs):
    a, b, c = stubs(3)
    reader = pool_of([a, b, c], backoff=0.3, max_backoff=0.3)
    docs = documents(9)
    home = {doc.id: _server_of(reader, doc) for doc in docs}
    down = home[docs[0].id]
    [a, b, c][down].kill()
    moved = {doc.id: _server_of(reader, doc) for doc in docs}
    assert all(moved[d] == home[d] for d in home if home[d] != down)  # the others keep their server
    assert all(moved[d] != down for d in home)
    [a, b, c][down].start()
    time.sleep(0.35)  # its back-off ends: the next call tries it again, and it answers
    assert {doc.id: _server_of(reader, doc) for doc in docs} == home


def _homed_on_both(reader: PooledReader, docs: list[Document], each: int) -> list[Document]:
    """`each` documents whose home is server 0 and `each` whose home is server 1, interleaved."""
    homes = {0: [], 1: []}
    for doc in docs:
        homes[_server_of(reader, doc)].append(doc)
    assert len(homes[0]) >= each and len(homes[1]) >= each
    return [doc for pair in zip(homes[0][:each], homes[1][:each]) for doc in pair]


def _server_of(reader: PooledReader, doc: Document) -> int:
    before = [s["completions"] for s in reader.server_stats()]
    ask(reader, doc, "which server?")
    after = [s["completions"] for s in reader.server_stats()]
    return next(i for i, (x, y) in enumerate(zip(before, after)) if y > x)


# -- failing servers -------------------------------------------------------------------------------------------------

def test_a_failing_server_is_skipped_with_backoff_and_its_calls_retried(stubs):
    a, b = stubs(2)
    a.fail_status = 503
    reader = pool_of([a, b], backoff=0.5, max_backoff=4.0)
    assert ask(reader, None, "one").text == "the answer is one"  # a failed, b answered
    health = reader.pool.stats()
    assert health[0]["up"] is False and health[0]["failures"] == 1 and health[1]["up"] is True
    for i in range(4):  # while a backs off, every call goes to b without trying a
        ask(reader, None, f"q{i}")
    assert reader.pool.stats()[0]["failures"] == 1 and len(b.chats) == 5
    time.sleep(0.55)
    ask(reader, None, "again")  # a is tried again, fails again: its back-off doubles
    assert reader.pool._servers[0].failures_in_row == 2
    a.fail_status = None
    time.sleep(1.05)
    ask(reader, None, "back")
    ask(reader, None, "back too")
    assert a.chats and reader.pool.stats()[0]["up"] is True and reader.pool._servers[0].failures_in_row == 0


def test_a_server_killed_mid_run_loses_no_question(stubs):
    a, b = stubs(2, delay=0.05)
    reader = pool_of([a, b], backoff=30, max_backoff=60)  # a stays skipped once it failed
    docs = _homed_on_both(reader, documents(24), 3)  # rendezvous over random ports: six at random can all be b's

    killed = threading.Event()

    def question(i):
        if i == 12:
            a.kill()  # up to half a second (the stub's serve loop polls): the later questions wait for it, so that
            killed.set()  # some of them are a's and meet it dead (else all could be answered before it went)
        elif i > 12:
            killed.wait(30)
        return ask(reader, docs[i % 6], f"question {i}")

    with ThreadPoolExecutor(4) as run:
        answers = list(run.map(question, range(40)))
    assert [c.text for c in answers] == [f"the answer is {i}" for i in range(40)]
    assert reader.pool.stats()[0]["up"] is False and reader.pool.stats()[0]["failures"] >= 1


def test_a_refused_request_is_not_retried_on_another_server(stubs):
    a, b = stubs(2)
    a.fail_status = b.fail_status = 400
    reader = pool_of([a, b])
    with pytest.raises(ReaderError, match="400") as refused:
        ask(reader, None, "bad")
    assert not isinstance(refused.value, ServerUnavailable)
    assert [s["failures"] for s in reader.pool.stats()] == [0, 0] and all(s["up"] for s in reader.pool.stats())


def test_with_every_server_down_a_call_waits_for_one_to_come_back(stubs):
    a, b = stubs(2)
    reader = pool_of([a, b], backoff=0.2, max_backoff=0.2)
    a.kill()
    b.kill()
    asked = ThreadPoolExecutor(1).submit(ask, reader, None, "patience")
    deadline = time.monotonic() + 60  # a hang guard, no speed
    while not all(s["failures"] for s in reader.pool.stats()):  # the call found both down, and goes on waiting
        assert time.monotonic() < deadline and not asked.done(), reader.pool.stats()
        time.sleep(0.01)
    b.start()
    assert asked.result(60).text == "the answer is patience"


def test_with_every_server_down_past_the_deadline_the_call_fails_in_one_line(stubs):
    a, b = stubs(2)
    a.kill()
    b.kill()
    reader = pool_of([a, b], backoff=0.1, max_backoff=0.2, timeout=1.0)
    with pytest.raises(ServerUnavailable, match="none of the 2 reader servers answered within the deadline"):
        ask(reader, None, "lost")


def test_the_tokenizer_and_window_come_from_a_server_that_is_up(stubs):
    a, b = stubs(2)
    a.kill()
    reader = pooled_reader("m", [a.url, b.url], backoff=0.5)
    assert reader.context_window == 8192
    assert reader.tokenizer.encode("one two three") == [sum(map(ord, p)) for p in PIECES.findall("one two three")]
    assert reader.tokenizer.token_spans("one two") == [(0, 3), (3, 7)]
    assert reader.count_prompt_tokens([{"role": "user", "content": "one two"}]) > 0


def test_a_stream_cut_mid_answer_is_resumed_on_another_server_without_repeating(stubs):
    a, b = stubs(2)
    a.cut_after = 2  # "the answer" reaches the listener, then a's connection is torn down
    reader = pool_of([a, b])
    tokens = []
    listener = streaming.Listener(lambda kind, data: tokens.append(data["text"]) if kind == "token" else None)
    with streaming.listening(listener), streaming.answering_call("answer"):
        completion = ask(reader, None, "resumed")
    assert completion.text == answer_of("Question: resumed") == "the answer is resumed"
    assert "".join(tokens) == completion.text and len(tokens) == 4
    assert len(a.chats) == len(b.chats) == 1


# -- counting and configuration --------------------------------------------------------------------------------------

def test_cached_token_share_in_metrics_per_server_and_in_all(stubs):
    a, b = stubs(2)
    reader = pool_of([a, b])
    docs = documents(4)
    for question in range(3):
        for doc in docs:
            ask(reader, doc, f"question {question}")
    stats = server_stats(reader)
    metrics = Metrics()
    metrics.watch_readers(lambda: stats)
    text = generate_latest(metrics.registry).decode()
    total = {k: sum(s[k] for s in stats) for k in ("prompt_tokens", "cached_prompt_tokens")}
    share = total["cached_prompt_tokens"] / total["prompt_tokens"]
    assert share > 0.5
    assert f'lcrag_reader_cached_token_share{{server="all"}} {share}' in text
    for s in stats:  # a server that has answered nothing yet has no share
        shown = f'lcrag_reader_cached_token_share{{server="{s["server"]}"}} {s["cached_share"]}'
        assert (shown in text) == (s["cached_share"] is not None)
        assert f'lcrag_reader_prompt_tokens_total{{server="{s["server"]}"}} {float(s["prompt_tokens"])}' in text
        assert f'lcrag_reader_up{{server="{s["server"]}"}} 1.0' in text


def test_one_server_reports_its_share_too(stubs):
    (a,) = stubs(1)
    reader = make_reader("openai:m", a.url)
    doc = documents(1)[0]
    ask(reader, doc, "one")
    ask(reader, doc, "two")
    (only,) = server_stats(reader)
    assert only["completions"] == 2 and 0 < only["cached_share"] < 1 and "up" not in only


def test_base_urls_given_several_ways_make_one_pool(monkeypatch, stubs):
    a, b = stubs(2)
    from_file = Config.from_dict({"reader": {"llm": "openai:m", "base_url": [a.url, b.url]}}).settings()
    assert from_file.base_url == f"{a.url},{b.url}"
    reader = make_reader("openai:m", **from_file.reader_endpoint())
    assert isinstance(reader, PooledReader) and len(reader.members) == 2 and reader.pool.backoff == 1.0
    monkeypatch.setenv("LCRAG_BASE_URL", f"{a.url}, {b.url}")
    assert isinstance(make_reader("openai:m"), PooledReader)
    assert resolve_endpoint(None, None, "embedder")[0] == a.url  # an embedder reads the first server
    spec = make_reader(f"openai:m@{a.url},{b.url}", backoff=3, max_backoff=9)
    assert spec.pool.backoff == 3 and spec.pool.max_backoff == 9
    assert spec.identity == make_reader(f"openai:m@{b.url},{a.url}").identity  # the order of URLs changes nothing
    assert make_reader("openai:m", a.url).identity == f"openai:m@{a.url}"  # one server: as before


def test_pool_settings_are_checked_in_one_line():
    with pytest.raises(LcragError, match="bad base URL 'ftp://x'"):
        Settings(base_url="http://a:1/v1,ftp://x")
    with pytest.raises(LcragError, match="a server is given twice"):
        Settings(base_url="http://a:1/v1, http://a:1/v1/")
    with pytest.raises(LcragError, match="max_backoff must be at least the back-off it starts from \\(10\\)"):
        Settings(backoff=10, max_backoff=5)
    assert Settings(base_url="http://u:pw@a:1/v1,http://b:2/v1").to_dict()["reader"]["base_url"] == \
        "http://***@a:1/v1,http://b:2/v1"


def test_the_service_answers_through_a_pool_and_shows_it_in_metrics(stubs, tmp_path):
    import httpx
    from service_fixtures import running, wait_ready

    from lcrag.service.answering import Answering
    from lcrag.service.http.app import create_app

    a, b = stubs(2)
    settings = Settings(llm="openai:m", base_url=f"{a.url},{b.url}", strategy="lc", chunking="words:50", cache=False,
                        cache_dir=tmp_path / "cache", backoff=30, max_backoff=60)
    answering = Answering(settings, tmp_path / "collections")
    with running(create_app(answering)) as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        httpx.post(f"{url}/v1/collections/ops/files", files={"file": ("ops.txt", " ".join(documents(1)[0].text))})
        wait_ready(url, "ops")

        def ask_service(question, stream):
            request = {"collection": "ops", "question": question, "stream": stream}
            if not stream:
                return httpx.post(f"{url}/v1/ask", json=request, timeout=60).json()["text"]
            with httpx.stream("POST", f"{url}/v1/ask", json=request, timeout=60) as response:
                lines = [line for line in response.iter_lines() if line.startswith("data: ")]
            return json.loads(lines[-1].removeprefix("data: "))["text"]

        assert ask_service("first", False) == "the answer is first"
        home = a if a.chats else b
        assert ask_service("second", True) == "the answer is second" and len(home.chats) == 2
        home.kill()
        assert ask_service("third", True) == "the answer is third"  # the other server answers
        metrics = httpx.get(f"{url}/metrics").text
    answering.close()
    down, up = (a, b) if home is a else (b, a)
    assert f'lcrag_reader_up{{server="{down.url[:-3]}"}} 0.0' in metrics
    assert f'lcrag_reader_completions_total{{server="{up.url[:-3]}"}} 1.0' in metrics
    assert 'lcrag_reader_cached_token_share{server="all"}' in metrics
