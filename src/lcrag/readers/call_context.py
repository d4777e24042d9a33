"""What an answering call is for: the question being answered, its document, and the route of the call.

A reader that needs to know more than the prompt (the replay reader answers from recordings of (question, mode);
a pooled reader keeps a document's calls on one server; the completion cache tags a collection's answers) reads it
from the call's :class:`~lcrag.readers.base.GenerationParams` (``params.asking``), never from ambient state and
never by parsing the prompt. It is passed, not looked up:

- :meth:`lcrag.pipeline.pipeline.Pipeline.ask`, the one place a strategy is run for a question, puts the question, its
  :class:`~lcrag.core.types.Document` and the strategy's ``route`` (the default route of its calls) in the strategy's
  :class:`~lcrag.strategies.base.QueryContext` (``ctx.asking``);
- :func:`lcrag.strategies.base.read_completion` gives each answering call its :class:`Asking` with the call's
  route: ``"lc"`` when the whole document is in the prompt, ``"rag"`` for retrieved chunks (a cascade's wider
  step: ``"rag-wide"``); a call that names none takes the strategy's.

Calls made outside an answering call (a retriever navigating a tree, a summariser) carry none.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lcrag.core.types import Document

__all__ = ["Asking"]


@dataclass(frozen=True)
class Asking:
    """The question a strategy is answering, over which document, and the route of the call (for a strategy's
    context: the route its calls take by default)."""

    question: str
    document: Document | None
    route: str | None = None

    def on_route(self, route: str | None) -> Asking:
        """This question asked by a call on ``route`` (None: the strategy's own)."""
        return replace(self, route=route) if route else self
