"""What operators and the browser need besides answers: health, Prometheus metrics, the routers a request may name,
and the web page with its script and style (files, so that the page's CSP can forbid any inline script)."""

from __future__ import annotations

from importlib.resources import files as package_files

import anyio.to_thread
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from lcrag.service.answering import Answering
from lcrag.service.deps import answering

# The page runs only its own script and style and talks only to this server; no one may frame it.
PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

router = APIRouter()


@router.get("/healthz")
async def healthz(request: Request):
    """The process is alive: all a client without the key (when ``--api-key`` is set) is told, answered on the event
    loop with nothing to look up. With the key (or with none set) also how many collections there are, counted in
    a worker thread (the store may be a database across the network)."""
    if not getattr(request.state, "authorized", False):
        return {"status": "ok"}
    collections = request.app.state.answering.collections
    return {"status": "ok", "collections": await anyio.to_thread.run_sync(lambda: len(collections.names()))}


@router.get("/metrics")
async def metrics_page(request: Request):
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/routers")
def routers(engine: Answering = Depends(answering)):
    """The routers a request may name (``"router": NAME``)."""
    return {"data": sorted(engine.routers)}


def web(name: str, media_type: str, headers: dict | None = None) -> Response:
    return Response((package_files("lcrag.service") / "web" / name).read_bytes(), media_type=media_type,
                    headers=headers)


@router.get("/", include_in_schema=False)
async def page():
    return web("index.html", "text/html; charset=utf-8", {"Content-Security-Policy": PAGE_CSP,
                                                           "X-Frame-Options": "DENY"})


@router.get("/app.js", include_in_schema=False)
async def page_script():
    return web("app.js", "text/javascript; charset=utf-8")


@router.get("/app.css", include_in_schema=False)
async def page_style():
    return web("app.css", "text/css; charset=utf-8")
