"""The HTTP service (FastAPI on uvicorn), wired from its parts: the routes by concern (:mod:`lcrag.service.http.routes`:
operations and the page, collections, the native ask API, the OpenAI-compatible chat API), the guard in front of
them (:mod:`lcrag.service.http.guard`: Host, key, cross-site writes, body limits, security headers, metrics) and the
error mapping (:mod:`lcrag.service.http.errors`); the connections themselves are bounded by the server
(:mod:`lcrag.service.http.server`). See the README's "Service and web page" for the API, the limits and
the security model."""

from __future__ import annotations

from fastapi import FastAPI

from lcrag.service.access import Forbidden
from lcrag.service.answering import Answering
from lcrag.service.http.errors import add_handlers, error
from lcrag.service.http.guard import BodyLimits, Guard
from lcrag.service.keys import KeyExists, Keys, KeysUnavailable, keys_for
from lcrag.service.limits import Limits
from lcrag.service.metrics import Metrics
from lcrag.service.questions import Questions
from lcrag.service.http.routes import ask, chat, collections, operations
from lcrag.service.http.routes import keys as keys_routes


def create_app(answering: Answering, api_key: str | None = None, limits: Limits | None = None,
               gate=None, keys: Keys | None = None) -> FastAPI:
    """The app; ``gate``: the server's connection gate (:mod:`lcrag.service.http.server`), counted in /metrics;
    ``keys``: the people's keys and the audit log (default: those of the answering engine's store)."""
    limits = limits or Limits()
    keys = keys if keys is not None else keys_for(answering.collections)
    app = FastAPI(title="lcrag", docs_url=None, redoc_url=None)
    app.state.keys = keys
    metrics = Metrics()
    if gate is not None:
        metrics.watch(gate)
    metrics.watch_readers(answering.base.reader_servers)
    app.state.answering, app.state.metrics, app.state.limits = answering, metrics, limits
    app.state.questions = Questions(answering, limits, metrics)
    routers = [part.router for part in (operations, collections, ask, chat, keys_routes)]
    for router in routers:
        app.include_router(router)
    add_handlers(app)
    add_access_handlers(app)
    # Middleware added last runs first: CORS (a preflight is answered before a key is asked for), then the guard,
    # then the body limits.
    app.add_middleware(BodyLimits, limits=limits, command="lcrag serve")
    app.add_middleware(Guard, api_key=api_key, limits=limits, metrics=metrics,
                       routes=[route for router in routers for route in router.routes], keys=keys)
    if limits.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(limits.cors_origins), allow_methods=["*"],
                           allow_headers=["Authorization", "Content-Type"])
    return app


def add_access_handlers(app: FastAPI) -> None:
    """A key's role short of the request: 403; a key's name taken: 409; the keys or the audit log out of reach: 503
    (one JSON line each)."""

    @app.exception_handler(Forbidden)
    async def forbidden(request, exc):
        return error(403, str(exc), "permission_error")

    @app.exception_handler(KeyExists)
    async def exists(request, exc):
        return error(409, str(exc), "conflict_error")

    @app.exception_handler(KeysUnavailable)
    async def unavailable(request, exc):
        return error(503, str(exc), "unavailable_error", {"Retry-After": "1"})
