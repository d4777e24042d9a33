"""The ``openai`` reader: one OpenAI-compatible server, or a pool of several serving one model (``--base-url`` given
more than once, or URLs separated by commas), as one reader.

Which server of a pool answers a call (:class:`ServerPool`):

- **document affinity**: the calls of a question about a document go to one server, chosen by rendezvous
  (highest-random-weight) hashing of the document's content hash over the servers that are up. While that server is
  up, every question about the document goes there, so its prefix cache keeps the document (llama.cpp and vLLM reuse
  the KV state of a prompt's start, and every prompt puts the document first); when it goes down, only its documents
  move, each to the server next in its own order, and they come back when it does;
- **least outstanding**: a call with no document (over a corpus index, a summary, a token count) goes to the server
  with the fewest calls in progress, ties in turn;
- **a failing server is skipped**: unreachable, past its deadline, or answering 408/409/429/5xx
  (:class:`~lcrag.core.http_client.ServerUnavailable`), it is left out for ``backoff`` seconds, doubled at each failure
  in a row up to ``max_backoff``, and the call is retried at once on another server. When its back-off ends, the next
  call tries it again; a success puts it back in use. With every server down, a call waits for the first back-off to
  end, within its deadline (``--timeout``): no question is dropped while a server may still come back.

A streamed answer whose server fails mid-stream is asked again of another server; the listener is sent only the text
beyond what it already had (the same model decoding greedily writes the same text again).

Each server's reported usage (prompt tokens, and those its prefix cache held) is counted per server
(:meth:`PooledReader.server_stats`): the service's ``/metrics`` shows each server's cached-token share and the pool's.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from lcrag.core.errors import Cancelled, InputError
from lcrag.core.http_client import DEFAULT_TIMEOUT, ServerUnavailable, resolve_endpoints, split_base_urls
from lcrag.readers import streaming
from lcrag.readers.base import Completion, GenerationParams, Message
from lcrag.readers.openai_compat import OpenAIChatReader
from lcrag.core.registry import READERS
from lcrag.core.tokenization import HFTokenizer, Tokenizer
from lcrag.core.types import DOCUMENT

log = logging.getLogger(__name__)

T = TypeVar("T")

# Seconds a failing server is skipped at first, and at most (doubled at each failure in a row in between).
DEFAULT_BACKOFF = 1.0
DEFAULT_MAX_BACKOFF = 60.0
DEFAULT_SLOTS = 4  # calls sent to one server at once, unless told (--server-slots)


@dataclass
class _Server:
    index: int
    name: str  # its URL without credentials: for logs and metrics
    outstanding: int = 0  # calls in progress
    failures: int = 0  # calls it failed, in all
    failures_in_row: int = 0  # since its last success: sets its back-off
    down_until: float = 0.0  # monotonic time before which it is skipped


class ServerPool:
    """Which server a call goes to, and how each is doing: every server's state behind one lock."""

    def __init__(self, names: list[str], backoff: float = DEFAULT_BACKOFF, max_backoff: float = DEFAULT_MAX_BACKOFF,
                 affinity: bool = True):
        if not names:
            raise InputError("a reader pool needs at least one server")
        self._servers = [_Server(i, name) for i, name in enumerate(names)]
        self.backoff, self.max_backoff, self.affinity = backoff, max_backoff, affinity
        self._lock = threading.Lock()
        self._turn = 0  # where ties of least-outstanding start: in turn

    def call(self, key: str | None, attempt: Callable[[int], T], deadline: float,
             cancelled: threading.Event | None = None) -> T:
        """``attempt(index)`` on the server chosen for ``key`` (None: the least busy), again on another while one
        fails with :class:`ServerUnavailable`, until the monotonic ``deadline``; other errors end the call."""
        last: ServerUnavailable | None = None
        while True:
            index, wait = self._take(key)
            if index is None:
                self._wait(wait, deadline, last, cancelled)
                continue
            try:
                result = attempt(index)
            except ServerUnavailable as exc:
                skipped = self._done(index, failed=True)
                last = exc
                if skipped is not None:
                    log.warning("reader server %s failed (%s): skipped for %.3g s, its calls go to another",
                                self._servers[index].name, exc, skipped)
                if time.monotonic() >= deadline:
                    raise self._given_up(last) from None
                continue
            except BaseException:
                self._done(index, failed=None)  # a refused request or a cancel says nothing of the server
                raise
            self._done(index, failed=False)
            return result

    def _take(self, key: str | None) -> tuple[int | None, float]:
        """A server for the call, counted as busy with it; or None and the seconds until a back-off ends."""
        with self._lock:
            now = time.monotonic()
            up = [s for s in self._servers if s.down_until <= now]
            if not up:
                return None, min(s.down_until for s in self._servers) - now
            if key is not None and self.affinity:
                chosen = max(up, key=lambda s: _weight(key, s.name))
            else:
                n = len(self._servers)
                chosen = min(up, key=lambda s: (s.outstanding, (s.index - self._turn) % n))
                self._turn = chosen.index + 1
            chosen.outstanding += 1
            return chosen.index, 0.0

    def _done(self, index: int, failed: bool | None) -> float | None:
        """A call on server ``index`` ended: succeeded, ``failed``, or neither (None). The seconds it is skipped for
        when this failure put it out of use, else None."""
        with self._lock:
            server = self._servers[index]
            server.outstanding -= 1
            if failed is False:
                server.failures_in_row = 0
            if not failed:
                return None
            server.failures += 1
            now = time.monotonic()
            if server.down_until > now:  # calls already under way when it went down do not lengthen its wait
                return None
            server.failures_in_row += 1
            wait = min(self.max_backoff, self.backoff * 2 ** (server.failures_in_row - 1))
            server.down_until = now + wait
            return wait

    def _wait(self, seconds: float, deadline: float, last: ServerUnavailable | None,
              cancelled: threading.Event | None) -> None:
        """Sleep until a server's back-off ends, or fail now when that is past the deadline."""
        if time.monotonic() + seconds >= deadline:
            raise self._given_up(last)
        if cancelled is not None:
            if cancelled.wait(seconds):
                raise Cancelled("the question was cancelled")
        else:
            time.sleep(seconds)

    def _given_up(self, last: ServerUnavailable | None) -> ServerUnavailable:
        return ServerUnavailable(f"none of the {len(self._servers)} reader servers answered within the deadline "
                                 f"(--timeout); last problem: {last or 'every server was backing off'}")

    def stats(self) -> list[dict]:
        """Each server's health: up (not backing off), calls in progress, calls failed."""
        with self._lock:
            now = time.monotonic()
            return [{"server": s.name, "up": s.down_until <= now, "outstanding": s.outstanding,
                     "failures": s.failures} for s in self._servers]


def _weight(key: str, server: str) -> int:
    """Rendezvous hashing's weight of ``server`` for ``key``: the highest among the servers up wins."""
    return int.from_bytes(hashlib.blake2b(f"{key}\0{server}".encode(), digest_size=8).digest(), "big")


def affinity_key(params: GenerationParams) -> str | None:
    """What keeps a call on one server: the content hash of the document its question is about; else the prompt's
    document prefix (``prefix_key``); None (any server) for a question over a corpus index, whose prompts share
    no document."""
    source = params.asking.document if params.asking is not None else None
    if source is not None and getattr(source, "kind", None) == DOCUMENT:
        return source.content_hash
    return params.prefix_key


class _Resumed:
    """A streamed answer's text as the listener is sent it, across attempts on several servers: an attempt after a
    broken stream writes the answer from its start again, and only what goes beyond the text already sent is."""

    def __init__(self, sink: Callable[[str], None]):
        self.sink = sink
        self.sent = 0  # characters the listener has
        self.seen = 0  # characters of this attempt's text so far

    def restart(self) -> None:
        self.seen = 0

    def token(self, piece: str) -> None:
        end = self.seen + len(piece)
        if end > self.sent:
            self.sink(piece[max(0, self.sent - self.seen):])
            self.sent = end
        self.seen = end


class PooledReader:
    """Several OpenAI-compatible servers serving one model, as one reader (see the module's text). ``members``: one
    :class:`OpenAIChatReader` per server, each trying once (the pool retries, on another server)."""

    def __init__(self, members: list[OpenAIChatReader], pool: ServerPool, timeout: float = DEFAULT_TIMEOUT,
                 context_window: int | None = None, tokenizer: Tokenizer | None = None):
        self.members, self.pool, self.timeout = members, pool, timeout
        self.model = members[0].model
        self.identity = members[0].identity
        self.max_concurrency = sum(m.max_concurrency for m in members)
        self.system_fingerprint: str | None = None  # the build a server last reported
        self.tokenizer: Tokenizer = tokenizer or PooledTokenizer(self, f"llama.cpp:{self.identity}")
        self._context_window = context_window

    def call(self, key: str | None, attempt: Callable[[OpenAIChatReader], T]) -> T:
        """``attempt(member)`` on the pool's choice of server for ``key``, within this reader's deadline."""
        listener = streaming.current()
        return self.pool.call(key, lambda index: attempt(self.members[index]), time.monotonic() + self.timeout,
                              listener.cancelled if listener is not None else None)

    @property
    def context_window(self) -> int:
        if self._context_window is None:
            self._context_window = self.call(None, lambda member: member.context_window)
        return self._context_window

    @functools.cached_property
    def parameter_count(self) -> int | None:
        return next((count for member in self.members if (count := member.parameter_count)), None)

    def complete(self, messages: list[Message], params: GenerationParams) -> Completion:
        sink = streaming.token_sink()
        resumed = _Resumed(sink) if sink is not None else None

        def attempt(member: OpenAIChatReader) -> Completion:
            if resumed is None:
                return member.complete(messages, params)
            resumed.restart()
            with streaming.relaying(resumed.token):
                return member.complete(messages, params)

        completion = self.call(affinity_key(params), attempt)
        if completion.system_fingerprint:
            self.system_fingerprint = completion.system_fingerprint
        return completion

    def count_prompt_tokens(self, messages: list[Message]) -> int:
        return self.call(None, lambda member: member.count_prompt_tokens(messages))

    def server_stats(self) -> list[dict]:
        """Per server: what it reported (completions, prompt and cached prompt tokens, cached share) and its health
        (up, outstanding, failures)."""
        return [{**member.tally.snapshot(), **health} for member, health in zip(self.members, self.pool.stats())]

    def close(self) -> None:
        for member in self.members:
            member.close()


class PooledTokenizer:
    """The servers' own tokenizer (``/tokenize``, ``/detokenize``), asked of whichever server of the pool is up."""

    def __init__(self, reader: PooledReader, name: str):
        self._reader = reader
        self.name = name

    def encode(self, text: str) -> list[int]:
        return self._reader.call(None, lambda member: member.tokenizer.encode(text))

    def decode(self, ids: list[int]) -> str:
        return self._reader.call(None, lambda member: member.tokenizer.decode(ids))

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        return self._reader.call(None, lambda member: member.tokenizer.token_spans(text))


def pooled_reader(model: str, urls: list[str], api_key: str | None = None, context_window: int | None = None,
                  tokenizer: Tokenizer | None = None, timeout: float = DEFAULT_TIMEOUT,
                  backoff: float = DEFAULT_BACKOFF, max_backoff: float = DEFAULT_MAX_BACKOFF,
                  affinity: bool = True, server_slots: int = DEFAULT_SLOTS) -> PooledReader:
    """A reader over the servers at ``urls`` (one model; its identity names every server, in order of URL), each
    sent ``server_slots`` calls at once."""
    members = [OpenAIChatReader(model, base_url=url, api_key=api_key, context_window=context_window,
                                tokenizer=tokenizer, timeout=timeout, max_retries=0, max_concurrency=server_slots)
               for url in urls]
    servers = sorted(member.identity.split("@", 1)[1] for member in members)  # openai:MODEL@URL, URL redacted
    for member in members:
        member.identity = f"openai:{model}@{','.join(servers)}"
    pool = ServerPool([member.tally.server for member in members], backoff, max_backoff, affinity)
    return PooledReader(members, pool, timeout, context_window, tokenizer)


def _model_and_url(rest: str) -> tuple[str, str | None]:
    """``(MODEL, URL or None)`` of an ``openai:MODEL[@URL[,URL...]]`` spec, the URLs checked now."""
    model, _, url = rest.partition("@")
    if not model:
        raise InputError("openai: needs a model name, e.g. openai:gpt-4o-mini")
    if url:
        split_base_urls(url)
    return model, url or None


@READERS.register("openai", help="an OpenAI-compatible server (OpenAI, vLLM, llama.cpp server, Ollama), or a pool of "
                  "them serving one model: openai:MODEL[@URL]", prefixes=("openai",), forms=("openai:MODEL[@URL]",),
                  parse=_model_and_url)
def openai_reader(model: str, url: str | None, *, base_url: str | None = None, api_key: str | None = None,
                  context_window: int | None = None, tokenizer: str | None = None, timeout: float | None = None,
                  backoff: float | None = None, max_backoff: float | None = None, server_slots: int | None = None,
                  **_local: object) -> OpenAIChatReader | PooledReader:
    """The reader of an ``openai:`` spec: one server, or a pool when several URLs are given (``backoff``,
    ``max_backoff``: how long a failing one is skipped); ``server_slots``: calls sent to each server at once;
    ``tokenizer``: a tokenizer.json for servers without ``/tokenize``; ``_local`` (threads) is for in-process
    readers."""
    slots = server_slots or DEFAULT_SLOTS
    tok = HFTokenizer(tokenizer) if tokenizer else None
    urls, api_key = resolve_endpoints(url or base_url, api_key, "reader")
    if len(urls) == 1:
        return OpenAIChatReader(model, base_url=urls[0], api_key=api_key, context_window=context_window,
                                tokenizer=tok, timeout=timeout or DEFAULT_TIMEOUT, max_concurrency=slots)
    return pooled_reader(model, urls, api_key, context_window, tok, timeout or DEFAULT_TIMEOUT,
                         DEFAULT_BACKOFF if backoff is None else backoff,
                         DEFAULT_MAX_BACKOFF if max_backoff is None else max_backoff, server_slots=slots)
