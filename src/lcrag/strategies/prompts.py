"""Prompt templates. Every template puts the context before the question, so readers that cache prompt prefixes
(llama.cpp, vLLM) reuse a document's KV cache across questions.

The defaults are LongBench's MultiFieldQA-en prompt (general documents) and its Self-Route variant (Self-Route
paper, Appendix C: the same prompt plus the instruction to write "unanswerable"); closed-book is the LC-vs-RAG
study's filter prompt.
"""

from __future__ import annotations

import json
import string
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from lcrag.assembly.context import check_chunk_format
from lcrag.documents.files import decode_text, read_regular_file
from lcrag.core.errors import InputError

UNANSWERABLE_INSTRUCTION = (
    'If the question cannot be answered based on the information in the article, write "unanswerable".'
)

_QA = (
    "Read the following text and answer briefly.\n\n{context}\n\n"
    "Now, answer the following question based on the above text, only give me the answer and do not output "
    "any other words.{instruction}\n\nQuestion: {question}\nAnswer:"
)


# The placeholders each template must use, and the only ones it may use.
TEMPLATE_PLACEHOLDERS = {
    "lc": ("context", "question"), "rag": ("context", "question"), "self_route": ("context", "question"),
    "closed_book": ("question",),
}


def _check_is_string(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise InputError(f"prompt {name!r} must be a string, not {type(value).__name__}")


def _check_template(name: str, template: object, placeholders: tuple[str, ...]) -> None:
    """Plain ``{name}`` placeholders only: a format spec or a conversion would let a template fail at format time
    (``{context:{question}}``) or allocate without bound (``{context:>999999999}``)."""
    _check_is_string(name, template)
    uses = " and ".join(f"{{{p}}}" for p in placeholders)
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise InputError(f"prompt {name!r} is not a valid template ({exc}); write literal braces as {{{{ and }}}}") from None
    used = set()
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if field not in placeholders:
            raise InputError(f"prompt {name!r} may use only the placeholders {uses}, not {{{field}}}")
        if spec or conversion:
            raise InputError(f"prompt {name!r}: write {{{field}}} without a format spec or conversion "
                             f"(found {{{field}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}})")
        used.add(field)
    missing = [p for p in placeholders if p not in used]
    if missing:
        raise InputError(f"prompt {name!r} must use the placeholders {uses} (missing {{{missing[0]}}})")


@dataclass(frozen=True)
class PromptSet:
    lc: str = _QA.replace("{instruction}", "")
    rag: str = _QA.replace("{instruction}", "")
    self_route: str = _QA.replace("{instruction}", " " + UNANSWERABLE_INSTRUCTION)
    closed_book: str = "Answer briefly with no explanation, {question}"
    system: str = ""
    version: str = "lcrag-1"
    # How a RAG prompt's {context} writes each retrieved chunk (see ContextAssembler.chunk_format): {text}, {rank},
    # {index}, each chunk's separator included; empty: the assembler's own labels ("[Chunk 3] ") and separator.
    chunk_format: str = ""

    def __post_init__(self) -> None:
        for name in ("system", "version"):
            _check_is_string(name, getattr(self, name))
        check_chunk_format(self.chunk_format)
        for name, placeholders in TEMPLATE_PLACEHOLDERS.items():
            _check_template(name, getattr(self, name), placeholders)

    @classmethod
    def from_file(cls, path: str | Path) -> PromptSet:
        """A JSON object overriding some of: lc, rag, self_route, closed_book, system, version, chunk_format."""
        text = decode_text(path, read_regular_file(Path(path)))
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
        allowed = [f.name for f in fields(cls)]
        if not isinstance(data, dict):
            raise InputError(f"{path}: a prompts file must be a JSON object with keys among {', '.join(allowed)}")
        unknown = [key for key in data if key not in allowed]
        if unknown:
            raise InputError(f"{path}: unknown key(s) {', '.join(map(repr, unknown))}; the keys are "
                             f"{', '.join(allowed)}")
        try:
            return replace(cls(), **data)
        except InputError as exc:
            raise InputError(f"{path}: {exc}") from None

    def identity(self) -> dict:
        """The fields that name these prompts (run manifests hash it): all of them, ``chunk_format`` only when set,
        so that run directories made before it existed keep their identity."""
        fields_ = asdict(self)
        if not fields_["chunk_format"]:
            del fields_["chunk_format"]
        return fields_

    def messages(self, template: str, question: str, context: str | None = None) -> list[dict[str, str]]:
        values = {"question": question}
        if context is not None:
            values["context"] = context
        user = template.format(**values)
        messages = [{"role": "system", "content": self.system}] if self.system else []
        messages.append({"role": "user", "content": user})
        return messages
