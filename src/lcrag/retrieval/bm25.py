"""BM25 over a document's chunks with tantivy (on-disk index, Lucene-style BM25, k1=1.2, b=0.75)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from lcrag.registry import RETRIEVERS
from lcrag.retrieval.integrity import ArtifactDamaged
from lcrag.types import Chunk, ScoredChunk

if TYPE_CHECKING:
    from lcrag.retrieval.index import DocumentIndex

# tantivy's "default" analyzer splits on non-alphanumeric characters and lowercases; queries are built the same way
# (term queries from words, never the query parser, which raises on quotes, parentheses and AND/OR in questions).
_TERM = re.compile(r"[^\W_]+")
_MAX_TERM_LEN = 40  # tantivy's RemoveLongFilter in the default analyzer


def query_terms(text: str) -> list[str]:
    seen: dict[str, None] = {}
    for word in _TERM.findall(text.lower()):
        if len(word) < _MAX_TERM_LEN:
            seen.setdefault(word, None)
    return list(seen)


class BM25Retriever:
    name = "bm25"

    def __init__(self, chunks: list[Chunk], index_dir: str | Path):
        import tantivy

        self._tantivy = tantivy
        self.chunks = chunks
        self.index_dir = Path(index_dir)
        self._index = tantivy.Index.open(str(self.index_dir))
        self._schema = self._index.schema
        self._searcher = self._index.searcher()

    @property
    def size(self) -> int:
        """Documents in the on-disk index (one per chunk when it is intact)."""
        return self._searcher.num_docs

    @staticmethod
    def _schema_builder():
        import tantivy

        builder = tantivy.SchemaBuilder()
        builder.add_integer_field("idx", stored=True, indexed=False)
        builder.add_text_field("text", stored=False, tokenizer_name="default", index_option="freq")
        return builder.build()

    @classmethod
    def build(cls, chunks: list[Chunk], index_dir: str | Path) -> BM25Retriever:
        """Index ``chunks`` into ``index_dir``, replacing what is there (callers that share it hold a lock).

        Built in a temporary folder beside it and renamed into place, so ``index_dir`` never holds half an index.
        """
        index_dir = Path(index_dir)
        index_dir.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(dir=index_dir.parent, prefix=f".{index_dir.name}.building-"))
        try:
            building.chmod(index_dir.parent.stat().st_mode & 0o777)  # mkdtemp's 0700 would hide a shared cache
            cls._write(chunks, building)
            shutil.rmtree(index_dir, ignore_errors=True)  # an unfinished or set-aside build's leftovers
            os.replace(building, index_dir)
        finally:
            shutil.rmtree(building, ignore_errors=True)
        return cls(chunks, index_dir)

    @classmethod
    def _write(cls, chunks: list[Chunk], directory: Path) -> None:
        import tantivy

        index = tantivy.Index(cls._schema_builder(), path=str(directory))
        writer = index.writer(heap_size=64_000_000, num_threads=1)
        for chunk in chunks:
            writer.add_document(tantivy.Document(idx=chunk.index, text=chunk.text))
        writer.commit()
        writer.wait_merging_threads()

    def run(self, query: str, k: int | None = None) -> list[ScoredChunk]:
        """Chunks that share a term with ``query``, best first (at most ``k``; all matches when ``k`` is None)."""
        tantivy = self._tantivy
        terms = query_terms(query)
        if not terms or not self.chunks:
            return []
        q = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.term_query(self._schema, "text", t)) for t in terms]
        )
        limit = min(k or len(self.chunks), len(self.chunks))
        hits = self._searcher.search(q, limit).hits
        results = [ScoredChunk(self.chunks[self._searcher.doc(addr)["idx"][0]], float(score)) for score, addr in hits]
        # Ties broken by position, so equal scores give the same order on every run.
        results.sort(key=lambda s: (-s.score, s.chunk.index))
        return results


@RETRIEVERS.register("bm25", help="chunks ranked by BM25 (tantivy)")
def bm25_retriever(index: DocumentIndex) -> BM25Retriever:
    """The index's BM25 retriever: its tantivy index is built once and checked before use."""
    bm25_dir = index.dir / "bm25"
    return index.store.open("bm25", ["bm25"], lambda: _open_bm25(index.chunks, bm25_dir),
                            lambda: BM25Retriever.build(index.chunks, bm25_dir))


def _open_bm25(chunks: list[Chunk], bm25_dir: Path) -> BM25Retriever:
    try:
        retriever = BM25Retriever(chunks, bm25_dir)
    except ValueError as error:  # tantivy's error for an index it cannot open
        raise ArtifactDamaged(f"bm25: {error}") from None
    if retriever.size != len(chunks):
        raise ArtifactDamaged(f"bm25 holds {retriever.size} chunks, not {len(chunks)}")
    return retriever
