"""What an answering call is for: the question being answered, its document, and the route of the call.

A reader that needs to know more than the prompt (the replay reader answers from recordings of (question, mode))
reads it here instead of parsing the prompt. Set by context variables, as :mod:`lcrag.readers.streaming` carries a
call's stage, so no signature between strategies and readers changes and readers that do not look pay nothing:

- :func:`asking` is entered once per question, where a strategy is run for it (:meth:`lcrag.pipeline.Pipeline.ask`):
  the question, its :class:`~lcrag.types.Document`, and the strategy's ``route`` (the default route of its calls);
- :func:`answering_route` is entered around each answering call (:func:`lcrag.strategies.base.read_completion`):
  ``"lc"`` when the whole document is in the prompt, ``"rag"`` for retrieved chunks (a cascade's wider step:
  ``"rag-wide"``); a call that names none takes the strategy's.

Calls made outside an answering call (a retriever navigating a tree, a summariser) see no route.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lcrag.types import Document

__all__ = ["Asking", "asking", "current_question", "answering_route", "current_route"]


@dataclass(frozen=True)
class Asking:
    """The question a strategy is answering, over which document, and the route its calls take by default."""

    question: str
    document: Document | None
    route: str | None = None


_asking: ContextVar[Asking | None] = ContextVar("lcrag_asking", default=None)
_route: ContextVar[str | None] = ContextVar("lcrag_call_route", default=None)


@contextmanager
def _scoped(variable: ContextVar, value):
    """``variable`` set to ``value`` for the ``with`` block, then restored."""
    token = variable.set(value)
    try:
        yield value
    finally:
        variable.reset(token)


def asking(question: str, document: Document | None, route: str | None = None) -> AbstractContextManager[Asking]:
    """While a strategy answers ``question`` over ``document`` (``route``: the strategy's own, e.g. ``"lc"``)."""
    return _scoped(_asking, Asking(question, document, route or None))


def current_question() -> Asking | None:
    """The question being answered in this context, or None outside :func:`asking`."""
    return _asking.get()


def answering_route(route: str | None = None) -> AbstractContextManager[str | None]:
    """An answering call on ``route`` (None: the route of the strategy being run, if any)."""
    if not route:
        asked = _asking.get()
        route = asked.route if asked is not None else None
    return _scoped(_route, route)


def current_route() -> str | None:
    """The route of the answering call in progress ("lc", "rag", ...), or None outside one."""
    return _route.get()
