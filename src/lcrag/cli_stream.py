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
        self.written = ""
        self.listener = streaming.Listener(self.on_event)

    def on_event(self, kind: str, data: dict[str, Any]) -> None:
        if kind != "token" or data["provisional"]:
            return
        piece = data["text"] if self.written else data["text"].lstrip()  # the answer is stripped: so is its start
        if piece:
            self.written += piece
            self.out.write(piece)
            self.out.flush()

    def finish(self, text: str) -> None:
        rest = text[len(self.written):] if text.startswith(self.written) else ("\n" + text if self.written else text)
        self.out.write(rest + "\n")
        self.out.flush()
