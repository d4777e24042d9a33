"""The HTTP service (FastAPI on uvicorn): collections, an OpenAI-compatible chat API over them, the native ask API,
health, Prometheus metrics and the web page, all in one process.

Errors are JSON in OpenAI's shape (``{"error": {"message", "type", "code"}}``) with the right status: 400 bad
input, 401 missing or wrong key, 404 unknown collection or model, 413 upload too large, 422 malformed body, 429
overloaded (with Retry-After), 502 a reader that failed; never a 5xx for bad input."""

from __future__ import annotations

import asyncio
import hmac
import json
import re
import time
import uuid
from importlib.resources import files as package_files
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import FastAPI, File, Path, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.body_limit import MAX_BODY_SIZE_SCOPE_KEY

from lcrag.errors import InputError, LcragError, ReaderError
from lcrag.readers import streaming
from lcrag.service.answering import Answering, Busy
from lcrag.service.collections import NotFound, TooLarge
from lcrag.service.limits import Limits
from lcrag.service.requests import AskRequest, ChatRequest, NewCollection
from lcrag.types import Answer

MODEL_PREFIX = "lcrag/"
UPLOAD_CHUNK = 1 << 20
MULTIPART_SLACK = 64 << 10  # an upload's body is its file plus the multipart headers around it
PUBLIC = ("/", "/healthz", "/app.js", "/app.css")  # the page and its parts load before a key can be typed
WRITES = ("POST", "PUT", "PATCH", "DELETE")
# The page runs only its own script and style and talks only to this server; no one may frame it.
PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
# An uploaded file is the uploader's content on this origin: it is shown only as a type that cannot run script
# (a PDF in the browser's viewer, plain text, in a sandbox), anything else is a download.
SHOWN_INLINE = {".pdf": "application/pdf", ".txt": "text/plain; charset=utf-8", ".md": "text/plain; charset=utf-8",
                ".jsonl": "text/plain; charset=utf-8"}
FILE_CSP = "default-src 'none'; sandbox"
# With a body refused half-read, the connection is closed: the server would otherwise read (and drop) the rest, and a
# client that sends its whole body before reading the answer would send all of it.
CLOSE = {"Connection": "close"}
SECURITY_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer")]


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
    """Pure ASGI middleware (Starlette's BaseHTTPMiddleware would hide client disconnects from the endpoints): whom
    the server answers (the Host names it is bound to, the API key, no cross-site writes, JSON bodies as JSON),
    security headers on every response, and request metrics."""

    def __init__(self, app, api_key: str | None, limits: Limits, metrics: Metrics, routes: list = ()):
        self.app, self.api_key, self.limits, self.metrics = app, api_key, limits, metrics
        self.routes = routes  # the app's routes, to label a refused request by its route's template

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, path = time.perf_counter(), scope["path"]
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        status = {}

        async def sending(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                given = {k.lower() for k, _ in message.get("headers", [])}
                message = message | {"headers": [*message.get("headers", []),
                                                  *(h for h in SECURITY_HEADERS if h[0] not in given)]}
            await send(message)

        refusal = self._refusal(scope["method"], path, headers)
        if refusal is not None:  # labelled by the route it would have reached: a client names no label
            self.metrics.requests.labels(self._template(scope), refusal.status_code).inc()
            return await refusal(scope, receive, sending)
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
        host = headers.get("host", "")
        if not self.limits.host_allowed(host):  # DNS rebinding: a hostile page's name resolving to this server
            return error(400, f"Host {host[:60]!r} is not a name this server answers to (lcrag serve "
                              "--allowed-host)", "invalid_request_error")
        if self.api_key and path not in PUBLIC and not self._key_given(headers.get("authorization", "")):
            return error(401, "missing or wrong API key (Authorization: Bearer KEY)", "authentication_error")
        if method in WRITES and not self._same_site(headers):
            return error(403, "a cross-site write is refused: this server takes writes from its own page and from "
                              "non-browser clients (lcrag serve --cors-origin ORIGIN allows a site)", "permission_error")
        if method == "POST" and not path.endswith("/files") and not _is_json(headers.get("content-type", "")):
            return error(415, "the body must be sent as Content-Type: application/json", "invalid_request_error")
        return None

    def _key_given(self, authorization: str) -> bool:
        scheme, _, key = authorization.partition(" ")  # the scheme is case-insensitive (RFC 9110)
        return scheme.lower() == "bearer" and hmac.compare_digest(key.strip().encode(), self.api_key.encode())

    def _same_site(self, headers: dict[str, str]) -> bool:
        """Whether a write comes from this server's own page or from a client that is not a browser: a browser
        names the page's origin (Origin, Sec-Fetch-Site); a plain-text or form post from another site, which CORS
        never preflights, is refused here."""
        origin = headers.get("origin")
        if origin is not None:
            return origin in self.limits.cors_origins or urlsplit(origin).netloc == headers.get("host")
        return headers.get("sec-fetch-site", "none") in ("same-origin", "none")


def _is_json(content_type: str) -> bool:
    kind = content_type.split(";")[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


def usage(answer: Answer) -> dict[str, Any]:
    cached = sum(c.cached_prompt_tokens for c in answer.calls)
    return {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
            "total_tokens": answer.prompt_tokens + answer.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached}}


def create_app(answering: Answering, api_key: str | None = None, limits: Limits | None = None) -> FastAPI:
    limits = limits or Limits()
    # Every JSON body is bounded as it streams in (Starlette's body limit), uploads by their own larger limit.
    app = FastAPI(title="lcrag", docs_url=None, redoc_url=None, max_body_size=limits.max_body_bytes)
    metrics = Metrics()
    app.state.answering, app.state.metrics, app.state.limits = answering, metrics, limits
    collections = answering.collections

    app.add_middleware(Guard, api_key=api_key, limits=limits, metrics=metrics,
                       routes=app.router.routes)  # the live list: routes declared below are in it too
    if limits.cors_origins:  # outside the Guard: a preflight is answered before a key is asked for
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(limits.cors_origins), allow_methods=["*"],
                           allow_headers=["Authorization", "Content-Type"])

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, exc):
        if exc.status_code == 413:  # Starlette's body limit: name the limit and the flag that sets it
            flag = "--max-upload-mb" if request.url.path.endswith("/files") else "--max-body-kb"
            limit = request.scope.get(MAX_BODY_SIZE_SCOPE_KEY) or limits.max_body_bytes
            return error(413, f"the request body is over the {limit:,}-byte limit (lcrag serve {flag})",
                         "invalid_request_error", CLOSE)
        return error(exc.status_code, str(exc.detail), "invalid_request_error")

    @app.exception_handler(RequestValidationError)
    async def invalid(request, exc):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p)[:40] for p in first.get("loc", ()) if p != "body")  # a client's key: quoted short
        return error(422, f"{where}: {first.get('msg', 'invalid request')}".lstrip(": "), "invalid_request_error")

    @app.exception_handler(NotFound)
    async def not_found(request, exc):
        return error(404, str(exc), "not_found_error")

    @app.exception_handler(TooLarge)
    async def too_large(request, exc):
        return error(413, str(exc), "invalid_request_error", CLOSE)

    @app.exception_handler(Busy)
    async def busy(request, exc):
        return error(429, f"overloaded: {exc}; retry later", "rate_limit_error", {"Retry-After": "5"})

    @app.exception_handler(streaming.Cancelled)
    @app.exception_handler(ReaderError)
    @app.exception_handler(LcragError)
    async def failed(request, exc):
        return error(*_failure(exc))

    def check(question: str, options: dict) -> None:
        """Everything about a question that can be refused before any work: empty, over a limit, invalid options."""
        if not question.strip():
            raise InputError("the question is empty")
        limits.check(question, options)
        answering.pipeline(options)  # validates every value as the CLI does

    async def answer_for(collection: str, question: str, options: dict, request: Request | None = None,
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
        try:  # in the answering pool: a question waiting for the reader never holds a thread uploads need
            answer = await asyncio.get_running_loop().run_in_executor(
                answering.executor, answering.ask, collection, question, options, listener)
        except (streaming.Cancelled, asyncio.CancelledError):
            metrics.cancelled.inc()
            raise
        finally:
            watcher.cancel()
            listener.cancelled.set()  # a caller cancelled while the thread runs: stop its generation
        metrics.answer(answer, answering.cost(answer)["total"])
        return answer

    async def live(collection: str, question: str, options: dict, request: Request):
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

    def web(name: str, media_type: str, headers: dict | None = None) -> Response:
        return Response((package_files("lcrag.service") / "web" / name).read_bytes(), media_type=media_type,
                        headers=headers)

    @app.get("/", include_in_schema=False)
    async def page():
        return web("index.html", "text/html; charset=utf-8", {"Content-Security-Policy": PAGE_CSP,
                                                               "X-Frame-Options": "DENY"})

    @app.get("/app.js", include_in_schema=False)
    async def page_script():
        return web("app.js", "text/javascript; charset=utf-8")

    @app.get("/app.css", include_in_schema=False)
    async def page_style():
        return web("app.css", "text/css; charset=utf-8")

    # -- collections -------------------------------------------------------------------------------------------
    @app.get("/v1/collections")
    async def list_collections():
        return {"data": [collections.describe(n) for n in collections.names()]}

    @app.post("/v1/collections", status_code=201)
    async def create_collection(body: NewCollection):
        return collections.create(body.name)

    @app.get("/v1/collections/{name}")
    async def get_collection(name: str):
        return collections.describe(name)

    @app.delete("/v1/collections/{name}")
    async def delete_collection(name: str):
        collections.delete(name)
        answering.forget(name)
        return {"deleted": name}

    @app.post("/v1/collections/{name}/files", status_code=201,
              max_body_size=limits.max_upload_bytes + MULTIPART_SLACK)
    async def upload(name: str, file: UploadFile = File(...)):
        collections.files_dir(name)

        def chunks():
            while chunk := file.file.read(UPLOAD_CHUNK):
                yield chunk

        stored = await asyncio.to_thread(collections.add_file, name, file.filename or "", chunks(),
                                         limits.max_upload_bytes)
        answering.forget(name)
        return stored | {"status": collections.describe(name)["status"]}

    @app.get("/v1/collections/{name}/files/{filename}")
    async def download(name: str, filename: Annotated[str, Path(max_length=255)]):
        path = collections.files_dir(name) / filename
        if filename.startswith(".") or "/" in filename or not path.is_file():
            raise NotFound(f"no file {filename!r} in {name!r}")
        inline = SHOWN_INLINE.get(path.suffix.lower())
        headers = {} if inline == "application/pdf" else {"Content-Security-Policy": FILE_CSP}
        return FileResponse(path, media_type=inline or "application/octet-stream", filename=filename,
                            content_disposition_type="inline" if inline else "attachment", headers=headers)

    @app.get("/v1/routers")
    async def routers():
        """The routers a request may name (``"router": NAME``)."""
        return {"data": sorted(answering.routers)}

    # -- answers -----------------------------------------------------------------------------------------------
    @app.post("/v1/ask")
    async def ask(body: AskRequest, request: Request):
        collections.files_dir(body.collection)
        options = body.options()
        if not body.stream:
            answer = await answer_for(body.collection, body.question, options, request)
            return answer.to_dict() | {"cost": answering.cost(answer)}
        check(body.question, options)
        return StreamingResponse(_ask_events(await live(body.collection, body.question, options, request),
                                             answering), media_type="text/event-stream")

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": MODEL_PREFIX + n, "object": "model", "owned_by": "lcrag",
                                            "created": 0} for n in collections.names()]}

    @app.post("/v1/chat/completions")
    async def chat(body: ChatRequest, request: Request):
        if not body.model.startswith(MODEL_PREFIX):
            raise NotFound(f"unknown model {body.model[:60]!r}: GET /v1/models lists them ({MODEL_PREFIX}COLLECTION)")
        collection, question, options = body.model[len(MODEL_PREFIX):], body.question(), body.options()
        collections.files_dir(collection)
        reply = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": body.model}
        if not body.stream:
            answer = await answer_for(collection, question, options, request)
            return reply | {"object": "chat.completion", "usage": usage(answer), "lcrag": extra(answer),
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": answer.text}}]}
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        events = await live(collection, question, options, request)
        return StreamingResponse(_chat_chunks(reply, events, extra, include_usage), media_type="text/event-stream")

    return app


def _sse(data: Any, event: str | None = None) -> str:
    name = f"event: {event}\n" if event else ""
    return f"{name}data: {json.dumps(data, ensure_ascii=False, default=str)}\n\n"


_ADDRESS = re.compile(r"\b(?:https?|wss?)://[^\s'\"<>]+")


def _failure(exc: BaseException) -> tuple[int, str, str]:
    """Status, message and type of a failure while answering: the client left (499), the reader failed (504 when it
    gave no answer in time, else 502), or bad input (400)."""
    if isinstance(exc, streaming.Cancelled):
        return 499, str(exc), "client_closed_request"
    if isinstance(exc, ReaderError):
        status = 504 if "deadline" in str(exc) or "timed out" in str(exc) else 502
        # The reader's address is the operator's business, not the client's.
        return status, f"the reader failed: {_ADDRESS.sub('the reader server', str(exc))}", "reader_error"
    return 400, str(exc), "invalid_request_error"


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
