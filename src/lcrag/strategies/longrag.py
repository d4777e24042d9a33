"""LongRAG's long reader over a corpus index: the top-k retrieval units in one prompt, then two turns.

Turn 1 asks for a (possibly long) answer from the concatenated units; turn 2 extracts the short answer from that
long answer with few-shot examples (LongRAG §3.3 and Appendix 6.1). Prompts are the paper's (anchors §4.4); the
turn-2 examples are our own eight, because the paper's come from a dataset hub this toolkit does not reach.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from lcrag.assembly.units import UnitsContext, assemble_units
from lcrag.chunking.units import UNIT_KINDS
from lcrag.core.errors import InputError
from lcrag.readers import streaming
from lcrag.readers.base import Completion, GenerationParams, Reader
from lcrag.retrieval.corpus.settings import FAISS_KINDS
from lcrag.retrieval.corpus import CorpusIndex, UnitHit
from lcrag.core.registry import RETRIEVERS, STRATEGIES, Option
from lcrag.retrieval.corpus import SCORERS
from lcrag.strategies.base import QueryContext, Strategy, Timer, read_completion
from lcrag.core.types import CORPUS, Answer, LLMCall

TURN1 = {
    "nq": (
        "Go through the following context and then extract the answer of the question from the context. Answer the "
        "question directly. Your answer should be very concise. The context is a list of Wikipedia documents, ordered "
        "by title: {titles}. Each Wikipedia document contains a 'title' field and a 'text' field. The context is: "
        "{context}. The question: {question}. "
    ),
    # Missing spaces are the original's.
    "hotpotqa": (
        "Go through the following context and then answer the question The context is a list of Wikipedia documents "
        "titled: {titles}. There are two types of questions: comparison questions, which require a yes or no answer "
        "or a selection from two candidates, and general questions, which demand a concise response. The context is: "
        "{context}. Find the useful documents from the context, then answer the question: {question}.For general "
        "questions, you should use the exact words from the context as the answer to avoid ambiguity. Answer the "
        "question directly and don't output other thing.  "
    ),
}
TURN2 = (
    "As an AI assistant, you have been provided with a question and its long answer. Your task is to derive a very "
    "concise short answer, extracting a substring from the given long answer. Short answer is typically an entity "
    "without any other redundant words.It's important to ensure that the output short answer remains as simple as "
    "possible.\n\nHere are some examples: {examples}Question: {question}\nLong Answer: {long_answer}\nShort Answer: "
)
# The most units one question may retrieve (the same cap as a service request's k): each is scored, read and cut.
MAX_UNITS = 1000
SHORT_ANSWER_TOKENS = 32  # turn 2 extracts an entity from the long answer: a few words

EXAMPLES = (
    ("who wrote the novel pride and prejudice",
     "Pride and Prejudice was written by the English novelist Jane Austen and published in 1813.", "Jane Austen"),
    ("when did the berlin wall fall",
     "The Berlin Wall fell on 9 November 1989, when East Germany opened its border crossings.", "9 November 1989"),
    ("what is the capital city of australia",
     "The capital of Australia is Canberra, not Sydney as is often assumed.", "Canberra"),
    ("how many players does a soccer team have on the field",
     "Each soccer team has eleven players on the field, including the goalkeeper.", "eleven"),
    ("which element has the chemical symbol fe",
     "Fe is the chemical symbol of iron, from the Latin word ferrum.", "iron"),
    ("Are the Danube and the Rhine both rivers in Europe?",
     "Yes, both the Danube and the Rhine are major rivers in Europe.", "yes"),
    ("who was the first person to walk on the moon",
     "Neil Armstrong was the first person to walk on the Moon, on 20 July 1969, during Apollo 11.", "Neil Armstrong"),
    ("Which is taller, the Eiffel Tower or the Statue of Liberty?",
     "The Eiffel Tower, at about 330 metres, is taller than the Statue of Liberty.", "the Eiffel Tower"),
)
_ANSWER_MARKER = re.compile(r"(?i)\banswer:")


def after_answer(text: str) -> str:
    """LongRAG's post-processing: the first non-empty line after the first "answer:" marker, or the whole reply
    (stripped) when it has no marker. A marker with nothing after it gives "" (the caller decides the fallback)."""
    match = _ANSWER_MARKER.search(text)
    if not match:
        return text.strip()
    return first_line(text[match.end():])


def first_line(text: str) -> str:
    """The first line of ``text`` that is not blank, stripped ("" when there is none)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def long_answer_of(reply: str) -> str:
    """Turn 1's answer: what follows "answer:"; when nothing does, the reply itself without the empty marker."""
    return after_answer(reply) or _ANSWER_MARKER.sub("", reply).strip()


def short_answer(reply: str, long_answer: str) -> str:
    """Turn 2's answer: the first non-empty line after "answer:" (or of the reply). When the reader gives nothing
    (an empty reply, or ``Answer: `` alone), fall back to the long answer's first line: turn 2 only extracts a
    substring of the long answer, so that line is the reader's own answer and holds the short one if anything does,
    while "" would score as a wrong answer and hide that turn 1 answered."""
    return first_line(after_answer(reply)) or first_line(long_answer)


def turn2_prompt(question: str, long_answer: str) -> str:
    examples = "".join(f"Question: {q}\nLong Answer: {a}\nShort Answer: {s}\n\n" for q, a, s in EXAMPLES)
    return TURN2.format(examples=examples, question=question, long_answer=long_answer)


# Makes one reader call: (stage, messages, generation parameters, timer) -> the completion.
Complete = Callable[[str, list[dict[str, str]], GenerationParams, Timer], Completion]


@dataclass
class LongRAG:
    """Answer questions over a corpus index with a long reader."""

    index: CorpusIndex
    reader: Reader
    unit: str = "grouped"
    scorer: str = "dense"
    k: int = 4
    context_tokens: int | None = None  # default: whatever the reader's window leaves
    task: str = "nq"  # turn-1 prompt: nq or hotpotqa
    faiss: str | None = None
    long_params: GenerationParams = field(default_factory=lambda: GenerationParams(max_tokens=128))
    short_params: GenerationParams = field(default_factory=lambda: GenerationParams(max_tokens=32))
    name: str = "longrag"
    # How units are ranked for a query, at most k of them (default: the corpus index's own search by ``scorer``); the
    # strategy ranks with the question's retriever, made from its spec over the units.
    rank: Callable[[str, int], list[UnitHit]] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.task not in TURN1:
            raise InputError(f"unknown LongRAG prompt {self.task!r}; choose one of {', '.join(TURN1)}")
        if self.k <= 0:
            raise InputError("k must be positive")

    def _complete(self, stage: str, messages: list[dict[str, str]], params: GenerationParams,
                  timer: Timer) -> Completion:
        with timer.stage(f"llm:{stage}"):
            return self.reader.complete(messages, params)

    def retrieve(self, question: str) -> list[UnitHit]:
        if self.rank is not None:
            return self.rank(question, self.k)
        return self.index.search(question, self.unit, self.scorer, self.k, faiss=self.faiss)

    def turn1_messages(self, question: str, titles: list[str], context: str) -> list[dict[str, str]]:
        quoted = ", ".join(f'"{t}"' for t in titles)
        return [{"role": "user", "content": TURN1[self.task].format(titles=quoted, context=context, question=question)}]

    def _room(self, question: str) -> int:
        """An upper bound on the context's reader tokens: the window less the template, question and answer (titles
        come with the units, so :meth:`assemble` checks the whole prompt once they are known)."""
        empty = self.turn1_messages(question, [], "")
        room = self.reader.context_window - self.long_params.max_tokens - self.reader.count_prompt_tokens(empty)
        if self.context_tokens is not None:
            room = min(room, self.context_tokens)
        if room <= 0:
            raise InputError(f"the prompt alone fills the reader's {self.reader.context_window}-token window")
        return room

    def _overflow(self, question: str, titles: list[str], context: str, context_tokens: int, room: int) -> int:
        """Tokens to remove: the whole rendered prompt (template, titles, context, question) plus the answer's
        max tokens, counted by the reader, against its window; and the context against ``room``."""
        prompt = self.reader.count_prompt_tokens(self.turn1_messages(question, titles, context))
        return max(prompt + self.long_params.max_tokens - self.reader.context_window, context_tokens - room)

    def assemble(self, question: str, hits: list[UnitHit]) -> UnitsContext:
        """Whole units, best first, while they fit the room (units are counted with the index's tokenizer); then
        trailing units are dropped, and a last one cut in the middle, until the whole prompt fits the window
        (:func:`lcrag.assembly.units.assemble_units`)."""
        room = self._room(question)

        def read(units: list[int]) -> tuple[list[str], list[list[str]]]:
            titles = [[d.title for d in self.index.unit_documents(self.unit, u)] for u in units]
            return self.index.unit_texts(self.unit, units), titles

        def overflow(titles: list[str], context: str, context_tokens: int) -> int:
            return self._overflow(question, titles, context, context_tokens, room)

        return assemble_units([(h.unit, h.score) for h in hits], self.index.unit_tokens(self.unit), room, read,
                              self.reader.tokenizer, overflow, self.reader.context_window)

    def run(self, question: str, query: str | None = None, complete: Complete | None = None,
            params: GenerationParams | None = None) -> Answer:
        """The answer to ``question``, from the units retrieved for ``query`` (default: the question). ``complete``
        makes each reader call (the strategy's: streamed, with its call context); default: the reader, directly.
        ``params``: this question's generation parameters (its ``max_tokens`` bounds the long answer, and the
        short answer within it); default: :attr:`long_params` and :attr:`short_params`."""
        complete = complete or self._complete
        if params is not None:
            return replace(self, long_params=params, short_params=replace(
                params, max_tokens=min(SHORT_ANSWER_TOKENS, params.max_tokens))).run(question, query, complete)
        timer = Timer()
        streaming.check_cancelled()  # each step only for a question still asked
        with timer.stage("retrieval"):
            hits = self.retrieve(query or question)
        streaming.check_cancelled()
        with timer.stage("assembly"):
            ctx = self.assemble(question, hits)
        first = complete("long_answer", self.turn1_messages(question, ctx.titles, ctx.text), self.long_params, timer)
        long_answer = long_answer_of(first.text)
        streaming.check_cancelled()
        second = complete("short_answer", [{"role": "user", "content": turn2_prompt(question, long_answer)}],
                          self.short_params, timer)
        short = short_answer(second.text, long_answer)
        return Answer(
            text=short, question=question, strategy=self.name, route=self.name,
            retrieval={"unit": self.unit, "scorer": self.scorer},
            calls=[LLMCall.from_completion("long_answer", first), LLMCall.from_completion("short_answer", second)],
            chunks=ctx.units, timings=timer.timings, truncated_tokens=ctx.truncated_tokens, long_answer=long_answer,
            context_tokens=ctx.tokens, context=ctx.text,
        )


@STRATEGIES.register(
    "longrag", help="top-k corpus units in one long prompt, then a short answer (LongRAG; over a corpus index)",
    # None: what the settings say for every strategy (--unit, the retriever, -k or --budget).
    options=(Option("unit", str, None, "retrieval unit", choices=UNIT_KINDS),
             Option("scorer", str, None, "how units are scored", choices=SCORERS),
             Option("k", int, None, "units retrieved", min=1, max=MAX_UNITS),
             Option("task", str, "nq", "turn-1 prompt", choices=tuple(TURN1)),
             Option("faiss", str, None, "search the corpus's faiss index of this kind instead of exact MaxP",
                    choices=FAISS_KINDS)),
    reads=(CORPUS,),  # a corpus index only: asked over one document, the pipeline refuses it in one line
)
class LongRAGStrategy(Strategy):
    """LongRAG under the strategy contract: ``Pipeline.ask(corpus_index, question, strategy="longrag")``. What the
    settings say for every strategy is read from the context (the retriever scores units, k or the budget bounds
    them, the corpus source names the unit); ``task`` picks the turn-1 prompt."""

    name = route = "longrag"

    def __init__(self, unit: str | None = None, scorer: str | None = None, k: int | None = None, task: str = "nq",
                 faiss: str | None = None):
        self.unit, self.scorer, self.k, self.task, self.faiss = unit, scorer, k, task, faiss

    def run(self, ctx: QueryContext, question: str) -> Answer:
        """The long reader of this context (made once per context: kept in its memo), answering with the question's
        generation parameters (``max_tokens``) and call context."""
        reader = ctx.memo(("longrag", self.unit, self.scorer, self.k, self.task, self.faiss), lambda: self._reader(ctx))

        def complete(stage: str, messages: list[dict[str, str]], params: GenerationParams, timer: Timer):
            return read_completion(replace(ctx, params=params), stage, messages, timer, route=self.route)[2]

        return reader.run(question, ctx.query, complete, ctx.params)

    def _reader(self, ctx: QueryContext) -> LongRAG:
        """LongRAG over the context's corpus units, ranked by the question's retriever, made from its spec (name and
        options) over the units as every strategy's is, unless the ``scorer``, ``faiss`` or ``unit`` option asks for
        the corpus index's own search; as many units as ``k``, else the assembler's k, else as the budget could hold."""
        units = ctx.index()
        unit = self.unit or units.kind
        budget = ctx.assembler.budget
        k = self.k or (ctx.assembler.k if budget is None else units_in_budget(units.index, unit, budget))
        made = {"k": k, "context_tokens": budget, "task": self.task}
        if self.scorer is None and self.faiss is None and unit == units.kind:
            spec = ctx.retriever
            units.retriever(spec)  # made now, before a question waits on it (dense: the embedder loads)

            def rank(query: str, depth: int) -> list[UnitHit]:
                return [UnitHit(s.chunk.index, s.score) for s in units.search(spec, query, depth).chunks]

            return LongRAG(units.index, ctx.reader, unit=unit, scorer=spec.name, rank=rank, **made)
        scorer = self.scorer or ("dense" if self.faiss else ctx.retriever.name)  # faiss indexes embeddings
        units.retriever(RETRIEVERS.get(scorer).spec())  # readies the index to score this way (dense: the embedder)
        return LongRAG(units.index, ctx.reader, unit=unit, scorer=scorer, faiss=self.faiss, **made)


def units_in_budget(index: CorpusIndex, unit: str, budget: int) -> int:
    """Units to retrieve for a token budget: as many of the corpus's smallest units as it could hold (assembly then
    keeps those that fit), at least one and at most :data:`MAX_UNITS`."""
    smallest = max(1, int(index.unit_tokens(unit).min(initial=budget)))
    return max(1, min(MAX_UNITS, math.ceil(budget / smallest)))
