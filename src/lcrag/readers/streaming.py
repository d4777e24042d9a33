"""Live answers: the reader's tokens as it writes them, the stages a question goes through, and a way to stop it.

A caller that wants them (the service) listens for one question with :func:`listening`; readers and strategies
report into the listener through context variables, so no signature between them changes and code that does not
listen pays nothing. Events, each ``(kind, data)``:

- ``retrieved``: the chunks a retrieval step assembled (``chunks``: ChunkUsed objects; ``tokens``: their
  reader tokens, None when the selection did not count them);
- ``call``: an answering call starts (``stage``; ``provisional`` when a later step may replace its answer, as
  Self-Route's RAG step may be followed by LC);
- ``token``: text the reader wrote (``text``, ``stage``, ``provisional``); a reader that cannot stream, or an
  answer from the completion cache, gives its whole answer as one token;
- ``routed``: a routed strategy decided (``fallback``: True when the next step answers instead, ``step`` its name,
  ``decline_probability``).

Cancelling (``Listener.cancelled``) stops the reader's generation: a streaming reader closes its connection, which
OpenAI-compatible servers (llama.cpp, vLLM) take as the end of the request, and no further call starts. The rest of
the question's work stops at its next step boundary: the pipeline, the strategies, retrieval and assembly call
:func:`check_cancelled` between their steps (index, retrieval, assembly, each step of a routed strategy, each level
of a summary tree, each batch of embeddings) and run their long loops through :func:`checked`, each raising
:class:`Cancelled`. Outside a listener (the CLI, an eval) both cost a context-variable lookup and never raise.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lcrag.core.errors import Cancelled

__all__ = ["Cancelled", "Listener", "FinalText", "listening", "emit", "check_cancelled", "checked", "provisional",
           "answering_call", "token_sink", "relaying", "current"]

T = TypeVar("T")
# Items of a long loop between two looks at the cancel (a look costs a context-variable lookup and an Event's flag;
# a few hundred items of any loop here take well under a tenth of a second).
CHECK_EVERY = 256


@dataclass
class Listener:
    on_event: Callable[[str, dict[str, Any]], None] = lambda kind, data: None
    cancelled: threading.Event = field(default_factory=threading.Event)


@dataclass
class AnsweringCall:
    """One answering call being streamed: its tokens go to the listener, marked with the call's stage."""

    listener: Listener
    stage: str
    provisional: bool
    streamed: bool = False

    def token(self, text: str) -> None:
        if text:
            self.streamed = True
            self.listener.on_event("token", {"text": text, "stage": self.stage, "provisional": self.provisional})


class FinalText:
    """The final answer as it streams, for a display that cannot take text back (a terminal, an OpenAI chat
    stream): tokens of a provisional step are left out, the start is stripped as the answer is, and at the end
    :meth:`rest` is what the answer has beyond what was shown (a provisional step that stood, for one)."""

    def __init__(self) -> None:
        self.shown = ""

    def piece(self, kind: str, data: dict[str, Any]) -> str:
        """The text of event ``kind`` to show now ('' when nothing is)."""
        if kind != "token" or data["provisional"]:
            return ""
        piece = data["text"] if self.shown else data["text"].lstrip()
        self.shown += piece
        return piece

    def rest(self, answer: str) -> str | None:
        """What ``answer`` adds to what was shown; None when what was shown is not its start."""
        return answer[len(self.shown):] if answer.startswith(self.shown) else None


# Why context variables here, when lcrag passes what a part reads (its input: the question, the limits) as an
# argument: these carry no input. They are the question's live channel (where its tokens and stages go, and whether
# it was cancelled), which the innermost reader and loops deep in retrieval must reach through every signature in
# between, including plugins' and third-party code's that cannot take one more argument, and which follows the
# question into the threads it fans out to (complete_many and the pool run each call in a copy of the context). A
# part that never streams or checks for a cancel behaves the same whether they are set or not.
_listener: ContextVar[Listener | None] = ContextVar("lcrag_listener", default=None)
_call: ContextVar[AnsweringCall | None] = ContextVar("lcrag_answering_call", default=None)
_provisional: ContextVar[int] = ContextVar("lcrag_provisional", default=0)
_relay: ContextVar[Callable[[str], None] | None] = ContextVar("lcrag_token_relay", default=None)


@contextmanager
def _scoped(variable: ContextVar[T], value: T) -> Iterator[T]:
    """``variable`` set to ``value`` for the ``with`` block, then restored: the one set-and-reset of lcrag."""
    token = variable.set(value)
    try:
        yield value
    finally:
        variable.reset(token)


def listening(listener: Listener) -> AbstractContextManager[Listener]:
    """Inside, the question being answered in this context reports to ``listener`` and is cancelled by it."""
    return _scoped(_listener, listener)


def current() -> Listener | None:
    return _listener.get()


def emit(kind: str, **data: Any) -> None:
    listener = _listener.get()
    if listener is not None:
        listener.on_event(kind, data)


def check_cancelled() -> None:
    """A step boundary: raise :class:`Cancelled` when the question being answered in this context was cancelled."""
    listener = _listener.get()
    if listener is not None and listener.cancelled.is_set():
        raise Cancelled("the question was cancelled")


def checked(items: Iterable[T], every: int = CHECK_EVERY) -> Iterator[T]:
    """``items``, with the cancel looked at before the first and every ``every`` after: a long loop over them (sentences
    scored, windows built, batches embedded) stops within a few items of its question's cancel."""
    listener = _listener.get()
    if listener is None:
        yield from items
        return
    for number, item in enumerate(items):
        if number % every == 0 and listener.cancelled.is_set():
            raise Cancelled("the question was cancelled")
        yield item


def provisional() -> AbstractContextManager[int]:
    """Answers written inside may be replaced by a later step (the first step of a routed strategy)."""
    return _scoped(_provisional, _provisional.get() + 1)


@contextmanager
def answering_call(stage: str) -> Iterator[AnsweringCall | None]:
    """An answering call (not a retriever's or summariser's internal one): its tokens reach the listener."""
    listener = _listener.get()
    if listener is None:
        yield None
        return
    check_cancelled()
    call = AnsweringCall(listener, stage, _provisional.get() > 0)
    listener.on_event("call", {"stage": stage, "provisional": call.provisional})
    with _scoped(_call, call):
        yield call


def token_sink() -> Callable[[str], None] | None:
    """Where a streaming reader sends the text it receives: the current answering call's (or where
    :func:`relaying` sends it), or None."""
    relay = _relay.get()
    if relay is not None:
        return relay
    call = _call.get()
    return call.token if call is not None else None


def relaying(sink: Callable[[str], None]) -> AbstractContextManager[Callable[[str], None]]:
    """Inside, a streaming reader's text goes to ``sink``, which passes on what it chooses to the answering call's
    (a reader pool, :mod:`lcrag.readers.pool`, sends a completion retried on another server without repeating it)."""
    return _scoped(_relay, sink)
