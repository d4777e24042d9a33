"""How failures become responses: JSON in OpenAI's shape (``{"error": {"message", "type", "code"}}``) with the
right status — 400 bad input or over a limit, 401 missing or wrong key, 403 a cross-site write, 404 unknown
collection or model, 408 a request that did not arrive in time, 413 a body over its limit, 415 not JSON, 422 a body
of the wrong shape, 429 overloaded (with Retry-After), 431 headers over their limit, 499 the client left, 502/504 a
reader that failed, 503 too many connections, a question stopped by the server's shutdown or one for an index its
collection's indexing has not made yet (with Retry-After), the store's database out of reach (with Retry-After,
logged in one line, never a traceback), 507 the server's disk or database full (500 for its other
storage failures); never a 5xx for bad input. (408, 431 and 503 for connections come from lcrag.service.http.server.)"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from lcrag.core.errors import LcragError, ReaderError
from lcrag.store.postgres_database import RETRY_AFTER, StoreDown
from lcrag.readers import streaming
from lcrag.service.answering import Busy, ShuttingDown
from lcrag.store.collections import NotFound, StorageError, TooLarge
from lcrag.store.segments import IndexNotReady

# With a body refused half-read, the connection is closed: the server would otherwise read (and drop) the rest, and a
# client that sends its whole body before reading the answer would send all of it.
CLOSE = {"Connection": "close"}
_ADDRESS = re.compile(r"\b(?:https?|wss?)://[^\s'\"<>]+")
log = logging.getLogger(__name__)
# Seconds a question for an index not made yet is told to wait before asking again (its collection's indexing job
# makes it: seconds for most collections).
NOT_READY_RETRY = "5"


def error(status: int, message: str, kind: str, headers: dict | None = None) -> JSONResponse:
    # A lone surrogate a client sent (JSON's "\\ud800") cannot be encoded as UTF-8: it is quoted as its escape.
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status, headers=headers)


def failure(exc: BaseException) -> tuple[int, str, str]:
    """Status, message and type of a failure while answering: the server shut down before it was answered (503), the
    client left (499), the reader failed (504 when it gave no answer in time, else 502), or bad input (400)."""
    if isinstance(exc, (ShuttingDown, IndexNotReady, StoreDown)):
        return 503, str(exc), "unavailable_error"
    if isinstance(exc, streaming.Cancelled):
        return 499, str(exc), "client_closed_request"
    if isinstance(exc, ReaderError):
        status = 504 if "deadline" in str(exc) or "timed out" in str(exc) else 502
        # The reader's address is the operator's business, not the client's.
        return status, f"the reader failed: {_ADDRESS.sub('the reader server', str(exc))}", "reader_error"
    return 400, str(exc), "invalid_request_error"


def error_body(exc: BaseException) -> dict[str, Any]:
    """The error a stream ends with: the body the same failure gets as a response before any event."""
    status, message, kind = failure(exc)
    return {"message": message, "type": kind, "code": status}


def add_handlers(app: FastAPI) -> None:
    """Map every failure an endpoint can meet to its JSON response."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, exc):
        # A body over its limit is answered by the guard's BodyLimits, naming the limit and its flag.
        return error(exc.status_code, str(exc.detail), "invalid_request_error",
                     CLOSE if exc.status_code == 413 else None)

    @app.exception_handler(StoreDown)
    async def store_down(request, exc):
        # An outage, not a bug: one line in the log (the store and psycopg's reason), the client told when to retry.
        log.warning("%s %s: %s", request.method, request.url.path, exc.detail)
        return error(503, str(exc), "unavailable_error", {"Retry-After": str(RETRY_AFTER)})

    @app.exception_handler(StorageError)
    async def storage(request, exc):
        # The server's disk or database, not the request: 507 when it is full, else 500; never a path on the server.
        return error(507 if exc.full else 500, str(exc), "storage_error")

    @app.exception_handler(Exception)
    async def internal(request, exc):  # a bug: JSON like every answer (the guard logs it)
        return error(500, "internal error (logged on the server)", "server_error")

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
        return error(413, f"{exc} (lcrag serve --max-upload-mb)", "invalid_request_error", CLOSE)

    @app.exception_handler(Busy)
    async def busy(request, exc):
        return error(429, f"overloaded: {exc}; retry later", "rate_limit_error", {"Retry-After": "5"})

    @app.exception_handler(IndexNotReady)
    async def not_ready(request, exc):  # the collection's indexing job has not made it yet: asked again later
        return error(503, str(exc), "unavailable_error", {"Retry-After": NOT_READY_RETRY})

    @app.exception_handler(streaming.Cancelled)
    @app.exception_handler(ReaderError)
    @app.exception_handler(LcragError)
    async def failed(request, exc):
        return error(*failure(exc))
