"""Live answers with the bundled reader (llama.cpp in-process): tokens arrive one by one and gather into the same
answer as an unstreamed call; a cancel stops llama.cpp's generation (its slot goes idle with most of max_tokens
unwritten); through the service, a client that leaves mid-answer stops the generation and the next question is
answered."""

from __future__ import annotations

import json
import time

import httpx
from document_fixtures import crane_manual
from service_fixtures import running, wait_ready

from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.readers import GenerationParams, streaming
from lcrag.service.answering import Answering
from lcrag.service.http.app import create_app

COUNTING = [{"role": "user", "content": "Write the numbers from 1 to 500, separated by commas."}]


def slot_idle(base_url: str, within: float = 5.0) -> bool:
    """Whether llama.cpp's slot 0 stops processing within ``within`` seconds (GET /slots, on by default)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not httpx.get(f"{base_url}/slots", timeout=5).json()[0]["is_processing"]:
            return True
        time.sleep(0.05)
    return False


def test_tokens_stream_as_written_and_gather_into_the_unstreamed_answer(reader):
    messages = [{"role": "user", "content": "Name three colours of the rainbow."}]
    params = GenerationParams(max_tokens=24, top_logprobs=3)
    plain = reader.complete(messages, params)
    tokens = []
    listener = streaming.Listener(lambda kind, data: tokens.append(data["text"]) if kind == "token" else None)
    with streaming.listening(listener), streaming.answering_call("answer"):
        streamed = reader.complete(messages, params)
    assert len(tokens) > 5 and "".join(tokens) == streamed.text == plain.text
    assert (streamed.prompt_tokens, streamed.completion_tokens) == (plain.prompt_tokens, plain.completion_tokens)
    # The decline probability reads the first positions' candidates: the stream carries the same ones.
    assert [p["token"] for p in streamed.logprobs] == [p["token"] for p in plain.logprobs]
    assert [[c for c, _ in p["top"]] for p in streamed.logprobs] == [[c for c, _ in p["top"]] for p in plain.logprobs]


def test_a_cancel_stops_llama_cpps_generation(reader):
    listener = streaming.Listener()
    tokens = []

    def on_event(kind, data):
        if kind == "token":
            tokens.append(data["text"])
            if len(tokens) == 5:
                listener.cancelled.set()

    listener.on_event = on_event
    with streaming.listening(listener), streaming.answering_call("answer"):
        try:
            reader.complete(COUNTING, GenerationParams(max_tokens=1500))
            raise AssertionError("the generation was not cancelled")
        except streaming.Cancelled:
            pass
    # Counting to 500 takes ~1,500 tokens: a generation that went on would hold the slot for many seconds more.
    assert slot_idle(reader.base_url) and len(tokens) < 40
    after = reader.complete([{"role": "user", "content": "Say yes."}], GenerationParams(max_tokens=4))
    assert after.completion_tokens >= 1  # the reader serves the next request


def test_a_client_that_leaves_mid_answer_stops_its_generation(tmp_path):
    settings = Settings(cache=False, cache_dir=tmp_path / "cache", strategy="lc", max_tokens=1500,
                        context_window=4096)
    answering = Answering(settings, tmp_path / "collections")
    try:
        with running(create_app(answering)) as url:
            httpx.post(f"{url}/v1/collections", json={"name": "ops"})
            with open(crane_manual(tmp_path), "rb") as f:
                httpx.post(f"{url}/v1/collections/ops/files", files={"file": ("crane.pdf", f)})
            assert wait_ready(url, "ops")["state"] == "ready"
            body = {"collection": "ops", "question": COUNTING[0]["content"], "stream": True}
            tokens = 0
            with httpx.stream("POST", f"{url}/v1/ask", json=body, timeout=300) as r:
                for line in r.iter_lines():
                    if line.startswith("event: token"):
                        tokens += 1
                        if tokens == 3:
                            break  # the client leaves: the connection closes
            reader = answering.base.reader
            assert slot_idle(getattr(reader, "inner", reader).base_url, within=10)
            assert "lcrag_cancelled_total 1.0" in httpx.get(f"{url}/metrics").text
            again = httpx.post(f"{url}/v1/ask", json={"collection": "ops", "question": "What is the crane reset code?",
                                                      "max_tokens": 16}, timeout=300)
            assert again.status_code == 200 and json.loads(again.text)["route"] == "lc"
    finally:
        answering.close()
