"""lcrag: answer questions over long documents with long-context prompting, RAG, OP-RAG or Self-Route."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from lcrag.core.errors import InputError, LcragError

if TYPE_CHECKING:
    from lcrag.documents import load_document, load_documents
    from lcrag.pipeline.pipeline import Pipeline, Settings, ask, index
    from lcrag.strategies import PromptSet
    from lcrag.core.types import Answer, Chunk, Document

__version__ = "0.1.0"

# The public API, imported on first use: ``lcrag --help`` (which imports the package) must not load the pipeline.
_LAZY = {
    "Answer": "lcrag.core.types",
    "Chunk": "lcrag.core.types",
    "Document": "lcrag.core.types",
    "Pipeline": "lcrag.pipeline.pipeline",
    "PromptSet": "lcrag.strategies",
    "Settings": "lcrag.pipeline.pipeline",
    "ask": "lcrag.pipeline.pipeline",
    "index": "lcrag.pipeline.pipeline",
    "load_document": "lcrag.documents",
    "load_documents": "lcrag.documents",
}

__all__ = sorted([*_LAZY, "InputError", "LcragError"])


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lcrag' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
