"""The service over real HTTP on loopback (uvicorn), with a scripted reader: collections and uploads, the
OpenAI-compatible API through the real `openai` client (plain and streaming), the native ask API, errors with their
status codes, the API key, metrics."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from document_fixtures import crane_manual
from service_fixtures import running, wait_ready

from lcrag.pipeline import Pipeline, Settings
from lcrag.service.answering import Answering
from lcrag.service.app import create_app
from lcrag.service.limits import Limits

def manual(tmp_path):
    return crane_manual(tmp_path)


@pytest.fixture
def service(tmp_path, scripted_reader):
    def make(api_key=None, max_upload=1 << 20, answer=lambda m: "7781", max_waiting=8, **limits):
        settings = Settings(cache=False, cache_dir=tmp_path / "cache", chunking="words:20", k=2, strategy="rag")
        pipeline = Pipeline(settings, reader=scripted_reader(answer))
        answering = Answering(settings, tmp_path / "collections", pipeline=pipeline, price_as="gpt-4o-mini",
                              max_waiting=max_waiting)
        return running(create_app(answering, api_key, Limits(max_upload_bytes=max_upload, **limits))), answering
    return make


def ops_collection(url, tmp_path):
    """The collection "ops" holding the crane manual, indexed."""
    httpx.post(f"{url}/v1/collections", json={"name": "ops"})
    upload(url, "ops", manual(tmp_path))
    return wait_ready(url, "ops")


def streamed_chat(url, **options):
    """The chunks of a streamed chat answer to "Crane reset code?" through the real `openai` client."""
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
    return list(client.chat.completions.create(model="lcrag/ops", stream=True, extra_body=options,
                                               messages=[{"role": "user", "content": "Crane reset code?"}]))


def chat_text(chunks) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def upload(url, name, path, headers=None):
    with open(path, "rb") as f:
        return httpx.post(f"{url}/v1/collections/{name}/files", files={"file": (path.name, f)}, headers=headers)


def test_collections_upload_and_the_openai_client(service, tmp_path):
    import openai

    server, _ = service()
    with server as url:
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"}).status_code == 201
        stored = upload(url, "ops", manual(tmp_path))
        assert stored.status_code == 201 and stored.json()["name"] == "crane.pdf"
        assert wait_ready(url, "ops")["state"] == "ready"
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
        assert [m.id for m in client.models.list().data] == ["lcrag/ops"]
        reply = client.chat.completions.create(model="lcrag/ops", messages=[
            {"role": "user", "content": "What is the crane reset code?"}])
        assert reply.choices[0].message.content == "7781"
        assert reply.usage.prompt_tokens > 0 and reply.usage.total_tokens == reply.usage.prompt_tokens + 1
        extra = reply.model_extra["lcrag"]
        assert extra["route"] == "rag" and extra["sources"][0]["pages"] == ["6"] and extra["cost"]["total"] > 0
        stream = client.chat.completions.create(model="lcrag/ops", stream=True, stream_options={"include_usage": True},
                                                messages=[{"role": "user", "content": "What is the crane reset code?"}],
                                                extra_body={"strategy": "lc"})
        chunks = list(stream)
        assert chat_text(chunks) == "7781"
        assert chunks[-1].usage.prompt_tokens > reply.usage.prompt_tokens  # LC read the whole document
        finish = next(c for c in chunks if c.choices and c.choices[0].finish_reason == "stop")
        assert finish.model_extra["lcrag"]["route"] == "lc"


def test_native_ask_plain_and_streamed(service, tmp_path):
    server, _ = service()
    with server as url:
        ops_collection(url, tmp_path)
        body = httpx.post(f"{url}/v1/ask", json={"collection": "ops", "question": "Crane reset code?"}, timeout=60).json()
        assert body["text"] == "7781" and body["sources"][0]["section"] == ["Crane Controls"]
        assert body["sources"][0]["file"] == "crane.pdf"  # the uploaded name, not a path on the server
        assert body["cost"]["priced_as"] == "gpt-4o-mini" and body["timings"]
        with httpx.stream("POST", f"{url}/v1/ask", json={"collection": "ops", "question": "Crane reset code?",
                                                          "stream": True}, timeout=60) as r:
            events = [line.removeprefix("event: ") for line in r.iter_lines() if line.startswith("event: ")]
        assert events == ["started", "retrieved", "call", "token", "answer"]
        metrics = httpx.get(f"{url}/metrics").text
        assert 'lcrag_routes_total{route="rag"} 2.0' in metrics and "lcrag_tokens_total" in metrics


@pytest.mark.parametrize("method, path, body, status, message", [
    ("post", "/v1/chat/completions", {"model": "lcrag/nope", "messages": [{"role": "user", "content": "q"}]}, 404, "unknown collection 'nope'"),
    ("post", "/v1/chat/completions", {"model": "gpt-4", "messages": [{"role": "user", "content": "q"}]}, 404, "unknown model"),
    ("post", "/v1/chat/completions", {"model": "lcrag/ops", "messages": []}, 422, "messages"),
    ("post", "/v1/chat/completions", {"model": "lcrag/ops", "messages": [{"role": "user", "content": "q"}], "k": 0}, 422, "k"),
    ("post", "/v1/chat/completions", {"model": "lcrag/ops", "messages": [{"role": "user", "content": "q"}], "strategy": "magic"}, 400, "strategy"),
    ("post", "/v1/ask", {"collection": "ops", "question": "  "}, 400, "the question is empty"),
    ("post", "/v1/ask", {"collection": "ops", "question": "q", "temperature": 2}, 422, "temperature: Extra inputs"),
    ("post", "/v1/collections", {"name": "../etc"}, 400, "collection names"),
    ("get", "/v1/collections/nope", None, 404, "unknown collection"),
    ("delete", "/v1/collections/nope", None, 404, "unknown collection"),
    ("get", "/v1/collections/ops/files/..%2Fcollection.json", None, 404, ""),
    ("get", "/v1/collections/ops/files/.upload-x", None, 404, "no file"),
])
def test_bad_requests_get_json_errors_with_their_status(service, tmp_path, method, path, body, status, message):
    server, _ = service()
    with server as url:
        ops_collection(url, tmp_path)
        response = httpx.request(method.upper(), url + path, json=body)
        assert response.status_code == status, response.text
        assert message in response.json()["error"]["message"]


def test_malformed_json_uploads_and_limits(service, tmp_path):
    server, _ = service(max_upload=2000)
    with server as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        bad = httpx.post(f"{url}/v1/ask", content=b"{not json", headers={"content-type": "application/json"})
        assert bad.status_code == 422 and "JSON decode error" in bad.json()["error"]["message"]
        big = tmp_path / "big.txt"
        big.write_text("word " * 5000)
        assert upload(url, "ops", big).status_code == 413
        sneaky = httpx.post(f"{url}/v1/collections/ops/files", files={"file": ("../../evil.txt", b"hello world")})
        assert sneaky.status_code == 201 and sneaky.json()["name"] == "evil.txt"
        assert not (tmp_path / "evil.txt").exists() and (tmp_path / "collections/ops/files/evil.txt").exists()
        assert not [p for p in (tmp_path / "collections/ops/files").iterdir() if p.name.startswith(".upload")]
        refused = httpx.post(f"{url}/v1/collections/ops/files", files={"file": ("tool.exe", b"MZ")})
        assert refused.status_code == 400 and "not a format" in refused.json()["error"]["message"]


def test_the_api_key_is_required_when_set(service, tmp_path):
    server, _ = service(api_key="s3cret")
    with server as url:
        assert httpx.get(f"{url}/healthz").status_code == 200
        denied = httpx.get(f"{url}/v1/models")
        assert denied.status_code == 401 and denied.json()["error"]["type"] == "authentication_error"
        assert httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_refused_requests_are_labelled_by_route_never_by_raw_path(service, tmp_path):
    """Unauthenticated requests to random paths must not grow /metrics (a label per raw path would)."""
    server, _ = service(api_key="s3cret")
    with server as url:
        for i in range(50):
            assert httpx.get(f"{url}/random-{i}/x").status_code == 401
        assert httpx.get(f"{url}/v1/collections/c{i}").status_code == 401
        metrics = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer s3cret"}).text
        assert "random-" not in metrics and "/v1/collections/c49" not in metrics
        assert 'path="unmatched",status="401"} 50.0' in metrics
        assert 'path="/v1/collections/{name}",status="401"} 1.0' in metrics


def test_an_overloaded_service_answers_429_with_retry_after(service, tmp_path):
    release, started = threading.Event(), threading.Event()

    def slow(messages):
        started.set()
        release.wait(30)
        return "7781"

    server, _ = service(answer=slow, max_waiting=1)
    with server as url:
        ops_collection(url, tmp_path)
        body = {"collection": "ops", "question": "Crane reset code?"}
        first = threading.Thread(target=lambda: httpx.post(f"{url}/v1/ask", json=body, timeout=60))
        first.start()
        assert started.wait(30)  # the first question holds the reader
        busy = httpx.post(f"{url}/v1/ask", json=body, timeout=60)
        release.set()
        first.join()
        assert busy.status_code == 429 and busy.headers["retry-after"] == "5"


def test_collections_survive_a_restart(service, tmp_path):
    server, _ = service()
    with server as url:
        ops_collection(url, tmp_path)
    server, _ = service()
    with server as url:
        assert [c["name"] for c in httpx.get(f"{url}/v1/collections").json()["data"]] == ["ops"]
        body = httpx.post(f"{url}/v1/ask", json={"collection": "ops", "question": "Crane reset code?"}, timeout=60)
        assert body.json()["sources"][0]["pages"] == ["6"]
        assert httpx.delete(f"{url}/v1/collections/ops").status_code == 200
        assert httpx.get(f"{url}/v1/models").json()["data"] == []


def test_the_page_is_served():
    from importlib.resources import files

    page, script = ((files("lcrag.service") / "web" / name).read_text() for name in ("index.html", "app.js"))
    assert "<label for=\"question\">" in page and '<script src="/app.js">' in page and "/v1/ask" in script


def test_a_question_whose_client_left_while_queued_is_never_generated(service, tmp_path):
    release, started, seen = threading.Event(), threading.Event(), []

    def slow(messages):
        seen.append(messages[-1]["content"][-40:])
        started.set()
        release.wait(30)
        return "7781"

    server, _ = service(answer=slow)
    with server as url:
        ops_collection(url, tmp_path)
        first = threading.Thread(target=lambda: httpx.post(f"{url}/v1/ask", json={
            "collection": "ops", "question": "Crane reset code?"}, timeout=60))
        first.start()
        assert started.wait(30)
        with pytest.raises(httpx.ReadTimeout):  # this client gives up while the first question holds the reader
            httpx.post(f"{url}/v1/ask", json={"collection": "ops", "question": "Which valves leak?"}, timeout=1)
        threading.Event().wait(1)  # the service notices the disconnect (it polls every 0.2 s)
        release.set()
        first.join()
        threading.Event().wait(1)
        assert len(seen) == 1  # the second question was dropped from the queue, never sent to the reader
        assert "lcrag_cancelled_total 1.0" in httpx.get(f"{url}/metrics").text


def sse_events(response) -> list[tuple[str, dict]]:
    events, name = [], None
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            events.append((name, json.loads(line.removeprefix("data: "))))
    return events


def test_self_route_streams_its_stages_and_the_chat_stream_only_the_final_answer(service, tmp_path):
    def answer(messages):  # the RAG step (asked to write "unanswerable" when it cannot answer) declines; LC answers
        return "unanswerable" if '"unanswerable"' in messages[-1]["content"] else "7781"

    server, _ = service(answer=answer)
    with server as url:
        ops_collection(url, tmp_path)
        with httpx.stream("POST", f"{url}/v1/ask", json={"collection": "ops", "question": "Crane reset code?",
                                                          "strategy": "self-route", "stream": True}, timeout=60) as r:
            events = sse_events(r)
        kinds = [k for k, _ in events]
        assert kinds == ["started", "retrieved", "call", "token", "routed", "call", "token", "answer"]
        retrieved = events[1][1]
        assert retrieved["chunks"][0]["file"].endswith("crane.pdf") and retrieved["chunks"][0]["pages"]
        assert events[3][1] == {"text": "unanswerable", "stage": "route", "provisional": True}
        assert events[4][1]["fallback"] is True and events[4][1]["route"] == "lc"
        assert events[6][1] == {"text": "7781", "stage": "answer", "provisional": False}
        assert events[-1][1]["route"] == "lc" and events[-1][1]["text"] == "7781"
        assert chat_text(streamed_chat(url, strategy="self-route")) == "7781"  # not the decline


def test_a_kept_first_step_is_sent_once_the_route_is_known(service, tmp_path):
    server, _ = service(answer=lambda m: "7781")  # the RAG step answers: Self-Route keeps it
    with server as url:
        ops_collection(url, tmp_path)
        chunks = streamed_chat(url, strategy="self-route")
        assert chat_text(chunks) == "7781"
        finish = next(c for c in chunks if c.choices and c.choices[0].finish_reason == "stop")
        assert finish.model_extra["lcrag"]["route"] == "rag"


def test_a_reader_failure_mid_stream_is_an_error_event(service, tmp_path):
    from lcrag.errors import ReaderError

    def broken(messages):
        raise ReaderError("http://reader/v1/chat/completions answered 500: boom")

    server, _ = service(answer=broken)
    with server as url:
        ops_collection(url, tmp_path)
        with httpx.stream("POST", f"{url}/v1/ask", json={"collection": "ops", "question": "Crane reset code?",
                                                          "stream": True}, timeout=60) as r:
            assert r.status_code == 200
            events = sse_events(r)
        assert events[-1][0] == "error" and events[-1][1]["error"]["code"] == 502
        assert "boom" in events[-1][1]["error"]["message"]
        plain = httpx.post(f"{url}/v1/ask", json={"collection": "ops", "question": "Crane reset code?"}, timeout=60)
        assert plain.status_code == 502 and "boom" in plain.json()["error"]["message"]


def test_a_request_names_a_router_never_a_server_path(service, tmp_path):
    """`router` is a name among the routers the server offers (the shipped ones, `--router NAME=FILE`): a path, a
    device or a FIFO is refused with 400 before anything is opened."""
    server, _ = service()
    with server as url:
        ops_collection(url, tmp_path)
        for value in ("/dev/zero", str(tmp_path), "../../etc/passwd", 7):
            refused = httpx.post(f"{url}/v1/ask", json={"collection": "ops", "question": "Crane reset code?",
                                                         "strategy": "self-route", "router": value}, timeout=60)
            if value == 7:  # not even a string: the body's type check refuses it
                assert refused.status_code == 422 and "router" in refused.json()["error"]["message"]
                continue
            assert refused.status_code == 400, refused.text
            assert "routers this server offers (lara)" in refused.json()["error"]["message"]
        assert httpx.get(f"{url}/v1/routers").json()["data"] == ["lara"]
        routed = httpx.post(f"{url}/v1/ask", json={"collection": "ops", "question": "Crane reset code?",
                                                    "strategy": "self-route", "router": "lara"}, timeout=60)
        assert routed.status_code == 200, routed.text
        assert routed.json()["route"] in ("rag", "lc")


def test_serve_checks_the_operators_routers(tmp_path):
    from lcrag.cli_serve import named_routers
    from lcrag.errors import LcragError

    assert named_routers([]) == {}
    with pytest.raises(LcragError, match="NAME=FILE"):
        named_routers(["lara"])
    with pytest.raises(LcragError, match="not a router file"):
        named_routers([f"mine={tmp_path / 'missing.json'}"])


def test_a_json_body_over_the_limit_is_413_and_never_echoed(service, tmp_path):
    """Read as it streams (no Content-Length needed) and stopped at the limit; errors quote at most a prefix."""
    server, _ = service()
    with server as url:
        huge = b'{"collection": "ops", "question": "' + b"q" * (2 << 20) + b'"}'

        def chunks():  # chunked transfer: no Content-Length to refuse it by
            for i in range(0, len(huge), 1 << 16):
                yield huge[i:i + (1 << 16)]

        refused = httpx.post(f"{url}/v1/ask", content=chunks(), headers={"content-type": "application/json"})
        assert refused.status_code == 413 and "byte limit" in refused.json()["error"]["message"]
        assert len(refused.content) < 1000
        ops_collection(url, tmp_path)
        long_key = httpx.post(f"{url}/v1/ask", json={"collection": "ops", "question": "q", "x" * 100_000: 1})
        assert long_key.status_code == 422 and len(long_key.content) < 1000
