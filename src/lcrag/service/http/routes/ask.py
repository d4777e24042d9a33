"""The native ask API: ``POST /v1/ask`` answers with the whole answer object, or streams the question's stages as
named server-sent events."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from lcrag.service.access import visible
from lcrag.service.answer_cache import from_cache
from lcrag.service.answering import Answering
from lcrag.service.http.errors import error_body
from lcrag.service.http.deps import questions
from lcrag.service.questions import Questions
from lcrag.service.requests import AskRequest
from lcrag.service.http.routes.sse import sse

router = APIRouter()


@router.post("/v1/ask")
async def ask(body: AskRequest, request: Request, asked: Questions = Depends(questions)):
    engine = asked.answering
    visible(request, body.collection)  # a collection outside the key's patterns is unknown to it
    await run_in_threadpool(engine.collections.files_dir, body.collection)  # a store may be a database
    options = body.answer_options()
    if not body.stream:
        answer = await asked.answer(body.collection, body.question, options, request, history=body.conversation())
        return answered(answer, engine)
    asked.check(body.question, options, body.conversation())
    events = await asked.live(body.collection, body.question, options, request, body.conversation())
    return StreamingResponse(ask_events(events, engine), media_type="text/event-stream")


def answered(answer, answering: Answering) -> dict:
    """The whole answer object: the answer, its cost, and whether it was kept from an earlier identical question
    (``from_cache``: no reader call)."""
    return answer.to_dict() | {"cost": answering.cost(answer), "from_cache": from_cache(answer)}


async def ask_events(events, answering: Answering):
    """The native stream: each event of the question by name (started, retrieved, call, token, routed), then the
    whole answer (``answer``) or an ``error``."""
    async for kind, data in events:
        if kind == "answer":
            yield sse(answered(data, answering), "answer")
        elif kind == "error":
            yield sse({"error": error_body(data)}, "error")
        else:
            yield sse(data, kind)
