"""A question's life in the service, shared by the native and the OpenAI-compatible routes: checked before any work,
answered in the answering pool behind the reader's queue, cancelled when its client leaves, told as events while it
runs, and counted in the metrics."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request

from lcrag.core.errors import InputError, LcragError
from lcrag.readers import streaming
from lcrag.service.answer_cache import from_cache
from lcrag.service.answering import Answering
from lcrag.service.limits import Limits
from lcrag.service.metrics import Metrics
from lcrag.core.types import Answer


class Questions:
    def __init__(self, answering: Answering, limits: Limits, metrics: Metrics):
        self.answering, self.limits, self.metrics = answering, limits, metrics

    def check(self, question: str, options: dict, history: list[dict] = (), field: str = "question") -> None:
        """Everything about a question that can be refused before any work: empty, not text, over a limit, invalid
        options. ``field``: what the request calls the question."""
        unencodable(field, question)
        unencodable("history", list(history))
        unencodable("options", options)
        if not question.strip():
            raise InputError("the question is empty")
        self.limits.check(question, options)
        self.answering.choices(options)  # validates every value as the CLI does

    async def answer(self, collection: str, question: str, options: dict, request: Request | None = None,
                     on_event: Callable[[str, Any], None] | None = None, history: list[dict] = ()) -> Answer:
        """The answer, computed in the answering pool (a question waiting for the reader never holds a thread that
        uploads need); a client that leaves (or a caller that stops waiting) cancels it: dropped from the queue, or
        its generation stopped. ``history``: the conversation the question follows."""
        self.check(question, options, history)
        listener = streaming.Listener(on_event or (lambda kind, data: None))
        watcher = asyncio.create_task(_watch(request, listener))
        try:
            answer = await asyncio.get_running_loop().run_in_executor(
                self.answering.executor, self.answering.ask, collection, question, options, listener, history)
        except (streaming.Cancelled, asyncio.CancelledError):
            self.metrics.cancelled.inc()
            raise
        finally:
            watcher.cancel()
            listener.cancelled.set()  # a caller cancelled while the thread runs: stop its generation
        self.metrics.answer(answer, self.answering.cost(answer)["total"])
        return answer

    async def live(self, collection: str, question: str, options: dict, request: Request,
                   history: list[dict] = ()) -> AsyncIterator[tuple[str, Any]]:
        """The question's events as they happen, then ``("answer", Answer)``. Waits for the question to reach the
        reader (its ``started`` event) before returning, so that a refusal (busy, unknown collection, bad
        options) is still an error response with its status; a later failure arrives as ``("error", exc)``."""
        events: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(self.answer(collection, question, options, request, lambda kind, data:
                                               loop.call_soon_threadsafe(events.put_nowait, (kind, data)), history))
        task.add_done_callback(lambda _: events.put_nowait(("done", None)))
        first = await events.get()
        if first[0] == "done":
            task.result()  # raises the refusal
        return _events(first, events, task)

    def extra(self, answer: Answer) -> dict[str, Any]:
        """What lcrag adds to an OpenAI-shaped answer: route, sources, cost, timings."""
        return {"route": answer.route, "strategy": answer.strategy, "sources": [s.to_dict() for s in answer.sources],
                "cost": self.answering.cost(answer), "timings": answer.timings,
                "decline_probability": answer.decline_probability, "conversation": answer.conversation,
                "routing": answer.routing, "from_cache": from_cache(answer)}


def unencodable(field: str, value: Any) -> None:
    """Refuse text that is not Unicode text: a lone surrogate (JSON's ``"\\ud800"``) decodes into a Python string
    but can be neither encoded, hashed for a cache key nor sent to a reader. The message names the field."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InputError(f"{field}: not valid Unicode text (a lone surrogate, {value[exc.start]!a}, at character "
                             f"{exc.start})") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            unencodable(field, key)
            unencodable(f"{field}.{key}", item)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            unencodable(f"{field}[{index}]", item)


async def _watch(request: Request | None, listener: streaming.Listener) -> None:
    while request is not None and not listener.cancelled.is_set():
        if await request.is_disconnected():
            listener.cancelled.set()
            return
        await asyncio.sleep(0.2)


async def _events(first: tuple[str, Any], events: asyncio.Queue, task: asyncio.Task):
    try:
        kind, data = first
        while kind != "done":
            yield kind, data
            kind, data = await events.get()
        yield "answer", task.result()
    except (LcragError, streaming.Cancelled) as exc:
        yield "error", exc
    finally:
        task.cancel()
