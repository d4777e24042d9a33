"""BM25 with tantivy (on-disk index, Lucene-style BM25, k1=1.2, b=0.75): one core for a document's chunks and a
corpus's retrieval units (:mod:`lcrag.retrieval.corpus`), so both index, query and rank text the same way."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lcrag.core.registry import RETRIEVERS
from lcrag.core.text import UNSPACED_LETTERS
from lcrag.retrieval.integrity import ArtifactDamaged
from lcrag.core.types import Chunk, ScoredChunk

if TYPE_CHECKING:
    from lcrag.retrieval.base import IndexView

# tantivy's "default" analyzer splits on non-alphanumeric characters and lowercases; queries are built the same way
# (term queries from words, never the query parser, which raises on quotes, parentheses and AND/OR in questions).
_TERM = re.compile(r"[^\W_]+")
_MAX_TERM_LEN = 40  # tantivy's RemoveLongFilter in the default analyzer


# A run of CJK letters has no space for the analyzer to split on: it would be one term, matched only by the very same
# run. Each run is indexed and queried as its overlapping character pairs instead (Lucene's CJKAnalyzer's bigrams),
# a lone letter as itself; text without them is unchanged.
_UNSPACED_RUN = re.compile(f"[{UNSPACED_LETTERS}]+")


def _pairs(run: re.Match) -> str:
    letters = run.group()
    return letters if len(letters) == 1 else " " + " ".join(map(str.__add__, letters, letters[1:])) + " "


def analyzable(text: str) -> str:
    """``text`` as the BM25 index reads it: CJK runs as their character pairs."""
    return _UNSPACED_RUN.sub(_pairs, text)


def query_terms(text: str) -> list[str]:
    seen: dict[str, None] = {}
    for word in _TERM.findall(analyzable(text).lower()):
        if len(word) < _MAX_TERM_LEN:
            seen.setdefault(word, None)
    return list(seen)


def bm25_schema():
    """The schema of every BM25 index: a stored integer id (chunk or unit position) and an unstored text field.

    Corpus indexes built before this core was shared use the very same fields and options; changing them would
    make those indexes unreadable (or rank differently), so they stay as they are.
    """
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_integer_field("idx", stored=True, indexed=False)
    builder.add_text_field("text", stored=False, tokenizer_name="default", index_option="freq")
    return builder.build()


def write_bm25(directory: str | Path, docs: Iterable[tuple[int, str]], heap_size: int = 64_000_000,
               num_threads: int = 1) -> None:
    """Index ``docs`` ((id, text) pairs) into the empty folder ``directory``.

    ``docs`` is consumed one pair at a time, so a corpus streams its units in batches without holding them all.
    Segment count (threads, heap) does not change scores: tantivy takes BM25 statistics over the whole index.
    """
    import tantivy

    index = tantivy.Index(bm25_schema(), path=str(directory))
    writer = index.writer(heap_size=heap_size, num_threads=num_threads)
    for idx, text in docs:
        writer.add_document(tantivy.Document(idx=idx, text=analyzable(text)))
    writer.commit()
    writer.wait_merging_threads()


def open_bm25(directory: str | Path) -> tuple[Any, Any]:
    """The (schema, searcher) of the index in ``directory``; tantivy raises ValueError when it cannot open it."""
    import tantivy

    index = tantivy.Index.open(str(directory))
    return index.schema, index.searcher()


def terms_query(schema, query: str):
    """The query's words as term queries on the ``text`` field, OR-ed together; None when it has no word."""
    import tantivy

    terms = query_terms(query)
    if not terms:
        return None
    return tantivy.Query.boolean_query(
        [(tantivy.Occur.Should, tantivy.Query.term_query(schema, "text", t)) for t in terms]
    )


def bm25_search(searcher, schema, query: str, k: int) -> list[tuple[int, float]]:
    """The ids of the top ``k`` documents sharing a term with ``query``, with their scores, best first.

    Term queries OR-ed together rather than the query parser, which raises on quotes, parentheses and AND/OR in
    questions. Ties are broken by id, so equal scores give the same order on every run.
    """
    q = terms_query(schema, query)
    if q is None:
        return []
    hits = [(searcher.doc(addr)["idx"][0], float(score)) for score, addr in searcher.search(q, k).hits]
    hits.sort(key=lambda hit: (-hit[1], hit[0]))
    return hits


class BM25Retriever:
    name = "bm25"

    def __init__(self, chunks: list[Chunk], index_dir: str | Path):
        self.chunks = chunks
        self.index_dir = Path(index_dir)
        self._schema, self._searcher = open_bm25(self.index_dir)

    @property
    def size(self) -> int:
        """Documents in the on-disk index (one per chunk when it is intact)."""
        return self._searcher.num_docs

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
        write_bm25(directory, ((chunk.index, chunk.text) for chunk in chunks))

    def run(self, query: str, k: int | None = None) -> list[ScoredChunk]:
        """Chunks that share a term with ``query``, best first (at most ``k``; all matches when ``k`` is None)."""
        if not self.chunks:
            return []
        limit = min(k or len(self.chunks), len(self.chunks))
        hits = bm25_search(self._searcher, self._schema, query, limit)
        return [ScoredChunk(self.chunks[i], score) for i, score in hits]


@RETRIEVERS.register("bm25", help="chunks ranked by BM25 (tantivy)")
def bm25_retriever(index: IndexView) -> BM25Retriever:
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
