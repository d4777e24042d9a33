"""An answer in a terminal (`lcrag ask`, `lcrag chat`): printed as the reader writes it (only the final answer's
tokens: a step a later one may replace, Self-Route's RAG step, is printed once its route is known), then its sources
on stdout and its route, tokens, time and cost on stderr; or as one JSON object."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TextIO

from lcrag.cli.flags import stdout
from lcrag.core.progress import stderr
from lcrag.readers import streaming

if TYPE_CHECKING:
    from lcrag.core.types import Answer


class TerminalAnswer:
    """A listener that writes the final answer's tokens to ``out`` as they arrive; :meth:`finish` writes what is
    left of the answer (a kept first step, or everything when nothing streamed) and ends the line."""

    def __init__(self, out: TextIO):
        self.out = out
        self.text = streaming.FinalText()
        self.listener = streaming.Listener(self.on_event)

    def on_event(self, kind: str, data: dict[str, Any]) -> None:
        piece = self.text.piece(kind, data)
        if piece:
            self.out.write(piece)
            self.out.flush()

    def finish(self, answer: str) -> None:
        rest = self.text.rest(answer)
        self.out.write((rest if rest is not None else "\n" + answer) + "\n")
        self.out.flush()


def show_answer(answer: Answer, cost: float | None, price_as: str | None, as_json: bool, live) -> None:
    """The answer as one JSON object, or its text (ending the live one) and then its provenance."""
    if as_json:
        print(json.dumps({**answer.to_dict(), "cost": {"currency": "USD", "total": cost, "priced_as": price_as}},
                         ensure_ascii=False))
        return
    if live is not None:
        live.finish(answer.text)
    else:
        stdout().print(answer.text, markup=False, highlight=False)
    _print_provenance(answer, cost, price_as)


def _print_provenance(answer: Answer, cost: float | None, price_as: str | None) -> None:
    """The answer's sources on stdout, and its route, tokens, time and cost on stderr."""
    if answer.sources:
        from lcrag.core.provenance import format_sources

        stdout().print(f"Sources: {format_sources(answer.sources)}", markup=False, highlight=False)
    cached = " (from cache)" if answer.calls and all(c.from_cache for c in answer.calls) else ""
    stderr.print(
        f"[dim]{answer.strategy} → {answer.route} · prompt {answer.prompt_tokens} + completion "
        f"{answer.completion_tokens} tokens · {answer.seconds:.2f}s{cached}"
        + (f" · {answer.truncated_tokens} tokens cut from the middle" if answer.truncated_tokens else "")
        + (f" · P(decline) {answer.decline_probability:.3f}" if answer.decline_probability is not None else "")
        + (f" · ${cost:.6f}" + (f" as {price_as}" if price_as else "") if cost is not None else "")
        + (_index_cost_line(answer.index_cost) if answer.index_cost else "")
        + "[/dim]"
    )


def _index_cost_line(cost: dict) -> str:
    state = "built now" if cost["built_now"] else "built before"
    return (f"\n{cost['retriever']} index ({state}, one-off): {cost['calls']} summary calls, "
            f"{cost['prompt_tokens']} prompt + {cost['completion_tokens']} completion tokens")
