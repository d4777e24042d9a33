"""Who the service answers and what every response carries, as pure ASGI middleware (Starlette's
BaseHTTPMiddleware would hide client disconnects from the endpoints)."""

from __future__ import annotations

import hmac
import logging
import time
from urllib.parse import urlsplit

import anyio.to_thread
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from lcrag.service.http.errors import CLOSE, error
from lcrag.service.keys import ANONYMOUS, API_KEY, Keys, KeysUnavailable, Principal
from lcrag.service.limits import Limits
from lcrag.service.metrics import Metrics

PUBLIC = ("/", "/healthz", "/readyz", "/app.js", "/app.css")  # the page and its parts load before a key can be typed
WRITES = ("POST", "PUT", "PATCH", "DELETE")
MULTIPART_SLACK = 64 << 10  # an upload's body is its file plus the multipart headers around it
log = logging.getLogger(__name__)
SECURITY_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer")]


class BodyTooLarge(StarletteHTTPException):
    """A request body past its limit, raised where the app reads it."""

    def __init__(self) -> None:
        super().__init__(413, "the request body is over its limit")


class BodyLimits:
    """Every request body bounded, with or without Content-Length: an upload by the upload limit, any other body by
    the JSON limit. A declared length over the limit is refused before anything is read; a body that streams past
    it is stopped there. Either way the answer is the same JSON 413 naming the limit and its flag, with the
    connection closed (whatever the app behind made of the interruption is dropped). Pure ASGI: in front of the
    FastAPI app of ``lcrag serve`` and the MCP SDK's app of ``lcrag mcp`` alike."""

    def __init__(self, app, limits: Limits, command: str = "lcrag serve", uploads: bool = True):
        self.app, self.limits, self.command, self.uploads = app, limits, command, uploads

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        upload = self.uploads and scope["method"] == "POST" and scope["path"].endswith("/files")
        limit, flag = ((self.limits.max_upload_bytes + MULTIPART_SLACK, "--max-upload-mb") if upload
                       else (self.limits.max_body_bytes, "--max-body-kb"))
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            return await self._refuse(send, limit, flag)
        state = {"read": 0, "over": False, "started": False}

        async def counted():
            message = await receive()
            if message["type"] == "http.request":
                state["read"] += len(message.get("body", b""))
                if state["read"] > limit:
                    state["over"] = not state["started"]
                    raise BodyTooLarge()
            return message

        async def sending(message):
            if state["over"]:  # the app's own answer to the interruption: ours replaces it
                return
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        try:
            await self.app(scope, counted, sending)
        except Exception:  # BodyTooLarge, or what the app made of it
            if not state["over"]:
                raise
        if state["over"]:
            await self._refuse(send, limit, flag)

    async def _refuse(self, send, limit: int, flag: str) -> None:
        response = error(413, f"the request body is over the {limit:,}-byte limit ({self.command} {flag})",
                         "invalid_request_error", CLOSE)
        await response({"type": "http"}, _nothing, send)


async def _nothing():
    return {"type": "http.disconnect"}


def _content_length(scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class Guard:
    """Pure ASGI middleware (Starlette's BaseHTTPMiddleware would hide client disconnects from the endpoints): whom
    the server answers (the Host names it is bound to, the API key, no cross-site writes, JSON bodies as JSON),
    security headers on every response, and request metrics."""

    def __init__(self, app, api_key: str | None, limits: Limits, metrics: Metrics, routes: list = (),
                 keys: Keys | None = None):
        if api_key and not all("!" <= c <= "~" for c in api_key):
            raise ValueError("the API key must be printable ASCII without spaces (what a client can send)")
        self.app, self.api_key, self.limits, self.metrics = app, api_key, limits, metrics
        self.routes = routes  # the app's routes, to label a refused request by its route's template
        self.keys = keys  # the people's keys in the store (lcrag keys), beside the one --api-key

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

        holder, refusal = None, self._wrong_host(headers)
        if refusal is None:
            holder, refusal = await self._holder(path, headers.get("authorization", ""))
        if refusal is None:
            refusal = self._refusal(scope["method"], path, headers)
        if refusal is not None:  # labelled by the route it would have reached: a client names no label
            self.metrics.requests.labels(self._template(scope), refusal.status_code).inc()
            return await refusal(scope, receive, sending)
        # Who asks (request.state.principal: the routes check its role and collections), and whether the request
        # may hear about every collection: a public path says more only to an unscoped key (request.state.authorized).
        scope["state"] = {**scope.get("state", {}), "principal": holder,
                          "authorized": holder is not None and not holder.patterns}
        try:
            await self.app(scope, receive, sending)
        except Exception:  # a bug behind: logged once, and answered as JSON if nothing was sent yet
            log.exception("%s %s failed", scope["method"], self._template(scope))
            if "code" not in status:
                await error(500, "internal error (logged on the server)", "server_error")(scope, receive, sending)
        route = getattr(scope.get("route"), "path", "unmatched")
        self.metrics.requests.labels(route, status.get("code", 0)).inc()
        self.metrics.latency.labels(route).observe(time.perf_counter() - started)

    def _template(self, scope) -> str:
        """The path template of the route ``scope`` matches (``/v1/collections/{name}``), else "unmatched"."""
        for route in self.routes:
            if route.matches(scope)[0] != Match.NONE:
                return getattr(route, "path", "unmatched")
        return "unmatched"

    def _wrong_host(self, headers: dict[str, str]) -> JSONResponse | None:
        host = headers.get("host", "")
        if not self.limits.host_allowed(host):  # DNS rebinding: a hostile page's name resolving to this server
            return error(400, f"Host {host[:60]!r} is not a name this server answers to (lcrag serve "
                              "--allowed-host)", "invalid_request_error")
        return None

    def _refusal(self, method: str, path: str, headers: dict[str, str]) -> JSONResponse | None:
        if method in WRITES and not self._same_site(headers):
            return error(403, "a cross-site write is refused: this server takes writes from its own page and from "
                              "non-browser clients (lcrag serve --cors-origin ORIGIN allows a site)", "permission_error")
        if method == "POST" and not path.endswith("/files") and not _is_json(headers.get("content-type", "")):
            return error(415, "the body must be sent as Content-Type: application/json", "invalid_request_error")
        return None

    async def _holder(self, path: str, authorization: str) -> tuple[Principal | None, JSONResponse | None]:
        """Who sends the request, or its refusal: 401 for a missing or wrong key where one is needed (an --api-key
        is set, or a key was ever added with lcrag keys), 503 when the keys cannot be read. A public path is never
        refused: its holder is None without a good key."""
        scheme, _, given = authorization.partition(" ")  # the scheme is case-insensitive (RFC 9110)
        given = given.strip() if scheme.lower() == "bearer" else ""
        if self.api_key and given and self._is_api_key(given):
            return API_KEY, None
        if path in PUBLIC and not given and (self.keys is None or self.keys.read()):
            # The page and /healthz answer at once, from the keys as last read.
            open_server = not self.api_key and (self.keys is None or (self.keys.read() and not self.keys.required()))
            return (ANONYMOUS if open_server else None), None
        try:
            if self.keys is not None and self.keys.stale():  # read off the event loop: the store may be a database
                await anyio.to_thread.run_sync(self.keys.refresh)
        except KeysUnavailable as exc:
            if path in PUBLIC:
                return None, None
            return None, error(503, str(exc), "unavailable_error", {"Retry-After": "1"})
        holder = self.keys.identify(given) if self.keys is not None and given else None
        if holder is None and not self.api_key and not (self.keys is not None and self.keys.required()):
            holder = ANONYMOUS  # no key anywhere: the loopback-only server of one user
        if holder is None and path not in PUBLIC:
            return None, error(401, "missing or wrong API key (Authorization: Bearer KEY)", "authentication_error")
        return holder, None

    def _is_api_key(self, given: str) -> bool:
        # The header's bytes (Latin-1 is how they were decoded) against the key's: an ASCII key either way.
        return hmac.compare_digest(given.encode("latin-1"), self.api_key.encode("latin-1"))

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
