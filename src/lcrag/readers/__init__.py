"""Readers (LLM backends): one interface, exact token counts."""

from __future__ import annotations

from pathlib import Path

from lcrag.errors import InputError
from lcrag.redaction import redact_url
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

__all__ = [
    "CachedReader",
    "Completion",
    "CompletionCache",
    "GenerationParams",
    "Message",
    "OpenAIChatReader",
    "Reader",
    "complete_many",
    "make_reader",
    "parse_reader_spec",
    "reader_identity",
]


def make_reader(
    spec: str = "smollm2",
    base_url: str | None = None,
    api_key: str | None = None,
    context_window: int | None = None,
    tokenizer: str | None = None,
    threads: int | None = None,
    timeout: float | None = None,
) -> Reader:
    """A reader from a spec.

    - ``smollm2`` (default): the bundled SmolLM2-135M-Instruct, run in-process by llama.cpp;
    - ``PATH.gguf`` or ``gguf:PATH``: any local GGUF, run in-process;
    - ``openai:MODEL`` or ``openai:MODEL@BASE_URL``: an OpenAI-compatible server (base URL and key from the
      arguments or LCRAG_BASE_URL/OPENAI_BASE_URL and LCRAG_API_KEY/OPENAI_API_KEY).
    ``tokenizer`` is a path to a tokenizer.json for servers without a ``/tokenize`` endpoint. ``timeout``: seconds
    one HTTP call may take, retries included (default :data:`lcrag.readers.http.DEFAULT_TIMEOUT`).
    """
    from lcrag.readers.http import DEFAULT_TIMEOUT
    from lcrag.tokenization import HFTokenizer

    kind, name, url = parse_reader_spec(spec)
    if kind == "gguf":
        from lcrag.readers.llamacpp import EmbeddedLlamaReader

        return EmbeddedLlamaReader(name, context_window=context_window or 0, threads=threads, timeout=timeout)
    tok = HFTokenizer(tokenizer) if tokenizer else None
    return OpenAIChatReader(name, base_url=url or base_url, api_key=api_key, context_window=context_window,
                            tokenizer=tok, timeout=timeout or DEFAULT_TIMEOUT)


def parse_reader_spec(spec: str) -> tuple[str, str | None, str | None]:
    """``(kind, model or path, url)`` of a reader spec, checked without loading anything: ``("gguf", None, None)``
    for the bundled model, ``("gguf", PATH, None)``, or ``("openai", MODEL, URL or None)``."""
    from lcrag.readers.http import check_base_url

    spec = spec.strip() if isinstance(spec, str) else ""
    if spec in ("", "smollm2", "default"):
        return "gguf", None, None
    if spec.startswith("gguf:") or spec.endswith(".gguf"):
        path = spec.removeprefix("gguf:")
        if not Path(path).is_file():
            raise InputError(f"GGUF model {path} does not exist")
        return "gguf", path, None
    if spec.startswith("openai:"):
        model, _, url = spec[len("openai:") :].partition("@")
        if not model:
            raise InputError("openai: needs a model name, e.g. openai:gpt-4o-mini")
        return "openai", model, check_base_url(url) if url else None
    raise InputError(f"unknown reader {redact_spec(spec)!r}; use smollm2, PATH.gguf or openai:MODEL[@URL]")


def redact_spec(spec: str | None) -> str | None:
    """A reader or embedder spec fit to print or store: ``openai:MODEL@URL`` with the URL's credentials redacted."""
    if not spec or "@" not in spec:
        return spec
    model, _, url = spec.partition("@")  # the URL itself may hold user:password@
    if "://" not in url:
        return f"{model}@***@{url.rsplit('@', 1)[1]}" if "@" in url else spec
    return f"{model}@{redact_url(url)}"

