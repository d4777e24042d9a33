from lcrag.retrieval.base import Retriever
from lcrag.retrieval.bm25 import BM25Retriever
from lcrag.retrieval.dense import DenseRetriever
from lcrag.retrieval.embedders import (
    Embedder,
    OnnxMiniLMEmbedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    make_embedder,
)
from lcrag.retrieval.hybrid import HybridRetriever
from lcrag.retrieval.index import DocumentIndex

__all__ = [
    "BM25Retriever",
    "DenseRetriever",
    "DocumentIndex",
    "Embedder",
    "HybridRetriever",
    "OnnxMiniLMEmbedder",
    "OpenAIEmbedder",
    "Retriever",
    "SentenceTransformerEmbedder",
    "make_embedder",
]


def __getattr__(name: str):
    if name == "RETRIEVERS":  # deprecated: the registry lists them (lcrag.registry.RETRIEVERS)
        import warnings

        from lcrag.registry import RETRIEVERS

        warnings.warn("lcrag.retrieval.RETRIEVERS is deprecated; use lcrag.registry.RETRIEVERS.names()",
                      DeprecationWarning, stacklevel=2)
        return RETRIEVERS.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
