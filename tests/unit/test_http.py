"""Retry behaviour of the HTTP client against a real server on loopback that fails on purpose."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lcrag.errors import ReaderError
from lcrag.readers import GenerationParams, OpenAIChatReader, complete_many
from lcrag.readers.http import HttpClient


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
