"""A follow-up question made to stand alone: what retrieval searches for and what the reader is asked, from the
conversation it was asked in.

"Which algorithm does it use?" after "What does the fit command do?" retrieves nothing about fit, and an LC reader
given it alone does not know what "it" is. Two ways to make it whole (LlamaIndex's condense-question chat engine,
Open WebUI's query generation):

- ``reader``: the reader rewrites the question from the latest turns (one short call, in the answer's calls and
  cost, and in the completion cache like every call). Both retrieval and the reader then see the rewritten question.
- ``join``: no model. Retrieval searches for the latest user turns joined with the question; the reader is asked
  the question after the conversation so far, written out. Used when ``condense`` says so, when ``auto`` finds the
  reader too small to rewrite well (measured in benchmarks/results/chat.md), and when a rewrite comes back unusable.

The conversation is text the reader reads, never instructions lcrag acts on: no message names a file, an option or a
tool. The question comes after the document in every prompt, so an LC conversation keeps the document as the prompt
prefix whose KV state the reader reuses turn after turn.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from lcrag.core.errors import InputError
from lcrag.readers.base import GenerationParams, Reader
from lcrag.core.types import LLMCall

CONDENSE_MODES = ("auto", "reader", "join")
ROLES = ("system", "user", "assistant")
# A reader this small rewrites follow-ups worse than joining the turns does (benchmarks/results/chat.md: the bundled
# SmolLM2-135M and Qwen2.5-0.5B); a reader whose size its server does not tell is taken to be able.
AUTO_MIN_PARAMETERS = 1_000_000_000
TURN_CHARS = 2000  # of each earlier message, in the rewrite prompt and the written-out conversation
CONDENSE_PROMPT = (
    "Given a conversation and a follow-up question, rewrite the follow-up question as one standalone question that "
    "names what it refers to. Reply with the question only.\n\n"
    "Conversation:\n{history}\n\nFollow-up question: {question}\nStandalone question:")
JOINED_PROMPT = "The conversation so far:\n{history}\n\nThe question now: {question}"


@dataclass(frozen=True)
class Turn:
    """One earlier message of a conversation."""

    role: str
    text: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise InputError(f"history: a message's role is one of {', '.join(ROLES)}, not {self.role[:20]!r}")
        if not isinstance(self.text, str):
            raise InputError("history: a message's content is text")

    @classmethod
    def of(cls, message: Turn | Mapping) -> Turn:
        if isinstance(message, Turn):
            return message
        if not isinstance(message, Mapping):
            raise InputError("history: each message is an object with a role and a content")
        return cls(str(message.get("role", "")), message.get("content") or "")


@dataclass
class Standalone:
    """A question as it is answered: ``question`` for the reader, ``query`` for retrieval, how they were made
    (``method``: "as-asked" with no history, "condensed" or "joined") and the calls that made them."""

    asked: str
    question: str
    query: str
    method: str = "as-asked"
    calls: list[LLMCall] = field(default_factory=list)
    note: str | None = None  # why a rewrite was not used

    def to_dict(self) -> dict[str, object]:
        data = {"method": self.method, "question": self.question, "retrieval_query": self.query}
        return data | ({"note": self.note} if self.note else {})


def standalone(reader: Reader, history: Iterable[Turn | Mapping], question: str, condense: str = "auto",
               turns: int = 6) -> Standalone:
    """``question`` made to stand alone from the latest ``turns`` messages of ``history`` (oldest first)."""
    if condense not in CONDENSE_MODES:
        raise InputError(f"condense: one of {', '.join(CONDENSE_MODES)}, got {str(condense)[:20]!r}")
    recent = [t for t in map(Turn.of, history) if t.text.strip()][-turns:] if turns > 0 else []
    if not any(t.role == "user" for t in recent):  # nothing asked before: the question stands as asked
        return Standalone(question, question, question)
    if condense == "auto":
        condense = "reader" if able_to_condense(reader) else "join"
    if condense == "join":
        return joined(recent, question)
    return condensed(reader, recent, question)


def able_to_condense(reader: Reader) -> bool:
    """Whether ``auto`` asks this reader to rewrite: unless its server says it has fewer parameters than
    :data:`AUTO_MIN_PARAMETERS`."""
    count = getattr(reader, "parameter_count", None)
    return count is None or count >= AUTO_MIN_PARAMETERS


def joined(recent: list[Turn], question: str) -> Standalone:
    users = [t.text.strip() for t in recent if t.role == "user"][-2:]
    query = " ".join(users + [question.strip()])
    written = JOINED_PROMPT.format(history=_written(recent), question=question.strip())
    return Standalone(question, written, query, "joined")


def condensed(reader: Reader, recent: list[Turn], question: str) -> Standalone:
    prompt = CONDENSE_PROMPT.format(history=_written(recent), question=question.strip())
    # Short and deterministic; the same conversation's rewrite comes from the completion cache.
    completion = reader.complete([{"role": "user", "content": prompt}], GenerationParams(max_tokens=64, stop=["\n"]))
    call = LLMCall.from_completion("condense", completion)
    rewritten = _cleaned(completion.text)
    problem = _unusable(rewritten, question)
    if problem:
        fallback = joined(recent, question)
        fallback.calls, fallback.note = [call], f"the reader's rewrite was not used: {problem}"
        return fallback
    return Standalone(question, rewritten, rewritten, "condensed", [call])


def _written(turns: list[Turn]) -> str:
    names = {"system": "System", "user": "User", "assistant": "Assistant"}
    return "\n".join(f"{names[t.role]}: {' '.join(t.text.split())[:TURN_CHARS]}" for t in turns)


def _cleaned(text: str) -> str:
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    for prefix in ("Standalone question:", "Question:"):
        if line.lower().startswith(prefix.lower()):
            line = line[len(prefix):].strip()
    return line.strip('"“”\' ')


def _unusable(rewritten: str, question: str) -> str | None:
    """Why a rewrite cannot stand for the question, or None: empty, or far longer than a question is."""
    if len(rewritten) < 3:
        return "it was empty"
    if len(rewritten) > 4 * len(question) + 300:
        return "it was longer than a question"
    return None
