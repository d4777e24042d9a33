"""Streaming completions against a real server on loopback that streams server-sent events on purpose: tokens reach
the listener as they arrive, the stream gathers into the same Completion, a cancel ends the connection (the server
sees it), a server that streams no usage is counted with the reader's tokenizer, an error event is a ReaderError,
and a refusal before the first event is retried."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lcrag.core.errors import ReaderError
from lcrag.readers import GenerationParams, OpenAIChatReader, streaming
from lcrag.strategies.base import QueryContext, Timer, read_completion
from lcrag.core.types import Document


class Script:
    def __init__(self, tokens, usage=True, pause=0.0, statuses=(), error_after=None):
        self.tokens, self.usage, self.pause = list(tokens), usage, pause
        self.statuses, self.error_after = list(statuses), error_after
        self.bodies: list[dict] = []
        self.written = 0
        self.disconnected = threading.Event()


def serve(script: Script) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def event(self, data: dict | str) -> None:
            line = data if isinstance(data, str) else json.dumps(data)
            self.wfile.write(f"data: {line}\n\n".encode())
            self.wfile.flush()

        def do_POST(self):
            script.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            if script.statuses:
                self.send_response(script.statuses.pop(0))
                self.send_header("Retry-After", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                self.event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]})
                for i, token in enumerate(script.tokens):
                    if i == script.error_after:
                        self.event({"error": {"message": "the model crashed", "type": "server_error"}})
                        return
                    time.sleep(script.pause)
                    self.event({"choices": [{"index": 0, "delta": {"content": token}, "logprobs": {"content": [
                        {"token": token, "logprob": -0.1, "top_logprobs": [{"token": token, "logprob": -0.1}]}]}}],
                        "system_fingerprint": "b1"})
                    script.written += 1
                if script.usage:
                    self.event({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": len(script.tokens),
                                                         "prompt_tokens_details": {"cached_tokens": 5}}})
                self.event("[DONE]")
            except (BrokenPipeError, ConnectionResetError):
                script.disconnected.set()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def reader_for():
    servers = []

    def start(script: Script) -> OpenAIChatReader:
        server = serve(script)
        servers.append(server)
        return OpenAIChatReader("m", base_url=f"http://127.0.0.1:{server.server_address[1]}", context_window=4096,
                                max_retries=2, timeout=20)

    yield start
    for server in servers:
        server.shutdown()


MESSAGES = [{"role": "user", "content": "Which valve leaks?"}]


def listen_for_tokens(events: list) -> streaming.Listener:
    return streaming.Listener(lambda kind, data: events.append((kind, data)))


def test_tokens_reach_the_listener_as_they_arrive_and_gather_into_the_completion(reader_for):
    script = Script(["The", " left", " valve"], pause=0.05)
    reader = reader_for(script)
    events, arrived = [], []
    listener = streaming.Listener(lambda kind, data: (events.append((kind, data)), arrived.append(script.written)))
    with streaming.listening(listener), streaming.answering_call("answer"):
        completion = reader.complete(MESSAGES, GenerationParams(top_logprobs=1))
    assert completion.text == "The left valve"
    assert (completion.prompt_tokens, completion.completion_tokens, completion.cached_prompt_tokens) == (9, 3, 5)
    assert [p["token"] for p in completion.logprobs] == ["The", " left", " valve"]
    assert completion.system_fingerprint == "b1"
    assert [d["text"] for k, d in events if k == "token"] == ["The", " left", " valve"]
    assert arrived[0] < 3  # the first token was told before the server had written the last
    assert script.bodies[0]["stream"] is True and script.bodies[0]["stream_options"] == {"include_usage": True}


def test_without_a_listener_the_request_is_not_streamed(reader_for):
    script = Script(["unused"])
    reader = reader_for(script)
    with pytest.raises(ReaderError):  # this scripted server only streams: a plain request gets no JSON body
        reader.complete(MESSAGES, GenerationParams())
    assert "stream" not in script.bodies[0]


def test_a_cancel_ends_the_connection_and_the_server_sees_it(reader_for):
    script = Script([f" w{i}" for i in range(400)], pause=0.02)
    reader = reader_for(script)
    listener = streaming.Listener()
    seen = []

    def on_event(kind, data):
        seen.append(data.get("text"))
        if len(seen) == 4:  # the call, then three tokens
            listener.cancelled.set()

    listener.on_event = on_event
    with streaming.listening(listener), streaming.answering_call("answer"):
        with pytest.raises(streaming.Cancelled):
            reader.complete(MESSAGES, GenerationParams(max_tokens=400))
    assert script.disconnected.wait(10)  # the server's next write found the connection gone
    assert script.written < 50


def test_a_cancelled_question_starts_no_further_call(reader_for):
    script = Script(["x"])
    reader = reader_for(script)
    listener = streaming.Listener()
    listener.cancelled.set()
    ctx = QueryContext(Document("d", "text"), reader, index=lambda: None)
    with streaming.listening(listener), pytest.raises(streaming.Cancelled):
        read_completion(ctx, "answer", MESSAGES, Timer())
    assert script.bodies == []


def test_a_stream_without_usage_is_counted_with_the_readers_tokenizer(reader_for, whitespace_tokenizer):
    script = Script(["left", " valve"], usage=False)
    reader = reader_for(script)
    reader.tokenizer = whitespace_tokenizer
    reader._can_apply_template = False
    with streaming.listening(streaming.Listener()):
        completion = reader.complete(MESSAGES, GenerationParams())
    assert completion.text == "left valve" and completion.completion_tokens == 2
    assert completion.prompt_tokens == reader.count_prompt_tokens(MESSAGES) > 0


def test_an_error_event_is_a_reader_error_and_a_refusal_before_the_first_event_is_retried(reader_for):
    broken = reader_for(Script(["a", "b", "c"], error_after=1))
    with streaming.listening(streaming.Listener()), pytest.raises(ReaderError, match="the model crashed"):
        broken.complete(MESSAGES, GenerationParams())
    busy = Script(["ok"], statuses=[503])
    with streaming.listening(streaming.Listener()):
        assert reader_for(busy).complete(MESSAGES, GenerationParams()).text == "ok"
    assert len(busy.bodies) == 2


def test_a_cached_or_unstreamed_answer_is_told_as_one_token(scripted_reader):
    events = []
    ctx = QueryContext(Document("d", "text"), scripted_reader(lambda m: " 7781 "), index=lambda: None)
    with streaming.listening(listen_for_tokens(events)):
        text, _, _ = read_completion(ctx, "answer", MESSAGES, Timer())
    assert text == "7781"
    assert events == [("call", {"stage": "answer", "provisional": False}),
                      ("token", {"text": " 7781 ", "stage": "answer", "provisional": False})]


def test_the_terminal_prints_the_final_answer_as_it_arrives():
    import io

    from lcrag.cli.stream import TerminalAnswer

    out = io.StringIO()
    live = TerminalAnswer(out)
    live.on_event("token", {"text": "unanswerable", "stage": "route", "provisional": True})  # a declined RAG draft
    live.on_event("token", {"text": " The left", "stage": "answer", "provisional": False})
    assert out.getvalue() == "The left"
    live.on_event("token", {"text": " valve", "stage": "answer", "provisional": False})
    live.finish("The left valve")
    assert out.getvalue() == "The left valve\n"
    kept = TerminalAnswer(out := io.StringIO())
    kept.on_event("token", {"text": "7781", "stage": "route", "provisional": True})
    kept.finish("7781")  # the first step's answer stood: printed once the route is known
    assert out.getvalue() == "7781\n"
