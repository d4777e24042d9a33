"""What operators and the browser need besides answers: liveness (/healthz) and readiness (/readyz), Prometheus
metrics, the routers a request may name, and the web page with its script and style (files, so that the page's CSP
can forbid any inline script)."""

from __future__ import annotations

import time
from importlib.resources import files as package_files

import anyio
import anyio.to_thread
import httpx
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from lcrag.service.access import metrics_registry
from lcrag.core.http_client import split_base_urls
from lcrag.store.postgres_database import StoreDown
from lcrag.readers import parse_reader_spec
from lcrag.service.answering import Answering
from lcrag.service.http.deps import answering

# The page runs only its own script and style and talks only to this server; no one may frame it.
PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

# The longest /readyz waits for each part it checks (the store's SELECT 1, each reader server's /v1/models): a probe
# that a load balancer sends every few seconds is answered within a few seconds, whatever is down.
READY_SECONDS = 1.0

router = APIRouter()


@router.get("/healthz")
async def healthz():
    """Liveness, for restarts: the process answers, on the event loop, with nothing looked up (never the store: a
    database outage must not make every replica look dead; /readyz says whether the parts answer)."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request):
    """Readiness, for a load balancer's routing (/healthz is liveness, for restarts): 200 when the collection store
    answers a ``SELECT 1`` and the reader answers (a server reader's /v1/models, one server of a pool at least; the
    embedded reader is in this process), each within :data:`READY_SECONDS`; else 503 naming the part that is down
    (the database restarting: this replica is taken out of routing, and back once it answers). Without the key, only
    whether it is ready; each part's state for those with it (a key over every collection), and how many collections
    there are when the store answered."""
    engine = request.app.state.answering
    store, reader = (False, "no answer in time", 0), (False, "no answer in time")
    with anyio.move_on_after(READY_SECONDS + 0.5):  # a thread stuck on a dead socket is left to end by itself
        store = await anyio.to_thread.run_sync(_store_ready, engine, abandon_on_cancel=True)
    with anyio.move_on_after(READY_SECONDS + 0.5):
        reader = await anyio.to_thread.run_sync(_reader_ready, engine, abandon_on_cancel=True)
    ready = store[0] and reader[0]
    body = {"status": "ready" if ready else "not ready"}
    if getattr(request.state, "authorized", False):
        body |= {"store": _part(*store[:2]), "reader": _part(*reader)} | ({"collections": store[2]} if store[0] else {})
    return JSONResponse(body, 200 if ready else 503, headers=None if ready else {"Retry-After": "1"})


def _part(ok: bool, detail: str) -> dict:
    return {"status": "ok" if ok else "down", "detail": detail}


def _store_ready(engine: Answering) -> tuple[bool, str, int]:
    """Whether the collection store answers (PostgreSQL's ``SELECT 1`` through the pool, then the collections'
    names; the embedded store's names), what was seen, and how many collections there are."""
    collections, started = engine.collections, time.perf_counter()
    db = getattr(collections, "db", None)
    try:
        if db is not None and hasattr(db, "ping"):
            db.ping(READY_SECONDS)
            seen = f"PostgreSQL answered SELECT 1 in {1000 * (time.perf_counter() - started):.0f} ms"
        else:
            seen = "the embedded store answered"
        return True, seen, len(collections.names())
    except StoreDown:
        return False, f"the database cannot be reached (no answer within {READY_SECONDS:g} s)", 0
    except OSError as exc:
        return False, f"the collections' folder cannot be read ({exc.strerror or type(exc).__name__})", 0


def _reader_ready(engine: Answering) -> tuple[bool, str]:
    """Whether the reader answers: a server reader's (or a pool's) servers asked for /v1/models, any answer but a
    5xx or a refused key counting as up; a reader without a server (the embedded one) is in this process."""
    settings = engine.settings
    kind, _, spec_url = parse_reader_spec(settings.llm)
    given = spec_url or settings.base_url
    urls = split_base_urls(given) if kind == "openai" and given else []
    if not urls:
        return True, f"the {kind} reader, in this process"
    up = [url for url in urls if _server_answers(url, settings.api_key)]
    return bool(up), f"{len(up)} of {len(urls)} reader server(s) answered /v1/models"


def _server_answers(url: str, api_key: str | None) -> bool:
    root = url.rstrip("/")
    models = (root if root.endswith("/v1") else root + "/v1") + "/models"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        status = httpx.get(models, headers=headers, timeout=READY_SECONDS).status_code
    except httpx.HTTPError:
        return False
    return status < 500 and status not in (401, 403)


@router.get("/metrics")
async def metrics_page(request: Request):
    """Every key may read the metrics; a key with collection patterns sees no series labelled with another
    collection (:func:`lcrag.service.access.metrics_registry`)."""
    registry = metrics_registry(request, request.app.state.metrics.registry)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/routers")
def routers(engine: Answering = Depends(answering)):
    """The routers a request may name (``"router": NAME``)."""
    return {"data": sorted(engine.routers)}


def web(name: str, media_type: str, headers: dict | None = None) -> Response:
    return Response((package_files("lcrag.service.http") / "web" / name).read_bytes(), media_type=media_type,
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
