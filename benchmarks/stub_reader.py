"""An OpenAI-compatible stand-in reader for benchmarks of what surrounds the reader (the service, the harness):
llama.cpp's /tokenize and /detokenize (whitespace pieces), /props, and /v1/chat/completions, streamed or not, answering
with the last word of the context line closest to the question after a delay the caller sets. It is never a
measure of answers.

    python benchmarks/stub_reader.py          # prints its base URL and serves until interrupted
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Reader(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), ReaderHandler)
        self.delay = 0.0
        self.pieces: dict[str, int] = {}
        self.lock = threading.Lock()

    def ids(self, pieces: list[str]) -> list[int]:
        with self.lock:
            return [self.pieces.setdefault(p, len(self.pieces)) for p in pieces]

    def text(self, ids: list[int]) -> str:
        with self.lock:
            by_id = {i: p for p, i in self.pieces.items()}
        return "".join(by_id.get(i, "") for i in ids)


def answer_of(prompt: str) -> str:
    """The last word of the context line sharing most words with the question (deterministic)."""
    question = set(prompt.rsplit("Question:", 1)[-1].split("\n")[0].lower().split())
    lines = [line for line in prompt.split("\n") if line.strip() and "Question:" not in line] or ["unanswerable"]
    best = max(lines, key=lambda line: len(set(line.lower().split()) & question))
    return best.split()[-1].strip(".")


class ReaderHandler(BaseHTTPRequestHandler):
    server: Reader

    def log_message(self, *args):
        pass

    def _json(self, data: dict, status: int = 200) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self):
        if self.path == "/props":
            return self._json({"default_generation_settings": {"n_ctx": 8192}})
        return self._json({"data": [{"id": "audit", "max_model_len": 8192}]} if self.path == "/v1/models" else {}, 
                          200 if self.path == "/v1/models" else 404)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            pieces = re.findall(r"\s*\S+|\s+", body["content"])
            ids = self.server.ids(pieces)
            tokens = [{"id": i, "piece": p} for i, p in zip(ids, pieces)] if body.get("with_pieces") else ids
            return self._json({"tokens": tokens})
        if self.path == "/detokenize":
            return self._json({"content": self.server.text(body["tokens"])})
        if self.path == "/v1/chat/completions":
            return self._complete(body)
        return self._json({}, 404)

    def _complete(self, body: dict) -> None:
        prompt = body["messages"][-1]["content"]
        time.sleep(self.server.delay)
        text = answer_of(prompt)
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": 1}
        if not body.get("stream"):
            return self._json({"choices": [{"message": {"content": text}}], "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for event in ({"choices": [{"delta": {"content": text}}]}, {"choices": [], "usage": usage}):
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


def start() -> tuple[Reader, str]:
    """A stand-in reader serving in a daemon thread, and its base URL (``.../v1``)."""
    reader = Reader()
    threading.Thread(target=reader.serve_forever, daemon=True).start()
    return reader, f"http://127.0.0.1:{reader.server_address[1]}/v1"


if __name__ == "__main__":
    _, url = start()
    print(url, flush=True)
    threading.Event().wait()
