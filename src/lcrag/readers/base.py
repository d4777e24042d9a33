"""The reader interface: chat messages in, text and exact token counts out."""

from __future__ import annotations

import contextvars
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from lcrag.readers import streaming
from lcrag.readers.call_context import Asking
from lcrag.core.tokenization import Tokenizer
from lcrag.core.types import Usage

Message = dict[str, str]


@dataclass
class Completion(Usage):
    """A reader's reply: its text and usage (the fields every call's accounting shares, :class:`Usage`)."""

    text: str = field(kw_only=True)
    # The server's build of the model (OpenAI's ``system_fingerprint``), when it reports one: a cached answer from
    # another build is not reused.
    system_fingerprint: str | None = None
    # When asked for (GenerationParams.top_logprobs): the first generated tokens, each with the most likely
    # candidates at its position, [{"token": chosen, "top": [[candidate, logprob], ...]}, ...]; None when the
    # server returned none.
    logprobs: list[dict] | None = None


@dataclass
class GenerationParams:
    max_tokens: int = 64
    temperature: float = 0.0
    seed: int = 1234
    stop: list[str] = field(default_factory=list)
    top_logprobs: int = 0  # candidates per position to return with their log-probabilities (OpenAI allows <= 20)
    # Names the prompt's document prefix (model, document, prompt) for readers that keep its KV state on disk; not
    # part of the request nor of the completion cache's key (it changes no answer).
    prefix_key: str | None = None
    # What the call is for (the question, its document, the call's route: :mod:`lcrag.readers.call_context`), for
    # readers that answer by it (replay) or place the call by it (a pool); None for a call for no question (a
    # summariser's). Not part of the request nor of the completion cache's key.
    asking: Asking | None = None

    def as_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"max_tokens": self.max_tokens, "temperature": self.temperature, "seed": self.seed}
        if self.stop:
            payload["stop"] = list(self.stop)
        if self.top_logprobs:
            payload.update(logprobs=True, top_logprobs=self.top_logprobs)
        return payload


@runtime_checkable
class Reader(Protocol):
    """An LLM backend. Readers may also offer ``identity`` (see :func:`reader_identity`)."""

    model: str
    context_window: int
    tokenizer: Tokenizer

    def complete(self, messages: list[Message], params: GenerationParams) -> Completion: ...

    def count_prompt_tokens(self, messages: list[Message]) -> int:
        """Prompt tokens the reader will bill for ``messages``, chat template included."""
        ...


def reader_identity(reader: Reader) -> str:
    """What the reader's answers depend on, as one string with no secrets: the key of every cache of its output.

    The model name alone is not enough (two GGUFs named alike, two servers serving one alias); readers that know
    more (a GGUF's content fingerprint, a server's URL) expose it as ``identity``; others fall back to the name.
    """
    return getattr(reader, "identity", None) or reader.model


def complete_many(
    reader: Reader, requests: list[tuple[list[Message], GenerationParams]], max_concurrency: int = 4
) -> list[Completion]:
    """Run requests concurrently (bounded), results in request order. Each call runs in the caller's context (its
    question's listener: a cancel stops the calls in progress, and no further one starts)."""
    if max_concurrency <= 1 or len(requests) <= 1:
        return [_complete(reader, m, p) for m, p in requests]
    context = contextvars.copy_context()
    with ThreadPoolExecutor(max_workers=max_concurrency) as pool:
        return list(pool.map(lambda r: context.copy().run(_complete, reader, *r), requests))


def _complete(reader: Reader, messages: list[Message], params: GenerationParams) -> Completion:
    streaming.check_cancelled()
    return reader.complete(messages, params)
