"""A small JSON-over-HTTP client with a total deadline and retries, shared by the OpenAI-compatible reader and
embedder.

Every call has one wall-clock deadline (``timeout``, retries and their waits included): httpx's own timeouts are per
operation (a read timeout restarts with every chunk received), so alone they let a silent or trickling server hold a
call for as long as it likes. Credentials never appear in messages: URLs are shown redacted and the API key and the
URL's password are scrubbed from anything a server sends back.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit

from lcrag.core.errors import Cancelled, InputError, ReaderError
from lcrag.core.lazy import lazy_module
from lcrag.core.redaction import redact_url

if TYPE_CHECKING:
    import httpx
else:  # imported on first use (see lcrag.core.lazy)
    httpx = lazy_module("httpx")

log = logging.getLogger(__name__)

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
# Seconds one HTTP call (retries included) may take, unless --timeout says otherwise: room for a long generation.
DEFAULT_TIMEOUT = 600.0

T = TypeVar("T")


class ServerUnavailable(ReaderError):
    """A server that could not be reached or kept failing (a transport error, its deadline, 408/409/429/5xx after
    the retries, a stream that broke): another server of a pool (:mod:`lcrag.readers.pool`) may answer instead. A
    refusal of the request itself (400, 401, ...) is a plain :class:`ReaderError`: every server would refuse it."""


def check_base_url(url: str) -> str:
    """``url`` if it is an http(s) URL with a host; otherwise an :class:`InputError` (credentials redacted)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise InputError(f"bad base URL {redact_url(url)!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"bad base URL {redact_url(url)!r}: give http(s)://HOST[:PORT]/PATH, "
                         f"e.g. http://localhost:8000/v1")
    return url


def split_base_urls(value: str) -> list[str]:
    """The servers of a ``--base-url`` value, separated by commas (a pool of servers serving one model; a comma
    inside a URL's credentials is written %2C), each checked: a malformed one is an :class:`InputError` naming it."""
    urls = [url.strip() for url in value.split(",")]
    if len(urls) > 1 and not all(urls):
        raise InputError(f"bad base URL list {redact_url(value)!r}: an empty entry between commas")
    if len({url.rstrip("/") for url in urls}) < len(urls):
        raise InputError(f"bad base URL list {redact_url(value)!r}: a server is given twice")
    return [check_base_url(url) for url in urls]


class DeadlineExceeded(Exception):
    """A call did not finish within its deadline (internal: turned into a ReaderError naming the URL)."""


def run_within(seconds: float, call: Callable[[], T]) -> T:
    """``call()``'s result (or exception), or :class:`DeadlineExceeded` once ``seconds`` have passed.

    The call runs in a daemon thread: a blocking socket read cannot be interrupted from outside, so on the deadline
    the thread is left to end on httpx's own timeout while the caller goes on; being a daemon, it never keeps the
    process alive.
    """
    outcome: dict[str, object] = {}
    done = threading.Event()

    def target() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed over to the caller's thread, re-raised there
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, daemon=True, name="lcrag-http-call").start()
    if not done.wait(max(seconds, 0.0)):
        raise DeadlineExceeded
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


def per_operation_timeout(remaining: float) -> httpx.Timeout:
    """httpx's own timeouts for what is left of a deadline; a little longer, so that the deadline speaks first."""
    return httpx.Timeout(remaining + 1.0, connect=min(remaining + 1.0, 10.0))


def secrets_of(base_url: str, api_key: str | None) -> list[str]:
    """The strings that must never be shown: the API key and the URL's user name and password."""
    parts = urlsplit(base_url)
    return [s for s in (api_key, parts.password, parts.username) if s]


def scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def resolve_endpoints(base_url: str | None, api_key: str | None, what: str) -> tuple[list[str], str | None]:
    """Base URLs (one, or several separated by commas: :func:`split_base_urls`) and key from the arguments, else
    LCRAG_BASE_URL/OPENAI_BASE_URL and LCRAG_API_KEY/OPENAI_API_KEY."""
    base_url = base_url or os.environ.get("LCRAG_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
    if not base_url:
        raise InputError(f"an OpenAI-compatible {what} needs a base URL (--base-url, LCRAG_BASE_URL or OPENAI_BASE_URL)")
    api_key = api_key or os.environ.get("LCRAG_API_KEY") or os.environ.get("OPENAI_API_KEY")
    return [url.rstrip("/") for url in split_base_urls(base_url)], api_key


def resolve_endpoint(base_url: str | None, api_key: str | None, what: str) -> tuple[str, str | None]:
    """One server's base URL and key (:func:`resolve_endpoints`): of several, the first (an embedder reads one
    server; the reader balances over all of them)."""
    urls, api_key = resolve_endpoints(base_url, api_key, what)
    return urls[0], api_key


class HttpClient:
    """JSON over HTTP. A POST is retried on transport errors and on 408/409/429/5xx (exponential backoff with
    jitter, or the server's Retry-After) while its deadline of ``timeout`` seconds lasts; then it fails with a
    :class:`ReaderError` naming the (redacted) URL."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        max_connections: int = 16,
    ):
        self.base_url = base_url.rstrip("/")
        self.shown_url = redact_url(self.base_url)
        self.timeout = float(timeout)
        self._secrets = secrets_of(self.base_url, api_key)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=per_operation_timeout(self.timeout),
            limits=httpx.Limits(max_connections=max_connections),
        )
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff

    def _delay(self, attempt: int, response: httpx.Response | None) -> float:
        if response is not None:
            retry_after = response.headers.get("retry-after")
            if retry_after:
                try:
                    return min(float(retry_after), self.max_backoff)
                except ValueError:
                    pass
        # Exponential backoff with full jitter.
        return random.uniform(0, min(self.max_backoff, self.backoff * 2**attempt))

    def _late(self, url: str, last_problem: str = "") -> ReaderError:
        after = f"; last problem: {last_problem}" if last_problem else ""
        return ServerUnavailable(f"{url} gave no answer within the {self.timeout:g} s deadline (--timeout){after}")

    def _request(self, method: str, path: str, deadline: float, payload: dict | None = None) -> httpx.Response:
        remaining = deadline - time.monotonic()
        kwargs = {"json": payload} if payload is not None else {}
        return run_within(remaining, lambda: self._client.request(
            method, path, timeout=per_operation_timeout(remaining), **kwargs))

    def post_json(self, path: str, payload: dict) -> dict:
        url = self.shown_url + path
        deadline = time.monotonic() + self.timeout
        last_problem = ""
        for attempt in range(self.max_retries + 1):
            response: httpx.Response | None = None
            try:
                response = self._request("POST", path, deadline, payload)
            except DeadlineExceeded:
                raise self._late(url, last_problem) from None
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                last_problem = scrub(f"{type(exc).__name__}: {exc}", self._secrets)
            else:
                if response.status_code < 400:
                    try:
                        return response.json()
                    except ValueError:
                        raise ReaderError(f"{url} answered with invalid JSON") from None
                if response.status_code not in RETRY_STATUS:
                    body = scrub(response.text[:200].strip(), self._secrets)
                    raise ReaderError(f"{url} answered {response.status_code}: {body}")
                last_problem = f"HTTP {response.status_code}"
            if attempt < self.max_retries:
                self._wait_to_retry(url, attempt, response, deadline, last_problem)
        raise ServerUnavailable(f"{url} failed after {self.max_retries + 1} attempts ({last_problem})")

    def _wait_to_retry(self, url: str, attempt: int, response: httpx.Response | None, deadline: float,
                       last_problem: str) -> None:
        """Sleep before retry ``attempt + 1``, or fail now when the wait would pass the deadline."""
        delay = self._delay(attempt, response)
        if time.monotonic() + delay >= deadline:
            raise self._late(url, last_problem)
        log.info("%s failed (%s); retry %d/%d in %.1fs", url, last_problem, attempt + 1, self.max_retries, delay)
        time.sleep(delay)

    def post_stream(self, path: str, payload: dict, cancelled: threading.Event | None = None) -> Iterator[dict]:
        """The JSON objects of a server-sent event stream (``data: {...}`` lines, up to ``data: [DONE]``).

        Retried like :meth:`post_json` until the first event arrives (a half-streamed answer cannot be retried
        without repeating its tokens); within the same deadline. When ``cancelled`` is set, or the caller stops
        iterating, the connection is shut down, which tells the server to stop generating, and
        :class:`~lcrag.core.errors.Cancelled` is raised.
        """
        url = self.shown_url + path
        deadline = time.monotonic() + self.timeout
        last_problem = ""
        for attempt in range(self.max_retries + 1):
            stream = _EventStream(self._client, path, payload, deadline)
            try:
                first = True
                for event in stream.events(cancelled, deadline):
                    first = False
                    yield event
                return
            except DeadlineExceeded:
                raise self._late(url, last_problem) from None
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                if not first:
                    raise ServerUnavailable(scrub(f"{url}: the stream broke: {type(exc).__name__}: {exc}",
                                                  self._secrets)) from None
                last_problem = scrub(f"{type(exc).__name__}: {exc}", self._secrets)
            except _StatusError as exc:
                if exc.status not in RETRY_STATUS:
                    raise ReaderError(f"{url} answered {exc.status}: {scrub(exc.body, self._secrets)}") from None
                last_problem = f"HTTP {exc.status}"
            finally:
                stream.close()
            if attempt < self.max_retries:
                self._wait_to_retry(url, attempt, None, deadline, last_problem)
        raise ServerUnavailable(f"{url} failed after {self.max_retries + 1} attempts ({last_problem})")

    def get_json(self, path: str) -> dict:
        url = self.shown_url + path
        try:
            response = self._request("GET", path, time.monotonic() + self.timeout)
            response.raise_for_status()
            return response.json()
        except DeadlineExceeded:
            raise self._late(url) from None
        except httpx.HTTPStatusError as exc:
            status = exc.response.status_code
            failed = ServerUnavailable if status in RETRY_STATUS else ReaderError
            raise failed(f"{url} failed: HTTP {status}") from None
        except httpx.HTTPError as exc:
            raise ServerUnavailable(scrub(f"{url} failed: {type(exc).__name__}: {exc}", self._secrets)) from None
        except ValueError as exc:
            raise ReaderError(scrub(f"{url} failed: {type(exc).__name__}: {exc}", self._secrets)) from None

    def close(self) -> None:
        self._client.close()


class _StatusError(Exception):
    def __init__(self, status: int, body: str):
        super().__init__(status)
        self.status, self.body = status, body


class _EventStream:
    """One streamed POST read by a daemon thread into a queue, so that the caller can stop waiting at any moment
    (a cancel, the deadline) and end the request by shutting its socket down: closing a socket does not wake a
    thread blocked reading it, shutting it down does, and the server sees the connection end."""

    _END = object()

    def __init__(self, client: httpx.Client, path: str, payload: dict, deadline: float):
        self._queue: queue.Queue = queue.Queue()
        self._socket: socket.socket | None = None
        self._closed = threading.Event()
        self._finished = False  # the whole stream arrived: its connection goes back to the pool, untouched
        remaining = deadline - time.monotonic()
        threading.Thread(target=self._read, args=(client, path, payload, remaining), daemon=True,
                         name="lcrag-http-stream").start()

    def _read(self, client: httpx.Client, path: str, payload: dict, remaining: float) -> None:
        try:
            with client.stream("POST", path, json=payload, timeout=per_operation_timeout(remaining)) as response:
                stream = response.extensions.get("network_stream")
                self._socket = stream.get_extra_info("socket") if stream is not None else None
                if self._closed.is_set():
                    return
                if response.status_code >= 400:
                    raise _StatusError(response.status_code, response.read().decode("utf-8", "replace")[:200].strip())
                for line in response.iter_lines():
                    if self._closed.is_set():
                        return
                    self._queue.put(line)
            self._queue.put(self._END)
        except BaseException as exc:  # handed over to the caller's thread
            self._queue.put(exc)

    def events(self, cancelled: threading.Event | None, deadline: float) -> Iterator[dict]:
        while True:
            if cancelled is not None and cancelled.is_set():
                raise Cancelled("the request was cancelled")
            if time.monotonic() >= deadline:
                raise DeadlineExceeded
            try:
                item = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            if item is self._END:
                self._finished = True
                return
            if isinstance(item, BaseException):
                raise item
            data = item[len("data:"):].strip() if item.startswith("data:") else ""
            if not data:
                continue  # a blank line, a comment or an ``event:`` name
            if data == "[DONE]":
                self._finished = True
                return
            try:
                event = json.loads(data)
            except ValueError:
                raise ReaderError(f"the server streamed an event that is not JSON: {data[:80]!r}") from None
            if isinstance(event, dict):
                yield event

    def close(self) -> None:
        if self._finished:
            return
        self._closed.set()
        if self._socket is not None:
            try:
                self._socket.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed by the server or by the reading thread
                pass
