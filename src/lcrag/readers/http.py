"""A small JSON-over-HTTP client with timeouts and retries, shared by the OpenAI-compatible reader and embedder."""

from __future__ import annotations

import logging
import os
import random
import time

import httpx

from lcrag.errors import InputError, ReaderError

log = logging.getLogger(__name__)

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


def resolve_endpoint(base_url: str | None, api_key: str | None, what: str) -> tuple[str, str | None]:
    """Base URL and key from the arguments, else LCRAG_BASE_URL/OPENAI_BASE_URL and LCRAG_API_KEY/OPENAI_API_KEY."""
    base_url = base_url or os.environ.get("LCRAG_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
    if not base_url:
        raise InputError(f"an OpenAI-compatible {what} needs a base URL (--base-url, LCRAG_BASE_URL or OPENAI_BASE_URL)")
    api_key = api_key or os.environ.get("LCRAG_API_KEY") or os.environ.get("OPENAI_API_KEY")
    return base_url.rstrip("/"), api_key


class HttpClient:
    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 600.0,
        max_retries: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        max_connections: int = 16,
    ):
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
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

    def post_json(self, path: str, payload: dict) -> dict:
        url = self.base_url + path
        last_problem = ""
        for attempt in range(self.max_retries + 1):
            response: httpx.Response | None = None
            try:
                response = self._client.post(path, json=payload)
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                last_problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code < 400:
                    try:
                        return response.json()
                    except ValueError:
                        raise ReaderError(f"{url} answered with invalid JSON") from None
                if response.status_code not in RETRY_STATUS:
                    raise ReaderError(f"{url} answered {response.status_code}: {response.text[:200].strip()}")
                last_problem = f"HTTP {response.status_code}"
            if attempt < self.max_retries:
                delay = self._delay(attempt, response)
                log.info("%s failed (%s); retry %d/%d in %.1fs", url, last_problem, attempt + 1, self.max_retries, delay)
                time.sleep(delay)
        raise ReaderError(f"{url} failed after {self.max_retries + 1} attempts ({last_problem})")

    def get_json(self, path: str) -> dict:
        try:
            response = self._client.get(path)
            response.raise_for_status()
            return response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise ReaderError(f"{self.base_url}{path} failed: {exc}") from None

    def close(self) -> None:
        self._client.close()
