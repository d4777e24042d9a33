"""`lcrag ask` in a terminal: the answer printed as the reader writes it (only the final answer's tokens: a step a
later one may replace, Self-Route's RAG step, is printed once its route is known)."""

from __future__ import annotations

from typing import Any, TextIO

from lcrag.readers import streaming


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
