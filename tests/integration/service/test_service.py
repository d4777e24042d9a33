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

from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.service.answering import Answering
from lcrag.service.http.app import create_app
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


def test_healthz_is_liveness_and_looks_nothing_up_readyz_counts_the_collections_for_the_key(service, tmp_path):
    """Issue 42: /healthz needs no key and tells nothing of the collections. Issue 43: it is liveness and never looks
    up the store (a stuck store does not hold it); /readyz, readiness, asks the store in a thread, bounded: without
    the key only whether it is ready, with it each part and the number of collections."""
    server, answering = service(api_key="s3cret")
    key = {"Authorization": "Bearer s3cret"}
    with server as url:
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"}, headers=key).status_code == 201
        assert httpx.get(f"{url}/healthz").json() == {"status": "ok"}
        assert httpx.get(f"{url}/healthz", headers={"Authorization": "Bearer wrong"}).json() == {"status": "ok"}
        assert httpx.get(f"{url}/healthz", headers=key).json() == {"status": "ok"}
        assert httpx.get(f"{url}/readyz").json() == {"status": "ready"}
        ready = httpx.get(f"{url}/readyz", headers=key).json()
        assert ready["status"] == "ready" and ready["collections"] == 1 and ready["store"]["status"] == "ok", ready
        stuck, names = threading.Event(), answering.collections.names
        answering.collections.names = lambda: stuck.wait(30) and names()
        try:
            for _ in range(3):  # the store stuck: liveness answers at once, readiness says no within its bound
                assert httpx.get(f"{url}/healthz", timeout=5).json() == {"status": "ok"}
            not_ready = httpx.get(f"{url}/readyz", headers=key, timeout=10)
            assert not_ready.status_code == 503 and not_ready.json()["store"]["status"] == "down", not_ready.text
            assert httpx.get(f"{url}/readyz", timeout=10).json() == {"status": "not ready"}
        finally:
            stuck.set()
    server, _ = service()
    with server as url:  # no key set: everyone is told
        assert httpx.get(f"{url}/readyz").json()["collections"] == 1


def test_refused_requests_are_labelled_by_route_never_by_raw_path(service, tmp_path):
    """Unauthenticated requests to random paths must not grow /metrics (a label per raw path would)."""
    server, _ = service(api_key="s3cret")
    with server as url:
        for i in range(50):
            assert httpx.get(f"{url}/random-{i}/x").status_code == 401
        assert httpx.get(f"{url}/v1/collections/c{i}").status_code == 401
        metrics = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer s3cret"}).text
        assert "random-" not in metrics and "/v1/collections/c49" not in metrics
        assert 'path="unmatched",status="401"} 50.0' in metrics, [m for m in metrics.splitlines() if "requests_total" in m]
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

    page, script = ((files("lcrag.service.http") / "web" / name).read_text() for name in ("index.html", "app.js"))
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
    from lcrag.core.errors import ReaderError

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
    from lcrag.cli.engine import named_routers
    from lcrag.core.errors import LcragError

    assert named_routers([]) == {}
    with pytest.raises(LcragError, match="NAME=FILE"):
        named_routers(["lara"])
    with pytest.raises(LcragError, match="not a router file"):
        named_routers([f"mine={tmp_path / 'missing.json'}"])
    # a bare name is the shipped router's, kept by its name (never this directory's folder of that name)
    assert named_routers(["team=lara"]) == {"team": "lara"}
    with pytest.raises(LcragError, match="not a router shipped with lcrag"):
        named_routers(["team=nosuch"])


def test_a_folder_called_lara_in_the_servers_directory_does_not_hide_the_shipped_router(service, tmp_path,
                                                                                         monkeypatch):
    """Issue 44: `"router": "lara"` was "lara: not a router file (Is a directory)" beside a folder `lara`."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lara").mkdir()
    server, _ = service()
    with server as url:
        ops_collection(url, tmp_path)
        routed = httpx.post(f"{url}/v1/ask", json={"collection": "ops", "question": "Crane reset code?",
                                                    "strategy": "self-route", "router": "lara"}, timeout=60)
        assert routed.status_code == 200, routed.text
        assert routed.json()["route"] in ("rag", "lc")


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


# -- issue 25: the service under attack and misuse ----------------------------------------------------------------
def test_uploaded_files_are_served_inert_and_the_page_runs_only_its_own_script(service, tmp_path):
    """Stored XSS: an uploaded HTML page is a download in a sandbox, never a page on the service's origin; text and
    PDFs show inline as types that run no script; the page itself allows only its own script and style."""
    server, _ = service()
    with server as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        evil = b"<html><body><p>The crane reset code is 7781.</p><script>alert(opener.document.cookie)</script></body></html>"
        assert httpx.post(f"{url}/v1/collections/ops/files", files={"file": ("evil.html", evil)}).status_code == 201
        served = httpx.get(f"{url}/v1/collections/ops/files/evil.html")
        assert served.status_code == 200 and served.content == evil
        assert "text/html" not in served.headers["content-type"]
        assert served.headers["content-disposition"].startswith("attachment")
        assert served.headers["x-content-type-options"] == "nosniff"
        assert "sandbox" in served.headers["content-security-policy"]
        httpx.post(f"{url}/v1/collections/ops/files", files={"file": ("notes.txt", b"plain words")})
        text = httpx.get(f"{url}/v1/collections/ops/files/notes.txt")
        assert text.headers["content-type"].startswith("text/plain") and "sandbox" in text.headers["content-security-policy"]
        upload(url, "ops", manual(tmp_path))
        pdf = httpx.get(f"{url}/v1/collections/ops/files/crane.pdf")
        assert pdf.headers["content-type"] == "application/pdf" and pdf.headers["content-disposition"].startswith("inline")
        page = httpx.get(url + "/")
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
        assert "<script>" not in page.text and httpx.get(url + "/app.js").status_code == 200


def test_cross_site_writes_and_foreign_host_names_are_refused(service, tmp_path):
    """CSRF and DNS rebinding against the default no-key loopback server."""
    server, _ = service(cors_origins=("https://app.example",))
    with server as url:
        evil = {"Origin": "https://evil.example", "Content-Type": "text/plain"}
        forged = httpx.post(f"{url}/v1/collections", content=b'{"name": "pwned"}', headers=evil)
        assert forged.status_code == 403 and "cross-site" in forged.json()["error"]["message"]
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"},
                          headers={"Origin": "https://evil.example"}).status_code == 403
        assert httpx.post(f"{url}/v1/collections", json={"name": "ops"},
                          headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
        assert httpx.post(f"{url}/v1/collections", content=b'{"name": "ops"}',
                          headers={"Content-Type": "text/plain"}).status_code == 415
        assert upload(url, "ops", manual(tmp_path), headers={"Origin": "null"}).status_code == 403
        rebound = httpx.get(f"{url}/v1/collections", headers={"Host": "attacker.example"})
        assert rebound.status_code == 400 and "--allowed-host" in rebound.json()["error"]["message"]
        assert httpx.get(url.replace("127.0.0.1", "localhost") + "/v1/collections").status_code == 200
        same = httpx.post(f"{url}/v1/collections", json={"name": "ops"}, headers={"Origin": url})
        assert same.status_code == 201
        allowed = httpx.post(f"{url}/v1/collections", json={"name": "app"}, headers={"Origin": "https://app.example"})
        assert allowed.status_code == 201 and allowed.headers["access-control-allow-origin"] == "https://app.example"
        assert httpx.get(f"{url}/v1/collections").json()["data"][0]["name"] == "app"  # "pwned" was never made


def test_a_chunked_upload_is_stopped_at_the_limit_as_it_streams(service, tmp_path):
    """No Content-Length to refuse it by: the server stops reading at the limit instead of spooling it all."""
    server, _ = service(max_upload=1 << 20)
    with server as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        sent = []

        def body():  # a multipart body of 150 MB, sent chunked
            yield b'--b\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n\r\n'
            for _ in range(150 * 16):
                sent.append(1)
                yield b"word " * (65536 // 5)
            yield b"\r\n--b--\r\n"

        try:
            refused = httpx.post(f"{url}/v1/collections/ops/files", content=body(), timeout=60,
                                 headers={"Content-Type": "multipart/form-data; boundary=b"})
            assert refused.status_code == 413 and "--max-upload-mb" in refused.json()["error"]["message"]
        except httpx.TransportError:  # the server closed the connection after its 413, mid-body
            pass
        assert len(sent) < 16 * 8, f"the client got to send {len(sent) / 16:.0f} MB"  # 1 MB + socket buffers
        assert httpx.get(f"{url}/v1/collections/ops").json()["files"] == []


def test_the_queue_refuses_with_429_and_uploads_never_wait_behind_it(service, tmp_path):
    """Ten slow questions with room for three waiting: the rest get 429 at once; an upload is answered meanwhile."""
    import concurrent.futures
    import time

    release = threading.Event()
    server, _ = service(answer=lambda m: release.wait(30) and "7781", max_waiting=3)
    with server as url:
        ops_collection(url, tmp_path)
        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            asks = [pool.submit(httpx.post, f"{url}/v1/ask", json={"collection": "ops", "question": f"q{i}?"},
                                timeout=60) for i in range(10)]
            deadline = time.monotonic() + 60  # a hang guard
            while sum(a.done() for a in asks) < 7:  # the seven past the queue's room are refused at once
                assert time.monotonic() < deadline
                time.sleep(0.01)
            small = httpx.post(f"{url}/v1/collections/ops/files", files={"file": ("tiny.txt", b"a tiny note")},
                               timeout=60)
            held = sum(not a.done() for a in asks)  # questions still waiting when the upload was answered
            release.set()
            statuses = sorted(a.result().status_code for a in asks)
        assert small.status_code == 201 and held == 3, held
        assert statuses.count(429) == 7 and statuses.count(200) == 3, statuses


def test_operator_limits_cap_what_one_request_costs(service, tmp_path):
    server, _ = service(max_tokens=256, max_question_chars=1000, strategies=("rag", "op-rag"))
    with server as url:
        ops_collection(url, tmp_path)
        ask = {"collection": "ops", "question": "Crane reset code?"}
        for extra, flag in (({"max_tokens": 100_000}, "--max-tokens"), ({"strategy": "lc"}, "--strategies"),
                            ({"question": "word " * 200_000}, "--max-question-chars")):
            refused = httpx.post(f"{url}/v1/ask", json=ask | extra, timeout=60)
            assert refused.status_code == 400 and flag in refused.json()["error"]["message"], refused.text
            assert len(refused.content) < 1000
        chat = {"model": "lcrag/ops", "messages": [{"role": "user", "content": "Crane reset code?"}]}
        assert httpx.post(f"{url}/v1/chat/completions", json=chat | {"max_tokens": 100_000}).status_code == 400
        assert httpx.post(f"{url}/v1/ask", json=ask | {"max_tokens": 200}, timeout=60).status_code == 200


@pytest.mark.parametrize("raw", [
    b'{"collection": "ops", "question": "q", "k": [1]}',
    b'{"collection": "ops", "question": "q", "k": {}}',
    b'{"collection": "ops", "question": "q", "strategy": ["rag"]}',
    b'{"collection": "ops", "question": "q", "router": 123}',
    b'{"collection": "ops", "question": "q", "k": ' + b"9" * 5000 + b"}",
    b'{"collection": "ops", "question": "q", "k": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"collection": "ops", "question": "q", "stream": "false"}',
    b'{"collection": "ops", "question": "q", "stream": true, "stream_options": "x"}',
    b'{"collection": ["ops"], "question": "q"}',
    b'{"collection": "ops", "question": null}',
])
def test_bodies_of_the_wrong_shape_are_4xx_never_500(service, tmp_path, raw):
    server, _ = service()
    with server as url:
        ops_collection(url, tmp_path)
        for path in ("/v1/ask", "/v1/chat/completions"):
            body = raw if path == "/v1/ask" else raw.replace(b'"collection": "ops"', b'"model": "lcrag/ops"') \
                .replace(b'"collection": ', b'"model": ').replace(b'"question": "q"', b'"messages": [{"role": "user", "content": "q"}]') \
                .replace(b'"question": null', b'"messages": [{"role": "user", "content": 7}]')
            response = httpx.post(url + path, content=body, headers={"content-type": "application/json"}, timeout=60)
            assert 400 <= response.status_code < 500, (path, response.text)
            assert response.json()["error"]["message"] and len(response.content) < 2000


def test_openai_content_parts_a_lowercase_bearer_and_long_file_names(service, tmp_path):
    server, _ = service(api_key="sekret")
    with server as url:
        key = {"Authorization": "bearer sekret"}
        httpx.post(f"{url}/v1/collections", json={"name": "ops"}, headers=key)
        upload(url, "ops", manual(tmp_path), headers={"Authorization": "BEARER sekret"})
        wait_ready(url, "ops", headers=key)
        parts = [{"type": "text", "text": "What is the crane"}, {"type": "text", "text": "reset code?"}]
        reply = httpx.post(f"{url}/v1/chat/completions", headers=key, timeout=60,
                           json={"model": "lcrag/ops", "messages": [{"role": "user", "content": parts}]})
        assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == "7781"
        image = [{"type": "image_url", "image_url": {"url": "data:,"}}]
        refused = httpx.post(f"{url}/v1/chat/completions", headers=key,
                             json={"model": "lcrag/ops", "messages": [{"role": "user", "content": image}]})
        assert refused.status_code == 400 and "image_url" in refused.json()["error"]["message"]
        long_name = httpx.get(f"{url}/v1/collections/ops/files/{'a' * 300}.txt", headers=key)
        assert long_name.status_code == 422
