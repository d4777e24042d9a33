from lcrag.chunking.chunkers import (
    Chunker,
    SentenceChunker,
    TokenChunker,
    WordChunker,
    make_chunker,
)

__all__ = ["Chunker", "SentenceChunker", "TokenChunker", "WordChunker", "make_chunker"]
