"""Readers (LLM backends): one interface, exact token counts."""

from __future__ import annotations

from lcrag.core.errors import InputError
from lcrag.core.redaction import redact_url
from lcrag.readers.base import (
    Completion,
    GenerationParams,
    Message,
    Reader,
    complete_many,
    reader_identity,
)
from lcrag.readers.cache import CachedReader, CompletionCache
from lcrag.readers.openai_compat import OpenAIChatReader
from lcrag.readers.pool import PooledReader
from lcrag.core.registry import READERS, Part

__all__ = [
    "CachedReader",
    "Completion",
    "CompletionCache",
    "GenerationParams",
    "Message",
    "OpenAIChatReader",
    "PooledReader",
    "Reader",
    "complete_many",
    "make_reader",
    "parse_reader_spec",
    "reader_identity",
    "reader_slots",
    "server_stats",
]


def make_reader(
    spec: str = "smollm2",
    base_url: str | None = None,
    api_key: str | None = None,
    context_window: int | None = None,
    tokenizer: str | None = None,
    threads: int | None = None,
    timeout: float | None = None,
    backoff: float | None = None,
    max_backoff: float | None = None,
    server_slots: int | None = None,
) -> Reader:
    """A reader from a spec.

    - ``smollm2`` (default): the bundled SmolLM2-135M-Instruct, run in-process by llama.cpp;
    - ``PATH.gguf`` or ``gguf:PATH``: any local GGUF, run in-process;
    - ``openai:MODEL`` or ``openai:MODEL@BASE_URL``: an OpenAI-compatible server (base URL and key from the
      arguments or LCRAG_BASE_URL/OPENAI_BASE_URL and LCRAG_API_KEY/OPENAI_API_KEY); several base URLs separated
      by commas are a pool of servers serving one model (:mod:`lcrag.readers.pool`: ``backoff`` and
      ``max_backoff`` are the seconds a failing one is skipped, at first and at most); ``server_slots``: calls
      sent to one server at once (default 4);
    - ``replay:SOURCE``: recorded answers replayed, no model call (:mod:`lcrag.readers.replay`; ``tokenizer``: the
      tokenizer standing in for the recorded reader's).
    ``tokenizer`` is a path to a tokenizer.json for servers without a ``/tokenize`` endpoint. ``timeout``: seconds
    one HTTP call may take, retries included (default :data:`lcrag.core.http_client.DEFAULT_TIMEOUT`).
    """
    part, model, url = _reader_part(spec)
    pool = {name: value for name, value in (("backoff", backoff), ("max_backoff", max_backoff),
                                            ("server_slots", server_slots)) if value is not None}
    return part.create(model, url, base_url=base_url, api_key=api_key, context_window=context_window,
                       tokenizer=tokenizer, threads=threads, timeout=timeout, **pool)


def reader_slots(reader: object) -> int:
    """How many calls ``reader`` takes at once (its ``max_concurrency``; at least one, and one when it says
    nothing): the embedded reader's slots, a server's (``--server-slots``), a pool's servers' together."""
    try:
        return max(1, int(getattr(reader, "max_concurrency", 1) or 1))
    except (TypeError, ValueError):
        return 1


def server_stats(reader: Reader | None) -> list[dict]:
    """What each server behind ``reader`` reported and how it is doing (``server_stats()`` of an OpenAI-compatible
    reader or a pool, through a cache's wrapper); [] for readers without servers, or no reader."""
    while reader is not None and not hasattr(reader, "server_stats"):
        reader = getattr(reader, "inner", None)
    return reader.server_stats() if reader is not None else []


def parse_reader_spec(spec: str) -> tuple[str, str | None, str | None]:
    """``(kind, model or path, url)`` of a reader spec, checked without loading anything: ``("gguf", None, None)``
    for the bundled model, ``("gguf", PATH, None)``, or ``("openai", MODEL, URL or None)``; ``kind`` is the name
    of the registered reader (:data:`lcrag.core.registry.READERS`) that reads the spec."""
    part, model, url = _reader_part(spec)
    return part.name, model, url


def _reader_part(spec: str) -> tuple[Part, str | None, str | None]:
    # Each reader declares the specs it reads (aliases, ``prefix:``, ``.suffix``) and how it parses them.
    spec = spec.strip() if isinstance(spec, str) else ""
    found = READERS.match_spec(spec)
    if found is None:
        raise InputError(f"unknown reader {redact_spec(spec)!r}; use {READERS.spec_forms()}")
    part, rest = found
    parse = part.meta.get("parse", _model_without_url)
    model, url = parse(rest)
    return part, model, url


def _model_without_url(rest: str | None) -> tuple[str | None, None]:
    return rest, None


def redact_spec(spec: str | None) -> str | None:
    """A reader or embedder spec fit to print or store: ``openai:MODEL@URL`` with the URL's credentials redacted."""
    if not spec or "@" not in spec:
        return spec
    model, _, url = spec.partition("@")  # the URL itself may hold user:password@
    if "://" not in url:
        return f"{model}@***@{url.rsplit('@', 1)[1]}" if "@" in url else spec
    return f"{model}@{redact_url(url)}"

