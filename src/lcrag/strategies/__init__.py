from lcrag.core.errors import InputError
from lcrag.core.registry import STRATEGIES
from lcrag.core.types import CORPUS, DOCUMENT, READS_DEFAULT, QuestionSource
from lcrag.strategies.base import QueryContext, Strategy
from lcrag.strategies.prompts import PromptSet
from lcrag.strategies.routing.conditional import Condition, Declined, Routed
from lcrag.strategies.routing.self_route import SelfRoute
from lcrag.strategies.lc_and_rag import (
    RAG,
    ClosedBook,
    LongContext,
    is_unanswerable,
    make_strategy,
)

__all__ = [
    "RAG",
    "ClosedBook",
    "Condition",
    "Declined",
    "LongContext",
    "PromptSet",
    "QueryContext",
    "Routed",
    "SelfRoute",
    "Strategy",
    "document_strategies",
    "is_unanswerable",
    "make_strategy",
    "needs_corpus",
    "strategy_needs",
    "strategy_reads",
    "check_reads",
]


def strategy_needs(name: str) -> str:
    """What of its source the strategy ``name`` reads: "corpus" when it reads only a corpus index (its registered
    ``reads``), else what it reads of a text (its registered meta ``needs``): "question" (closed-book), "document"
    (LC) or "chunks" (retrieval: the default, also for names no longer registered, e.g. in old runs)."""
    if needs_corpus(name):
        return CORPUS
    return STRATEGIES.get(name).meta.get("needs", "chunks") if name in STRATEGIES else "chunks"


def needs_corpus(name: str) -> bool:
    """Whether the strategy ``name`` reads a corpus index only (LongRAG), never a document (its ``reads``)."""
    return strategy_reads(name) == (CORPUS,)


def strategy_reads(name: str) -> tuple[str, ...]:
    """The kinds of source the strategy ``name`` answers over (its registered meta ``reads``): "document" (its
    text), "corpus" (a corpus index's units); a strategy that says nothing, or is no longer registered, reads a
    document's text."""
    return tuple(STRATEGIES.get(name).meta.get("reads", READS_DEFAULT)) if name in STRATEGIES else READS_DEFAULT


def _reading(kind: str) -> list[str]:
    """The registered strategies that read sources of ``kind``."""
    return [n for n in STRATEGIES.names() if n in STRATEGIES and kind in strategy_reads(n)]


def check_reads(name: str, source: QuestionSource) -> None:
    """Refuse, in one line, to run the strategy ``name`` over a source of a kind it does not read."""
    reads = strategy_reads(name)
    if source.kind in reads:
        return
    where = source.source or source.id or "this"
    if source.kind == CORPUS:
        raise InputError(f"strategy {name!r} reads one document's text, and {where} is a corpus index (`lcrag corpus "
                         f"build`): ask it with {', '.join(_reading(CORPUS))} (a strategy reads a corpus when it "
                         f"registers reads=(\"document\", \"corpus\"))")
    raise InputError(f"{name} reads a corpus index (`lcrag corpus build`), and {where} is one document: ask it with "
                     f"{', '.join(_reading(DOCUMENT))}")


def document_strategies() -> tuple[str, ...]:
    """The strategies that answer over one document (every registered one but the corpus-backed)."""
    return STRATEGIES.names_except(reads=(CORPUS,))  # a plugin not imported yet is listed, not imported
