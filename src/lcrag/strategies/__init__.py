from lcrag.registry import STRATEGIES
from lcrag.strategies.base import QueryContext, Strategy
from lcrag.strategies.prompts import PromptSet
from lcrag.strategies.routing import Condition, Declined, Routed
from lcrag.strategies.lc_and_rag import (
    RAG,
    ClosedBook,
    LongContext,
    SelfRoute,
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
]


def strategy_needs(name: str) -> str:
    """What the strategy ``name`` reads (its registered meta ``needs``): "question" (closed-book), "document" (LC),
    "chunks" (retrieval over the document: the default, also for names no longer registered, e.g. in old runs) or
    "corpus" (a corpus index: LongRAG)."""
    return STRATEGIES.get(name).meta.get("needs", "chunks") if name in STRATEGIES else "chunks"


def needs_corpus(name: str) -> bool:
    """Whether the strategy ``name`` reads a corpus index (LongRAG) instead of the document's own index."""
    return strategy_needs(name) == "corpus"


def document_strategies() -> tuple[str, ...]:
    """The strategies that answer over one document (every registered one but the corpus-backed)."""
    return STRATEGIES.names_except(needs="corpus")
