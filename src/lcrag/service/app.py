"""The HTTP service (FastAPI on uvicorn): collections, an OpenAI-compatible chat API over them, the native ask API,
health, Prometheus metrics and the web page, all in one process.

Errors are JSON in OpenAI's shape (``{"error": {"message", "type", "code"}}``) with the right status: 400 bad
input, 401 missing or wrong key, 404 unknown collection or model, 413 upload too large, 422 malformed body, 429
overloaded (with Retry-After), 502 a reader that failed; never a 5xx for bad input."""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from importlib.resources import files as package_files
from typing import Any

from fastapi import FastAPI, File, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from lcrag.errors import InputError, LcragError, ReaderError
from lcrag.readers import streaming
from lcrag.service.answering import ANSWER_OPTIONS, Answering, Busy
from lcrag.service.collections import NotFound, TooLarge
from lcrag.types import Answer

MODEL_PREFIX = "lcrag/"
UPLOAD_CHUNK = 1 << 20


def error(status: int, message: str, kind: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status, headers=headers)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("lcrag_requests", "HTTP requests", ["path", "status"], registry=self.registry)
        self.latency = Histogram("lcrag_request_seconds", "Request latency", ["path"], registry=self.registry)
        self.tokens = Counter("lcrag_tokens", "Reader tokens", ["kind"], registry=self.registry)
        self.cost = Counter("lcrag_cost_usd", "Money spent on reader calls (when priced)", registry=self.registry)
        self.routes = Counter("lcrag_routes", "Answers by route", ["route"], registry=self.registry)
        self.cancelled = Counter("lcrag_cancelled", "Questions dropped from the queue: their client left",
                                 registry=self.registry)

    def answer(self, answer: Answer, cost: float | None) -> None:
        self.tokens.labels("prompt").inc(answer.prompt_tokens)
        self.tokens.labels("completion").inc(answer.completion_tokens)
        self.tokens.labels("cached_prompt").inc(sum(c.cached_prompt_tokens for c in answer.calls))
        self.routes.labels(answer.route).inc()
        if cost:
            self.cost.inc(cost)


class Guard:
    """Pure ASGI middleware (Starlette's BaseHTTPMiddleware would hide client disconnects from the endpoints):
    the API key, an upload refused by its Content-Length before its body is read, and request metrics."""

    def __init__(self, app, api_key: str | None, max_upload_bytes: int, metrics: Metrics, routes: list = ()):
        self.app, self.api_key, self.max_upload_bytes, self.metrics = app, api_key, max_upload_bytes, metrics
        self.routes = routes  # the app's routes, to label a refused request by its route's template

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, path = time.perf_counter(), scope["path"]
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._refusal(scope["method"], path, headers)
        if refusal is not None:  # labelled by the route it would have reached: a client names no label
            self.metrics.requests.labels(self._template(scope), refusal.status_code).inc()
            return await refusal(scope, receive, send)
        status = {}

        async def sending(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        await self.app(scope, receive, sending)
        route = getattr(scope.get("route"), "path", "unmatched")
        self.metrics.requests.labels(route, status.get("code", 0)).inc()
        self.metrics.latency.labels(route).observe(time.perf_counter() - started)

    def _template(self, scope) -> str:
        """The path template of the route ``scope`` matches (``/v1/collections/{name}``), else "unmatched"."""
        from starlette.routing import Match

        for route in self.routes:
            if route.matches(scope)[0] != Match.NONE:
                return getattr(route, "path", "unmatched")
        return "unmatched"

    def _refusal(self, method: str, path: str, headers: dict[str, str]) -> JSONResponse | None:
        length = headers.get("content-length", "")
        if method == "POST" and path.endswith("/files") and length.isdigit() and \
                int(length) > self.max_upload_bytes + UPLOAD_CHUNK:  # refused before the body is read
            return error(413, f"the upload is over the {self.max_upload_bytes:,}-byte limit", "invalid_request_error")
        public = path in ("/", "/healthz")
        given = headers.get("authorization", "")
        if self.api_key and not public and not hmac.compare_digest(given.encode(), f"Bearer {self.api_key}".encode()):
            return error(401, "missing or wrong API key (Authorization: Bearer KEY)", "authentication_error")
        return None


def usage(answer: Answer) -> dict[str, Any]:
    cached = sum(c.cached_prompt_tokens for c in answer.calls)
    return {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
            "total_tokens": answer.prompt_tokens + answer.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached}}


class BodyTooLarge(InputError):
    """A JSON body over the service's limit (HTTP 413)."""


MAX_BODY_BYTES = 1 << 20  # a question and its options, or a chat's messages: 1 MiB is far more than either needs


def create_app(answering: Answering, api_key: str | None = None, max_upload_bytes: int = 512 << 20,
               max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    app = FastAPI(title="lcrag", docs_url=None, redoc_url=None)
    metrics = Metrics()
    app.state.answering, app.state.metrics = answering, metrics
    collections = answering.collections

    app.add_middleware(Guard, api_key=api_key, max_upload_bytes=max_upload_bytes, metrics=metrics,
                       routes=app.router.routes)  # the live list: routes declared below are in it too

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, exc):
        return error(exc.status_code, str(exc.detail), "invalid_request_error")

    @app.exception_handler(RequestValidationError)
    async def invalid(request, exc):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return error(422, f"{where}: {first.get('msg', 'invalid request')}".lstrip(": "), "invalid_request_error")

    @app.exception_handler(NotFound)
    async def not_found(request, exc):
        return error(404, str(exc), "not_found_error")

    @app.exception_handler(TooLarge)
    async def too_large(request, exc):
        return error(413, str(exc), "invalid_request_error")

    @app.exception_handler(Busy)
    async def busy(request, exc):
        return error(429, f"overloaded: {exc}; retry later", "rate_limit_error", {"Retry-After": "5"})

    @app.exception_handler(streaming.Cancelled)
    @app.exception_handler(ReaderError)
    @app.exception_handler(LcragError)
    async def failed(request, exc):
        return error(*_failure(exc))

    async def body_json(request: Request) -> dict:
        # Read as it comes and stop at the limit: a huge body is never held whole (nor echoed back in an error).
        data = bytearray()
        async for chunk in request.stream():
            data += chunk
            if len(data) > max_body_bytes:
                raise BodyTooLarge(f"the JSON body is over the {max_body_bytes:,}-byte limit (lcrag serve "
                                   "--max-body-kb)")
        try:
            body = json.loads(bytes(data) or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"the body is not JSON ({exc.__class__.__name__})") from None
        if not isinstance(body, dict):
            raise InputError("the body must be a JSON object")
        return body

    def check(question: Any, options: dict) -> None:
        """Everything about a question that can be refused before any work: empty, unknown or invalid options."""
        if not isinstance(question, str) or not question.strip():
            raise InputError("the question is empty")
        unknown = [k for k in options if k not in ANSWER_OPTIONS]
        if unknown:  # quoted short: a client's key may be any length
            raise InputError(f"unknown option(s): {', '.join(repr(k[:40]) for k in unknown[:5])}; known: "
                             f"{', '.join(ANSWER_OPTIONS)}")
        answering.pipeline(options)  # validates every value as the CLI does

    async def answer_for(collection: str, question: Any, options: dict, request: Request | None = None,
                         on_event=None) -> Answer:
        """The answer, computed in a worker thread; a client that leaves (or a caller that stops waiting) cancels
        it: dropped from the queue, or its generation stopped."""
        check(question, options)
        listener = streaming.Listener(on_event or (lambda kind, data: None))

        async def watch() -> None:
            while request is not None and not listener.cancelled.is_set():
                if await request.is_disconnected():
                    listener.cancelled.set()
                    return
                await asyncio.sleep(0.2)

        watcher = asyncio.create_task(watch())
        try:
            answer = await asyncio.to_thread(answering.ask, collection, question, options, listener)
        except (streaming.Cancelled, asyncio.CancelledError):
            metrics.cancelled.inc()
            raise
        finally:
            watcher.cancel()
            listener.cancelled.set()  # a caller cancelled while the thread runs: stop its generation
        metrics.answer(answer, answering.cost(answer)["total"])
        return answer

    async def live(collection: str, question: Any, options: dict, request: Request):
        """The question's events as they happen, then ``("answer", Answer)``. Waits for the question to reach the
        reader (its ``started`` event) before returning, so that a refusal (busy, unknown collection, bad
        options) is still an error response with its status; a later failure arrives as ``("error", exc)``."""
        events: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(answer_for(collection, question, options, request, lambda kind, data:
                                              loop.call_soon_threadsafe(events.put_nowait, (kind, data))))
        task.add_done_callback(lambda _: events.put_nowait(("done", None)))
        first = await events.get()
        if first[0] == "done":
            task.result()  # raises the refusal

        async def stream():
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

        return stream()

    def extra(answer: Answer) -> dict[str, Any]:
        return {"route": answer.route, "strategy": answer.strategy, "sources": [s.to_dict() for s in answer.sources],
                "cost": answering.cost(answer), "timings": answer.timings,
                "decline_probability": answer.decline_probability}

    # -- health, metrics, page ---------------------------------------------------------------------------------
    @app.get("/healthz")
    async def healthz():
        return {"status": "ok", "collections": len(collections.names())}

    @app.get("/metrics")
    async def metrics_page():
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return HTMLResponse((package_files("lcrag.service") / "web" / "index.html").read_text(encoding="utf-8"))

    # -- collections -------------------------------------------------------------------------------------------
    @app.get("/v1/collections")
    async def list_collections():
        return {"data": [collections.describe(n) for n in collections.names()]}

    @app.post("/v1/collections", status_code=201)
    async def create_collection(request: Request):
        body = await body_json(request)
        if not isinstance(body.get("name"), str):
            raise InputError("name: a collection name (string) is required")
        return collections.create(body["name"])

    @app.get("/v1/collections/{name}")
    async def get_collection(name: str):
        return collections.describe(name)

    @app.delete("/v1/collections/{name}")
    async def delete_collection(name: str):
        collections.delete(name)
        answering.forget(name)
        return {"deleted": name}

    @app.post("/v1/collections/{name}/files", status_code=201)
    async def upload(name: str, file: UploadFile = File(...)):
        collections.files_dir(name)

        def chunks():
            while chunk := file.file.read(UPLOAD_CHUNK):
                yield chunk

        stored = await asyncio.to_thread(collections.add_file, name, file.filename or "", chunks(), max_upload_bytes)
        answering.forget(name)
        return stored | {"status": collections.describe(name)["status"]}

    @app.get("/v1/collections/{name}/files/{filename}")
    async def download(name: str, filename: str):
        path = collections.files_dir(name) / filename
        if filename.startswith(".") or "/" in filename or not path.is_file():
            raise NotFound(f"no file {filename!r} in {name!r}")
        return FileResponse(path)

    # -- answers -----------------------------------------------------------------------------------------------
    @app.post("/v1/ask")
    async def ask(request: Request):
        body = await body_json(request)
        collection, question = body.pop("collection", None), body.pop("question", None)
        stream = bool(body.pop("stream", False))
        if not isinstance(collection, str):
            raise InputError("collection: a collection name is required")
        collections.files_dir(collection)
        if not stream:
            answer = await answer_for(collection, question, body, request)
            return answer.to_dict() | {"cost": answering.cost(answer)}
        check(question, body)
        return StreamingResponse(_ask_events(await live(collection, question, body, request), answering),
                                 media_type="text/event-stream")

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": MODEL_PREFIX + n, "object": "model", "owned_by": "lcrag",
                                            "created": 0} for n in collections.names()]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await body_json(request)
        model, messages = body.pop("model", None), body.pop("messages", None)
        if not isinstance(model, str) or not model.startswith(MODEL_PREFIX):
            raise NotFound(f"unknown model {model!r}: GET /v1/models lists them ({MODEL_PREFIX}COLLECTION)")
        collection = model[len(MODEL_PREFIX):]
        collections.files_dir(collection)
        if not isinstance(messages, list) or not messages:
            raise InputError("messages: a non-empty list of messages is required")
        users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        if not users or not isinstance(users[-1].get("content"), str):
            raise InputError("messages: the last user message must have text content")
        stream, stream_options = bool(body.pop("stream", False)), body.pop("stream_options", None) or {}
        options = {k: body[k] for k in ANSWER_OPTIONS if k in body}
        reply = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": model}
        if not stream:
            answer = await answer_for(collection, users[-1]["content"], options, request)
            return reply | {"object": "chat.completion", "usage": usage(answer), "lcrag": extra(answer),
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": answer.text}}]}
        events = await live(collection, users[-1]["content"], options, request)
        return StreamingResponse(_chat_chunks(reply, events, extra, bool(stream_options.get("include_usage"))),
                                 media_type="text/event-stream")

    return app


def _sse(data: Any, event: str | None = None) -> str:
    name = f"event: {event}\n" if event else ""
    return f"{name}data: {json.dumps(data, ensure_ascii=False, default=str)}\n\n"


def _failure(exc: BaseException) -> tuple[int, str, str]:
    """Status, message and type of a failure while answering: the client left (499), the reader failed (504 when it
    gave no answer in time, else 502), or bad input (400)."""
    if isinstance(exc, streaming.Cancelled):
        return 499, str(exc), "client_closed_request"
    if isinstance(exc, ReaderError):
        status = 504 if "deadline" in str(exc) or "timed out" in str(exc) else 502
        return status, f"the reader failed: {exc}", "reader_error"
    return 413 if isinstance(exc, BodyTooLarge) else 400, str(exc), "invalid_request_error"


def _error_body(exc: BaseException) -> dict[str, Any]:
    """The error a stream ends with: the body the same failure gets as a response before any event."""
    status, message, kind = _failure(exc)
    return {"message": message, "type": kind, "code": status}


async def _ask_events(events, answering: Answering):
    """The native stream: each event of the question by name (started, retrieved, call, token, routed), then the
    whole answer (``answer``) or an ``error``."""
    async for kind, data in events:
        if kind == "answer":
            yield _sse(data.to_dict() | {"cost": answering.cost(data)}, "answer")
        elif kind == "error":
            yield _sse({"error": _error_body(data)}, "error")
        else:
            yield _sse(data, kind)


async def _chat_chunks(reply: dict, events, extra, include_usage: bool):
    """OpenAI's chat.completion.chunk events as the reader writes: the role, the answer's tokens as deltas, the
    finish reason with lcrag's extra field, the usage when asked, then [DONE].

    Only the final answer is sent: tokens of a step that a later step may replace (Self-Route's RAG step) are held
    back until the route is known, then sent if that step's answer stands."""
    def chunk(delta: dict, finish: str | None = None, **more) -> str:
        return _sse(reply | {"object": "chat.completion.chunk",
                             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]} | more)

    yield chunk({"role": "assistant", "content": ""})
    text = streaming.FinalText()
    async for kind, data in events:
        if kind == "error":
            yield _sse({"error": _error_body(data)})
            return
        if kind == "answer":
            answer: Answer = data
            rest = text.rest(answer.text)
            if rest:  # a held-back answer that stood
                yield chunk({"content": rest})
            yield chunk({}, "stop", lcrag=extra(answer))
            if include_usage:
                yield _sse(reply | {"object": "chat.completion.chunk", "choices": [], "usage": usage(answer)})
        elif piece := text.piece(kind, data):
            yield chunk({"content": piece})
    yield "data: [DONE]\n\n"
