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
