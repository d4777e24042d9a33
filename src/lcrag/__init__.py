"""lcrag: answer questions over long documents with long-context prompting, RAG, OP-RAG or Self-Route."""

from lcrag.documents import load_document, load_documents
from lcrag.errors import InputError, LcragError
from lcrag.pipeline import Pipeline, Settings, ask, index
from lcrag.strategies import PromptSet
from lcrag.types import Answer, Chunk, Document

__version__ = "0.1.0"

__all__ = [
    "Answer",
    "Chunk",
    "Document",
    "InputError",
    "LcragError",
    "Pipeline",
    "PromptSet",
    "Settings",
    "ask",
    "index",
    "load_document",
    "load_documents",
]
