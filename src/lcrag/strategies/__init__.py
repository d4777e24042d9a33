from lcrag.strategies.base import QueryContext, Strategy
from lcrag.strategies.prompts import PromptSet
from lcrag.strategies.strategies import (
    RAG,
    STRATEGY_NAMES,
    ClosedBook,
    LongContext,
    SelfRoute,
    is_unanswerable,
    make_strategy,
)

__all__ = [
    "RAG",
    "STRATEGY_NAMES",
    "ClosedBook",
    "LongContext",
    "PromptSet",
    "QueryContext",
    "SelfRoute",
    "Strategy",
    "is_unanswerable",
    "make_strategy",
]
