"""The OpenAI-compatible API: each collection is a model (``lcrag/NAME``); ``POST /v1/chat/completions`` answers
the last user message over it, as a follow-up of the messages before it, plain or streamed as
``chat.completion.chunk`` events, with lcrag's route, sources and cost in an extra ``lcrag`` field that OpenAI
clients ignore."""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from lcrag.readers import streaming
from lcrag.service.access import visible, visible_names
from lcrag.service.answering import Answering
from lcrag.store.collections import NotFound
from lcrag.service.http.errors import error_body
from lcrag.service.http.deps import answering, questions
from lcrag.service.questions import Questions, unencodable
from lcrag.service.requests import ChatRequest
from lcrag.service.http.routes.sse import sse
from lcrag.core.types import Answer

MODEL_PREFIX = "lcrag/"
router = APIRouter()


@router.get("/v1/models")
def models(request: Request, engine: Answering = Depends(answering)):
    return {"object": "list", "data": [{"id": MODEL_PREFIX + n, "object": "model", "owned_by": "lcrag",
                                        "created": 0} for n in visible_names(request, engine.collections.names())]}


@router.post("/v1/chat/completions")
async def chat(body: ChatRequest, request: Request, asked: Questions = Depends(questions)):
    if not body.model.startswith(MODEL_PREFIX):
        raise NotFound(f"unknown model {body.model[:60]!r}: GET /v1/models lists them ({MODEL_PREFIX}COLLECTION)")
    for index, message in enumerate(body.messages):  # text that is not Unicode: 400 naming the message
        unencodable(f"messages[{index}].content", message.content if isinstance(message.content, str) else
                    [part.text for part in message.content or ()])
    collection, question, options = body.model[len(MODEL_PREFIX):], body.question(), body.answer_options()
    visible(request, collection)  # a collection outside the key's patterns is unknown to it
    await run_in_threadpool(asked.answering.collections.files_dir, collection)  # a store may be a database
    reply = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": body.model}
    if not body.stream:
        answer = await asked.answer(collection, question, options, request, history=body.conversation())
        return reply | {"object": "chat.completion", "usage": usage(answer), "lcrag": asked.extra(answer),
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": answer.text}}]}
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    events = await asked.live(collection, question, options, request, body.conversation())
    return StreamingResponse(chat_chunks(reply, events, asked.extra, include_usage), media_type="text/event-stream")


def usage(answer: Answer) -> dict[str, Any]:
    cached = sum(c.cached_prompt_tokens for c in answer.calls)
    return {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
            "total_tokens": answer.prompt_tokens + answer.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached}}


async def chat_chunks(reply: dict, events, extra, include_usage: bool):
    """OpenAI's chat.completion.chunk events as the reader writes: the role, the answer's tokens as deltas, the
    finish reason with lcrag's extra field, the usage when asked, then [DONE].

    Only the final answer is sent: tokens of a step that a later step may replace (Self-Route's RAG step) are held
    back until the route is known, then sent if that step's answer stands."""
    def chunk(delta: dict, finish: str | None = None, **more) -> str:
        return sse(reply | {"object": "chat.completion.chunk",
                             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]} | more)

    yield chunk({"role": "assistant", "content": ""})
    text = streaming.FinalText()
    async for kind, data in events:
        if kind == "error":
            yield sse({"error": error_body(data)})
            return
        if kind == "answer":
            answer: Answer = data
            rest = text.rest(answer.text)
            if rest:  # a held-back answer that stood
                yield chunk({"content": rest})
            yield chunk({}, "stop", lcrag=extra(answer))
            if include_usage:
                yield sse(reply | {"object": "chat.completion.chunk", "choices": [], "usage": usage(answer)})
        elif piece := text.piece(kind, data):
            yield chunk({"content": piece})
    yield "data: [DONE]\n\n"
