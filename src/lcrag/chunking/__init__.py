from lcrag.chunking.chunkers import (
    Chunker,
    SentenceChunker,
    TokenChunker,
    TokenSentenceChunker,
    WordChunker,
    make_chunker,
)

__all__ = ["Chunker", "SentenceChunker", "TokenChunker", "TokenSentenceChunker", "WordChunker", "make_chunker"]
