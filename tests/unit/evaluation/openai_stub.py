"""A deterministic OpenAI-compatible reader on loopback (chat completions, /tokenize, /props) that records every
prompt it is sent and can hold one request unanswered: the eval tests' stand-in for a reader server."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Stub:
    def __init__(self, hold_at: int | None = None):
        self.chat_requests = []
        self.lock = threading.Lock()
        self.hold_at = hold_at  # the request number (1-based) left unanswered until `release` is set
        self.holding = threading.Event()
        self.release = threading.Event()

    def answer(self, prompt: str) -> str:
        # deterministic: the last word of the context line that shares most words with the question
        question = prompt.rsplit("Question:", 1)[-1].split("\n")[0].lower()
        lines = [line for line in prompt.split("\n") if line.strip() and "Question:" not in line]
        best = max(lines, key=lambda line: len(set(line.lower().split()) & set(question.split())))
        return best.split()[-1].strip(".")


def serve(stub):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, data, status=200):
            payload = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self):
            if self.path == "/props":
                return self._send({"default_generation_settings": {"n_ctx": 4096}})
            self._send({}, 404)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/tokenize":
                words = body["content"].split(" ")
                return self._send({"tokens": [hash(w) % 50000 for w in words]})
            if self.path == "/v1/chat/completions":
                prompt = body["messages"][-1]["content"]
                with stub.lock:
                    stub.chat_requests.append(prompt)
                    held = len(stub.chat_requests) == stub.hold_at
                if held:
                    stub.holding.set()
                    stub.release.wait(300)
                text = stub.answer(prompt)
                try:
                    return self._send({"choices": [{"message": {"content": text}}],
                                       "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": 1}})
                except (BrokenPipeError, ConnectionResetError):
                    return None  # the client was killed while this request was held
            self._send({}, 404)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
