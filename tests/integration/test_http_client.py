"""Retry behaviour of the HTTP client against a real server on loopback that fails on purpose."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lcrag.core.errors import ReaderError
from lcrag.readers import GenerationParams, OpenAIChatReader, complete_many
from lcrag.core.http_client import HttpClient


class Script:
    def __init__(self, statuses):
        self.statuses = list(statuses)
        self.requests = []


def serve(script):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append((self.path, body, self.headers.get("Authorization")))
            status = script.statuses.pop(0) if script.statuses else 200
            if status != 200:
                self.send_response(status)
                self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(b"busy")
                return
            content = "echo: " + body["messages"][-1]["content"]
            data = {"choices": [{"message": {"content": content}}],
                    "usage": {"prompt_tokens": 11, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}}}
            payload = json.dumps(data).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def server_for():
    servers = []

    def start(statuses):
        script = Script(statuses)
        server = serve(script)
        servers.append(server)
        return script, f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for s in servers:
        s.shutdown()


def test_retries_429_and_5xx_then_succeeds(server_for):
    script, url = server_for([429, 503, 200])
    reader = OpenAIChatReader("m", base_url=url, api_key="secret", context_window=1000, max_retries=3)
    out = reader.complete([{"role": "user", "content": "hi"}], GenerationParams(max_tokens=7))
    assert out.text == "echo: hi"
    assert (out.prompt_tokens, out.completion_tokens, out.cached_prompt_tokens) == (11, 3, 4)
    assert len(script.requests) == 3
    path, body, auth = script.requests[-1]
    assert path == "/v1/chat/completions" and body["max_tokens"] == 7 and auth == "Bearer secret"


def test_gives_up_after_retries(server_for):
    script, url = server_for([500] * 10)
    client = HttpClient(url + "/v1", max_retries=2, backoff=0.01)
    with pytest.raises(ReaderError, match="after 3 attempts"):
        client.post_json("/chat/completions", {"messages": []})
    assert len(script.requests) == 3


def test_client_errors_are_not_retried(server_for):
    script, url = server_for([400])
    with pytest.raises(ReaderError, match="400"):
        HttpClient(url, max_retries=5).post_json("/x", {})
    assert len(script.requests) == 1


def test_unreachable_server_is_a_clear_error():
    with pytest.raises(ReaderError, match="failed after"):
        HttpClient("http://127.0.0.1:9", max_retries=1, backoff=0.01, timeout=2).post_json("/x", {})


def test_concurrent_requests_keep_order(server_for):
    _, url = server_for([])
    reader = OpenAIChatReader("m", base_url=url, context_window=1000, max_concurrency=4)
    requests = [([{"role": "user", "content": str(i)}], GenerationParams()) for i in range(12)]
    out = complete_many(reader, requests, max_concurrency=4)
    assert [c.text for c in out] == [f"echo: {i}" for i in range(12)]


def test_openai_embedder_orders_and_normalises(tmp_path):
    import numpy as np

    from lcrag.retrieval import OpenAIEmbedder

    seen = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            # answer out of order, unnormalised: the client must sort by index and normalise
            data = [{"index": i, "embedding": [float(len(t)), 0.0, 3.0]} for i, t in enumerate(body["input"])][::-1]
            payload = json.dumps({"data": data}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        emb = OpenAIEmbedder("e5", base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", batch_size=2)
        v = emb.embed(["aaaa", "", "a"])
    finally:
        server.shutdown()
    assert [b["input"] for b in seen] == [["aaaa", ""], ["a"]] and seen[0]["model"] == "e5"
    assert v.shape == (3, 3) and emb.dimension == 3
    assert np.allclose(v[0], [0.8, 0, 0.6]) and np.allclose(v[1], [0, 0, 1])


# -- defect 14: every call has a total deadline; a silent or trickling server cannot hold it --------------------------
import signal  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402

from lcrag.core.errors import OptionError  # noqa: E402
from lcrag.pipeline.pipeline import Pipeline, Settings  # noqa: E402
from lcrag.readers import make_reader  # noqa: E402
from lcrag.core.tokenization import LlamaServerTokenizer  # noqa: E402


class SilentServer:
    """A real socket on loopback that accepts connections and never answers (or trickles header bytes forever)."""

    def __init__(self, trickle: bool = False):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections: list[socket.socket] = []
        self.trickle = trickle
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections.append(conn)
            if self.trickle:
                threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn):
        # A byte every 50 ms: each one restarts a per-operation read timeout, so only a total deadline ends this.
        try:
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            while not self.stopped.wait(0.05):
                conn.sendall(b"a")
        except OSError:
            pass

    def close(self):
        self.stopped.set()
        self.listener.close()
        for conn in self.connections:
            conn.close()


@pytest.fixture
def silent_server():
    servers = []

    def start(trickle=False):
        servers.append(SilentServer(trickle))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


@pytest.fixture
def no_hang():
    """Turns a hang into a failure (the old client waited for ever on a trickling server)."""

    def hang(signum, frame):
        raise TimeoutError("the HTTP call outlived its deadline")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_silent_server_fails_at_the_deadline_without_retrying_past_it(silent_server):
    server = silent_server()
    client = HttpClient(f"http://127.0.0.1:{server.port}/v1", timeout=0.5, max_retries=5, backoff=0.01)
    with pytest.raises(ReaderError, match=r"127\.0\.0\.1:\d+/v1/chat/completions gave no answer within the 0\.5 s "
                                          r"deadline \(--timeout\)"):
        client.post_json("/chat/completions", {"messages": []})
    # The deadline covers retries: the old client tried 6 times, each with its own full timeout (about an hour).
    assert len(server.connections) == 1


def test_trickling_server_cannot_outlive_the_deadline(silent_server, no_hang):
    server = silent_server(trickle=True)
    client = HttpClient(f"http://127.0.0.1:{server.port}", timeout=0.5, max_retries=0)
    with pytest.raises(ReaderError, match="within the 0.5 s deadline"):
        client.post_json("/x", {})


def test_tokenizer_endpoint_has_the_deadline_too(silent_server, no_hang):
    server = silent_server(trickle=True)
    tokenizer = LlamaServerTokenizer(f"http://127.0.0.1:{server.port}", "m", timeout=0.5)
    with pytest.raises(ReaderError, match="tokenize gave no answer within the 0.5 s deadline"):
        tokenizer.encode("some text")


def test_timeout_setting_reaches_reader_and_embedder_and_is_checked(tmp_path):
    settings = Settings(llm="openai:m@http://127.0.0.1:9/v1", embedder="openai:e", base_url="http://127.0.0.1:9/v1",
                        timeout=7.5, context_window=1000, cache_dir=tmp_path)
    pipeline = Pipeline(settings)
    assert pipeline.reader.inner._http.timeout == 7.5
    assert pipeline.reader.tokenizer.timeout == 7.5
    assert pipeline.embedder.uncached._http.timeout == 7.5  # behind the query-vector cache
    assert make_reader("openai:m@http://127.0.0.1:9")._http.timeout == 600.0  # the documented default
    for bad in (0, -1, float("nan"), float("inf"), "10", True):
        with pytest.raises(OptionError, match=r"timeout must be a number of seconds above 0 and below 1e9"):
            Settings(timeout=bad)


# -- defect 15: credentials never appear in messages, logs or identities ----------------------------------------------
SECRET_URL_PARTS = ("hunter2", "alice", "sk-topsecret")


def assert_no_secret(text: str) -> None:
    for secret in SECRET_URL_PARTS:
        assert secret not in text, text


def test_errors_and_logs_redact_the_url_and_never_show_the_key(silent_server, server_for, caplog):
    import logging

    server = silent_server()
    url = f"http://alice:hunter2@127.0.0.1:{server.port}/v1"
    with pytest.raises(ReaderError) as late:
        HttpClient(url, api_key="sk-topsecret", timeout=0.3).post_json("/chat/completions", {})
    assert f"http://***@127.0.0.1:{server.port}/v1/chat/completions" in str(late.value)
    assert_no_secret(str(late.value))

    with caplog.at_level(logging.INFO), pytest.raises(ReaderError) as failed:
        HttpClient("http://alice:hunter2@127.0.0.1:9", api_key="sk-topsecret", max_retries=2, backoff=0.01,
                   timeout=5).post_json("/x", {})
    assert "***@127.0.0.1:9/x failed after 3 attempts" in str(failed.value)
    assert_no_secret(str(failed.value) + caplog.text)
    assert "retry 1/2" in caplog.text

    with pytest.raises(ReaderError) as bad_request:
        HttpClient("http://alice:hunter2@127.0.0.1:9", timeout=5).get_json("/props")
    assert_no_secret(str(bad_request.value))


def test_server_echoing_the_key_is_scrubbed():
    class Echo(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            body = f"bad key {self.headers.get('Authorization')}".encode()
            self.send_response(401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ReaderError, match="401: bad key Bearer \\*\\*\\*") as exc:
            HttpClient(f"http://127.0.0.1:{server.server_address[1]}", api_key="sk-topsecret").post_json("/x", {})
    finally:
        server.shutdown()
    assert_no_secret(str(exc.value))


def test_reader_and_embedder_names_are_redacted():
    from lcrag.core.errors import InputError
    from lcrag.retrieval.embedders import OpenAIEmbedder, make_embedder

    reader = make_reader("openai:llama@http://alice:hunter2@10.0.0.7:8000/v1", api_key="sk-topsecret")
    assert reader.identity == "openai:llama@http://***@10.0.0.7:8000/v1"  # host, port and path kept
    embedder = OpenAIEmbedder("e5", base_url="http://alice:hunter2@10.0.0.7:8000/v1", api_key="sk-topsecret")
    assert embedder.name == "openai:e5@http://***@10.0.0.7:8000/v1"
    for make in (make_reader, make_embedder):
        with pytest.raises(InputError) as exc:
            make("bogus:m@http://alice:hunter2@h/v1")
        assert_no_secret(str(exc.value))
