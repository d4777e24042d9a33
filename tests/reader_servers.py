"""OpenAI-compatible reader servers for the tests of a pool of readers (lcrag.readers.pool) and its benchmark:

- :class:`Stub`, the one stand-in reader on loopback (the tests, and the benchmarks of what surrounds the reader, which
  import it) with llama.cpp's /tokenize, /detokenize and /props, /v1/models, and a prefix cache like
  llama.cpp's — the cached tokens it reports are those its recent prompts share with the new prompt's start, a token
  being a word with the spaces before it — that can fail on purpose (a status for every request, streams cut after
  some tokens), hold one request unanswered, be killed (its port refuses, its open connections are cut) and start
  again on its port, stream slowly (``token_delay``) and count the streams its client closed before their end
  (``streams_closed``: a cancelled question's);
- :func:`llama_server`, a real llama.cpp server (xllamacpp, the build the embedded reader runs) serving a GGUF in a
  process of its own, to be killed with SIGKILL:

    python tests/reader_servers.py [--model PATH] [--threads N] [--ctx N]   # prints its base URL, serves until killed
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PIECES = re.compile(r"\s*\S+|\s+")


class Stub:
    """An OpenAI-compatible server whose answer is ``answer`` of the last message (default :func:`answer_of`),
    streamed a word a token; ``delay`` seconds before each answer; ``fail_status``: the status of every request while
    set; ``cut_after``: a streamed answer is cut (the connection torn down) after this many tokens while set;
    ``hold_at``: the chat request of that number (1-based) is left unanswered, ``holding`` set, until ``release``
    is set (a test kills its client meanwhile); ``token_delay``: seconds between two streamed tokens (a long
    answer); ``streams_closed``: streamed answers whose client closed the connection before their end."""

    def __init__(self, port: int = 0, cache_prompts: int = 16, answer: Callable[[str], str] | None = None,
                 hold_at: int | None = None):
        self.answer = answer or answer_of
        self.hold_at = hold_at
        self.holding, self.release = threading.Event(), threading.Event()
        self.delay = 0.0
        self.token_delay = 0.0
        self.streams_closed = 0
        self.fail_status: int | None = None
        self.cut_after: int | None = None
        self.cache_prompts = cache_prompts
        self.chats: list[str] = []  # the prompts it answered (or began to)
        self.reported: list[dict] = []  # the usage it reported for each
        self.lock = threading.Lock()
        self._cache: list[list[str]] = []
        self.pieces: dict[int, str] = {}  # what /detokenize turns an id back into: the pieces /tokenize gave out
        self._connections: set[socket.socket] = set()
        self._server: ThreadingHTTPServer | None = None
        self.port = port
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        """Serve (again) on its port."""
        server = ThreadingHTTPServer(("127.0.0.1", self.port), _Handler)
        server.stub = self  # type: ignore[attr-defined]
        server.daemon_threads = True
        server.handle_error = lambda request, address: None  # a client gone mid-answer: a killed pool's doing
        self.port = server.server_address[1]
        self._server = server
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()

    def kill(self) -> None:
        """Stop as a killed process does: the port refuses and every open connection is cut."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        with self.lock:
            connections, self._connections = list(self._connections), set()
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def track(self, connection: socket.socket, open_: bool) -> None:
        with self.lock:
            (self._connections.add if open_ else self._connections.discard)(connection)

    def usage(self, prompt: str) -> dict:
        """Prompt tokens, and those its cache held (at least the last token is computed, as llama.cpp does); the
        prompt is recorded, and held when it is the ``hold_at``-th."""
        tokens = PIECES.findall(prompt)
        with self.lock:
            cached = max((_common_prefix(tokens, seen) for seen in self._cache), default=0)
            self._cache = [tokens, *self._cache][: self.cache_prompts]
            usage = {"prompt_tokens": len(tokens), "completion_tokens": 4,
                     "prompt_tokens_details": {"cached_tokens": min(cached, len(tokens) - 1)}}
            self.chats.append(prompt)
            self.reported.append(usage)
            held = len(self.chats) == self.hold_at
        if held:
            self.holding.set()
            self.release.wait(300)
        return usage


def _common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def answer_of(prompt: str) -> str:
    """``the answer is`` and the last word of the prompt's question (its line after the last ``Question:``)."""
    question = prompt.rsplit("Question:", 1)[-1].split("\n")[0].split()
    return "the answer is " + (question[-1] if question else "nothing")


def closest_line(prompt: str) -> str:
    """The last word of the prompt's line sharing most words with its question (an answer found in the context)."""
    question = set(prompt.rsplit("Question:", 1)[-1].split("\n")[0].lower().split())
    lines = [line for line in prompt.split("\n") if line.strip() and "Question:" not in line] or ["unanswerable"]
    best = max(lines, key=lambda line: len(set(line.lower().split()) & question))
    return best.split()[-1].strip(".")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # streams are chunked, as llama.cpp's are: a cut one is an error, not an end
    # Each event is its own small write, sent at once as a real server's are (TCP_NODELAY): with Nagle's algorithm
    # the second write waited for the client's delayed ACK, 40 ms added to every streamed answer.
    disable_nagle_algorithm = True

    @property
    def stub(self) -> Stub:
        return self.server.stub

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        self.stub.track(self.connection, True)

    def finish(self):
        self.stub.track(self.connection, False)
        super().finish()

    def _json(self, data: dict, status: int = 200) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self):
        if self.stub.fail_status:
            return self._json({"error": "failing"}, self.stub.fail_status)
        if self.path == "/props":
            return self._json({"default_generation_settings": {"n_ctx": 8192}})
        if self.path == "/v1/models":
            return self._json({"data": [{"id": "stub", "max_model_len": 8192}]})
        return self._json({}, 404)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.stub.fail_status:
            return self._json({"error": "failing"}, self.stub.fail_status)
        if self.path == "/tokenize":
            pieces = PIECES.findall(body["content"])
            ids = [sum(map(ord, p)) for p in pieces]  # the same on every stub: a pool's servers share a vocabulary
            with self.stub.lock:
                for i, piece in zip(ids, pieces):
                    self.stub.pieces.setdefault(i, piece)  # anagrams share an id: the first one is kept
            tokens = [{"id": i, "piece": p} for i, p in zip(ids, pieces)] if body.get("with_pieces") else ids
            return self._json({"tokens": tokens})
        if self.path == "/detokenize":
            with self.stub.lock:
                return self._json({"content": "".join(self.stub.pieces.get(i, "") for i in body["tokens"])})
        if self.path == "/v1/chat/completions":
            return self._complete(body)
        return self._json({}, 404)

    def _complete(self, body: dict) -> None:
        prompt = "\n".join(m["content"] for m in body["messages"])
        usage = self.stub.usage(prompt)
        time.sleep(self.stub.delay)
        text = self.stub.answer(body["messages"][-1]["content"])
        if not body.get("stream"):
            return self._json({"choices": [{"message": {"content": text}}], "usage": usage,
                               "system_fingerprint": "stub-1"})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        words = PIECES.findall(text)
        events = [{"choices": [{"delta": {"content": w}}]} for w in words] + [{"choices": [], "usage": usage}]
        try:
            for n, event in enumerate(events):
                if self.stub.cut_after is not None and n == self.stub.cut_after:
                    self.connection.shutdown(socket.SHUT_RDWR)  # mid-stream, without the last chunk
                    return
                self._chunk(f"data: {json.dumps(event)}\n\n".encode())
                time.sleep(self.stub.token_delay)
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
        except OSError:  # the client closed the stream (a cancel): counted, as a server notices it on its next write
            with self.stub.lock:
                self.stub.streams_closed += 1
            raise

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def llama_server(threads: int = 1, ctx: int = 4096, model: str | None = None,
                 timeout: float = 120) -> tuple[subprocess.Popen, str]:
    """A real llama.cpp server in a process of its own (this file run as a script), and its base URL (``.../v1``)
    once it answers; kill the process to stop it."""
    command = [sys.executable, str(Path(__file__).resolve()), "--threads", str(threads), "--ctx", str(ctx)]
    process = subprocess.Popen(command + (["--model", model] if model else []), stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(process.stdout.readline().strip()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not found or not found[0].startswith("http"):
        process.kill()
        raise RuntimeError(f"the llama.cpp server did not start within {timeout} s")
    return process, found[0] + "/v1"


def _serve_llama(args: argparse.Namespace) -> None:
    import os

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import xllamacpp

    from lcrag.core import bundled_models

    params = xllamacpp.CommonParams()
    params.model.path = args.model or str(bundled_models.smollm2_gguf())
    params.n_ctx = args.ctx
    params.n_parallel = 1
    params.port = 0
    params.verbosity = 0
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    server = xllamacpp.Server(params)
    print(server.listening_address, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="A llama.cpp server serving a GGUF (default: the bundled model).")
    parser.add_argument("--model")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ctx", type=int, default=4096)
    _serve_llama(parser.parse_args())
