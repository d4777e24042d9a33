"""The HTTP service (FastAPI on uvicorn), wired from its parts: the routes by concern (:mod:`lcrag.service.routes`:
operations and the page, collections, the native ask API, the OpenAI-compatible chat API), the guard in front of
them (:mod:`lcrag.service.guard`: Host, key, cross-site writes, body limits, security headers, metrics) and the
error mapping (:mod:`lcrag.service.errors`); the connections themselves are bounded by the server
(:mod:`lcrag.service.server`). See the README's "Service and web page" for the API, the limits and
the security model."""

from __future__ import annotations

from fastapi import FastAPI

from lcrag.service.answering import Answering
from lcrag.service.errors import add_handlers
from lcrag.service.guard import BodyLimits, Guard
from lcrag.service.limits import Limits
from lcrag.service.metrics import Metrics
from lcrag.service.questions import Questions
from lcrag.service.routes import ask, chat, collections, operations


def create_app(answering: Answering, api_key: str | None = None, limits: Limits | None = None,
               gate=None) -> FastAPI:
    """The app; ``gate``: the server's connection gate (:mod:`lcrag.service.server`), counted in /metrics."""
    limits = limits or Limits()
    app = FastAPI(title="lcrag", docs_url=None, redoc_url=None)
    metrics = Metrics()
    if gate is not None:
        metrics.watch(gate)
    metrics.watch_readers(answering.base.reader_servers)
    app.state.answering, app.state.metrics, app.state.limits = answering, metrics, limits
    app.state.questions = Questions(answering, limits, metrics)
    routers = [part.router for part in (operations, collections, ask, chat)]
    for router in routers:
        app.include_router(router)
    add_handlers(app)
    # Middleware added last runs first: CORS (a preflight is answered before a key is asked for), then the guard,
    # then the body limits.
    app.add_middleware(BodyLimits, limits=limits, command="lcrag serve")
    app.add_middleware(Guard, api_key=api_key, limits=limits, metrics=metrics,
                       routes=[route for router in routers for route in router.routes])
    if limits.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(limits.cors_origins), allow_methods=["*"],
                           allow_headers=["Authorization", "Content-Type"])
    return app
