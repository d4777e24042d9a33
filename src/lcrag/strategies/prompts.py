"""Prompt templates. Every template puts the context before the question, so readers that cache prompt prefixes
(llama.cpp, vLLM) reuse a document's KV cache across questions.

The defaults are LongBench's MultiFieldQA-en prompt (general documents) and its Self-Route variant (Self-Route
paper, Appendix C: the same prompt plus the instruction to write "unanswerable"); closed-book is the LC-vs-RAG
study's filter prompt.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass, fields, replace
from pathlib import Path

from lcrag.errors import InputError

UNANSWERABLE_INSTRUCTION = (
    'If the question cannot be answered based on the information in the article, write "unanswerable".'
)

_QA = (
    "Read the following text and answer briefly.\n\n{context}\n\n"
    "Now, answer the following question based on the above text, only give me the answer and do not output "
    "any other words.{instruction}\n\nQuestion: {question}\nAnswer:"
)


@dataclass(frozen=True)
class PromptSet:
    lc: str = _QA.replace("{instruction}", "")
    rag: str = _QA.replace("{instruction}", "")
    self_route: str = _QA.replace("{instruction}", " " + UNANSWERABLE_INSTRUCTION)
    closed_book: str = "Answer briefly with no explanation, {question}"
    system: str = ""
    version: str = "lcrag-1"

    _FIELDS_NEEDING_CONTEXT = ("lc", "rag", "self_route")

    def __post_init__(self) -> None:
        for name in ("lc", "rag", "self_route", "closed_book"):
            template = getattr(self, name)
            names = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
            need = {"question", "context"} if name in self._FIELDS_NEEDING_CONTEXT else {"question"}
            if not need <= names or names - {"question", "context"}:
                raise InputError(
                    f"prompt {name!r} must use the placeholders {{{'}, {'.join(sorted(need))}}} and no others"
                )

    @classmethod
    def from_file(cls, path: str | Path) -> PromptSet:
        """A JSON object overriding some of: lc, rag, self_route, closed_book, system, version."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"cannot read prompts from {path}: {exc}") from None
        allowed = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or set(data) - allowed:
            raise InputError(f"{path}: prompts file must be a JSON object with keys among {sorted(allowed)}")
        return replace(cls(), **data)

    def messages(self, template: str, question: str, context: str | None = None) -> list[dict[str, str]]:
        values = {"question": question}
        if context is not None:
            values["context"] = context
        user = template.format(**values)
        messages = [{"role": "system", "content": self.system}] if self.system else []
        messages.append({"role": "user", "content": user})
        return messages
