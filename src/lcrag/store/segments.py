"""A collection as a source (:class:`lcrag.core.types.QuestionSource`): its files as one document, and its index made
of their segments. It lives with the stores, below the strategies, so a question over a collection never climbs
above the layer that answers it.

Each file is parsed, chunked and embedded once, by content (:class:`lcrag.store.base.SegmentKey`: the file's
SHA-256, the chunker and the embedder): the same file in two collections, or a collection that gains a file, never
chunks or embeds the other files again. A collection is read as one :class:`CollectionDocument` (its files' texts
joined in name order, each a part, so answers cite file and page as before); its :class:`CollectionIndex` stacks
the files' chunks and embedding rows, and its BM25 is a tantivy index in memory, per collection and chunking,
to which a new file's chunks are added and from which a removed file's are deleted
(:class:`lcrag.store.live_bm25.LiveBM25`).

A collection larger than the reader's window is read the LongRAG way: LC reads whole files ranked by retrieval, the
best that fit the window (LongRAG's long units), and says which (a ``read`` event); below the window it reads the
collection's text as any document's."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import threading
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from functools import cached_property
from bisect import bisect_left, bisect_right
from itertools import islice, takewhile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lcrag.assembly.truncation import TruncatedText, best_that_fit, truncate_middle
from lcrag.chunking import Chunker, SentenceChunker
from lcrag.documents.loaders import join_documents
from lcrag.documents.sandbox import die_with
from lcrag.core.errors import LcragError
from lcrag.core.files import atomic_write_text
from lcrag.core.lru import SizedLRU
from lcrag.readers import streaming
from lcrag.core.registry import RETRIEVERS, PartSpec
from lcrag.core.tokenization import Tokenizer
from lcrag.retrieval.embedders import Embedder, uncached
from lcrag.retrieval.index import CHUNK_OVERHEAD_BYTES, DocumentIndex, ProgressFactory
from lcrag.retrieval.sentence_window import SentenceWindowRetriever
from lcrag.store.base import Segment, SegmentKey
from lcrag.store.live_bm25 import LiveBM25, SegmentBM25, first_difference
from lcrag.core.types import Chunk, Document, IndexParts, LongRead, ReadText, ScoredChunk, SourceIndex, SpanChunk

if TYPE_CHECKING:
    import numpy as np

# A collection's text longer than this many characters per token of room is taken as over the window without
# counting it (text averages 3-5 characters a token); shorter, it is counted once per tokenizer and window. Taken as
# over when it is not, LC reads every file whole all the same, in the collection's order.
_COUNT_WHOLE_CHARS_PER_TOKEN = 8
_CHUNK_HERE_CHARS = 1 << 20  # a file's text longer than this is chunked in a process of its own
_SPANS_KEPT = 200_000  # files' chunk spans kept in memory (a few hundred bytes each)
_LIVE_BM25_KEPT = 256  # collections' live BM25 indexes kept (one per collection and chunking)
# The chunking key of a file's sentence segments (sentence-window's sentences, syntok's, and their vectors).
SENTENCES = "sentence-window:syntok"
# Retrievers made of the chunks' vectors: loaded from the store before a collection index's lock is taken.
_CHUNK_VECTOR_RETRIEVERS = ("dense", "hybrid", "tree")
_WRITE_PIECE = 1 << 18  # characters of a text written at a time for the chunking process (a few milliseconds)


@dataclass(frozen=True)
class FileEntry:
    """One file of a collection as read: its public name, the SHA-256 of its bytes and its parsed text (one
    document; a file of several records is their join)."""

    name: str
    content_hash: str
    document: Document


@dataclass(frozen=True)
class CollectionDocument(Document):
    """A collection's files as one document (their texts joined in name order, each a part), built by
    :func:`collection_document`; its index is made of the files' segments and, over the window, LC reads its best
    files whole."""

    files: tuple[FileEntry, ...] = field(default=(), compare=False, repr=False)
    collection_id: str = field(default="", compare=False)
    segments: Segments | None = field(default=None, compare=False, repr=False)
    # Each file's line of :attr:`content_hash` (its name and its text's hash), kept so the next version's document
    # reuses those of the files before the first one changed.
    lines: tuple[str, ...] = field(default=(), compare=False, repr=False)
    # The indexes made of this document, by chunker key (weakly: an index the pipeline let go is gone), which the
    # next version's indexes take their first files' chunks from (:attr:`basis`).
    indexes: dict[str, weakref.ref] = field(default_factory=dict, compare=False, repr=False)
    # (how many of the first files are the previous version's, that version's ``indexes``), else None
    basis: tuple[int, dict[str, weakref.ref]] | None = field(default=None, compare=False, repr=False)

    @cached_property
    def content_hash(self) -> str:
        """Of the files' names and parsed texts (each text's own hash): computed without reading the whole text."""
        names = "\n".join(self.lines or [_hash_line(f) for f in self.files])
        return hashlib.sha256(f"collection\n{names}".encode("utf-8", "surrogateescape")).hexdigest()

    def open_index(self, parts: IndexParts) -> SourceIndex:
        """Its index, made of its files' segments (a :class:`CollectionIndex`), kept as any text's."""
        return parts.text_index(self, made_as=CollectionIndex)

    def long_read(self, index: Callable[[], SourceIndex], retriever: PartSpec) -> LongRead | None:
        """What LC reads for a question: its text when it fits the limit, else its files whole, ranked by
        ``retriever`` (its spec: name and options), the best that fit."""
        whole: dict[tuple[str, int], TruncatedText | None] = {}  # per tokenizer and limit: the text, if it fits
        lock = threading.Lock()

        def long_text(question: str, tokenizer: Tokenizer, limit: int) -> ReadText:
            with lock:
                key = (tokenizer.name, limit)
                if key not in whole:
                    whole[key] = self._whole(tokenizer, limit)
                fits = whole[key]
            if fits is not None:
                return fits
            return index().read_best(question, retriever, tokenizer, limit)  # its CollectionIndex's files

        return long_text

    def _whole(self, tokenizer, limit: int) -> TruncatedText | None:
        """The collection's text when it fits ``limit`` tokens (counted only when it may), else None."""
        if len(self.text) > limit * _COUNT_WHOLE_CHARS_PER_TOKEN:
            return None
        kept = truncate_middle(self.text, tokenizer, limit)
        return None if kept.cut_tokens else kept

    def units(self) -> list[Chunk]:
        """Each file as one unit (its heading and text, as in :attr:`text`), numbered in name order."""
        units = []
        for number, (offset, part) in enumerate(self.parts):
            start = offset - (len(part.title) + 2 if part.title and len(self.parts) > 1 else 0)
            end = offset + len(part.text)
            units.append(SpanChunk(number, start, end, self.text))
        return units


def collection_document(name: str, collection_id: str, files: list[FileEntry], segments: Segments,
                        previous: Document | None = None) -> Document:
    """The collection's files as one :class:`CollectionDocument` (each file a part, titled by its name). Made from
    ``previous`` (the collection's document at an earlier version, same id) when there is one: the files before
    the first one that changed keep their text, parts and chunks, and only the rest is joined again, so a file
    added after the others costs the same in a collection of 100 files or of 5,000."""
    kept = _kept_files(previous, collection_id, files)
    if kept is None:
        joined = join_documents([f.document for f in files], Path(name))
        parts = joined.parts if len(files) > 1 else ((0, files[0].document),)  # one part per file, always
        return CollectionDocument(text=joined.text, id=name, title=name, source=name, parts=parts, files=tuple(files),
                                  collection_id=collection_id, segments=segments,
                                  lines=tuple(_hash_line(f) for f in files))
    if kept == len(files) == len(previous.files):
        return previous  # the same files
    end = previous.parts[kept - 1][0] + len(previous.files[kept - 1].document.text) if kept else 0
    pieces, offsets, at = [previous.text[:end]], [], end  # (the text before the first change: copied once, in C)
    for number, entry in enumerate(files[kept:], kept):
        title = entry.document.title
        between, head = "\n\n" if number else "", f"{title}\n\n" if title else ""
        offsets.append(at + len(between) + len(head))  # as join_documents places a part's own text
        pieces += [between, head, entry.document.text]
        at = offsets[-1] + len(entry.document.text)
    text = "".join(pieces)
    tail = tuple(zip(offsets, (entry.document for entry in files[kept:])))
    return CollectionDocument(text=text, id=name, title=name, source=name, parts=previous.parts[:kept] + tail,
                              files=tuple(files), collection_id=collection_id, segments=segments,
                              lines=previous.lines[:kept] + tuple(_hash_line(f) for f in files[kept:]),
                              basis=(kept, previous.indexes))


def _kept_files(previous: Document | None, collection_id: str, files: list[FileEntry]) -> int | None:
    """How many of the first ``files`` are ``previous``'s first files, as they were (None: make the document
    whole: no previous document of this collection, or one of fewer than two files, whose text has no headings)."""
    if (not isinstance(previous, CollectionDocument) or previous.collection_id != collection_id
            or len(previous.files) < 2 or len(files) < 2 or len(previous.lines) != len(previous.files)):
        return None
    return first_difference(previous.files, tuple(files))


def _hash_line(entry: FileEntry) -> str:
    return f"{entry.name}\0{entry.document.content_hash}"


def _spans(chunker: Chunker, document: Document) -> tuple[tuple[int, int], ...]:
    return tuple((c.start, c.end) for c in chunker.run(document))


def _spans_of_file(chunker: Chunker, document: Document, path: str) -> tuple[tuple[int, int], ...]:
    """(In the chunking process) the spans of ``document`` with its text read from ``path`` (:func:`_text_file`)."""
    return _spans(chunker, replace(document, text=Path(path).read_bytes().decode("utf-8", "surrogatepass")))


class SentenceCutter:
    """A file's sentences (syntok) as the "chunks" of its :data:`SENTENCES` segment: spans only, cut once by the
    indexing job, which cited answers quote from (a chunk's best sentence) and sentence-window embeds."""

    key = SENTENCES
    tokenizer = None

    def run(self, document: Document) -> list[Chunk]:
        return [Chunk(number, start, end, "")
                for number, (start, end) in enumerate(SentenceChunker.sentence_spans(document.text))]


_SENTENCE_CUTTER = SentenceCutter()


def _text_file(text: str) -> Path:
    """``text`` in a temporary file for the chunking process, written a piece at a time. Pickled with the call, a
    long text is one C call holding this process's interpreter, and so its event loop, for its whole length
    (70-300 ms for the 12 MB Markdown of audit 34.4)."""
    with tempfile.NamedTemporaryFile("wb", prefix="lcrag-chunk-", suffix=".txt", delete=False) as file:
        try:
            for at in range(0, len(text), _WRITE_PIECE):
                file.write(text[at:at + _WRITE_PIECE].encode("utf-8", "surrogatepass"))
        except BaseException:
            file.close()
            Path(file.name).unlink(missing_ok=True)
            raise
    return Path(file.name)


def _chunking_process(owner: int) -> None:
    """The start of the chunking process of lcrag process ``owner``: it ends when ``owner`` ends, and cuts at a lower
    priority than questions."""
    die_with(owner)
    os.nice(10)


def _clipped(spans: tuple[tuple[int, int], ...], offset: int, start: int, end: int) -> list[tuple[int, int]]:
    """A file's sentence ``spans`` (its text starting at ``offset`` in the collection's) that overlap the collection
    text from ``start`` to ``end``, clipped to it and made relative to ``start``."""
    low, high = start - offset, end - offset
    first = max(bisect_right(spans, (low, low)) - 1, 0)  # the sentence it starts in
    return [(max(a, low) + offset - start, min(b, high) + offset - start)
            for a, b in takewhile(lambda span: span[0] < high, islice(spans, first, None)) if b > low]


class IndexNotReady(LcragError):
    """A question for an index its collection's indexing has not made yet (HTTP 503 with Retry-After): a question
    never builds one, and never waits holding what others need; it is asked again once the job has made it."""

    def __init__(self, retriever: str, collection: str, missing: int, files: int):
        self.retriever, self.collection, self.missing, self.files = retriever, collection, missing, files
        super().__init__(f"retriever {retriever}: collection {collection!r} is still being indexed (the embeddings "
                         f"of {missing} of its {files} files are not made yet); ask again in a few seconds")

    def named(self, retriever: str) -> IndexNotReady:
        return self if retriever == self.retriever else IndexNotReady(retriever, self.collection, self.missing,
                                                                       self.files)


class Segments:
    """Makes and keeps files' segments in a store (:class:`lcrag.store.base.CollectionStore`'s segment half),
    and the collections' live BM25 indexes. ``tokenizer_lock``: held while a chunker uses the reader's tokenizer
    (the reader is not used by two threads at once); parsing and embedding hold nothing."""

    def __init__(self, store: Any, tokenizer_lock: Callable[[], AbstractContextManager] | None = None):
        self.store = store
        self._tokenizer_lock = tokenizer_lock or nullcontext
        # per (collection, chunker); one dropped is built again from the collection's chunks when next asked
        self._bm25: SizedLRU[tuple[str, str], LiveBM25] = SizedLRU.counted(_LIVE_BM25_KEPT)
        self._spans: SizedLRU[tuple[SegmentKey, str], tuple[tuple[int, int], ...]] = SizedLRU.counted(_SPANS_KEPT)
        self._pool = None  # a process that chunks large files, started when one comes
        self._lock = threading.Lock()  # for the pool above

    def spans(self, entry: FileEntry, chunker: Chunker, make: bool = True) -> tuple[tuple[int, int], ...] | None:
        """The file's chunks' spans for ``chunker``: kept in memory, else from the store, else chunked now and
        kept in both (not ``make``: None)."""
        key = SegmentKey(entry.content_hash, chunker.key)
        kept = self._spans.get((key, entry.document.content_hash))
        if kept is not None:
            return kept
        segment = self.store.segment(key)
        if segment is None or segment.text_hash != entry.document.content_hash:
            if not make:
                return None
            segment = Segment(key, entry.document.content_hash, self._chunk(entry.document, chunker))
            self.store.put_segment(segment)
        self._spans.put((key, segment.text_hash), segment.spans)
        return segment.spans

    def cut_sentences(self, document: CollectionDocument) -> None:
        """(The indexing job) each file's sentences cut and stored, once per file's content, so that no question
        splits a chunk it cites: a question reads them (:meth:`CollectionIndex.sentence_spans`). Only the files
        from the first one that differs from the previous version are looked at (a version's first files are the
        last one's, cut by its job): a file added costs the same in a collection of 100 files or of 5,000."""
        for entry in document.files[document.basis[0] if document.basis else 0:]:
            self.spans(entry, _SENTENCE_CUTTER)

    def _chunk(self, document: Document, chunker: Chunker) -> tuple[tuple[int, int], ...]:
        """The document's chunk spans: a large one's cut in a process of its own (at a lower priority), so that
        minutes of Python never hold this process's interpreter from questions; a chunker that uses the reader's
        tokenizer cuts here, under the tokenizer's lock."""
        if getattr(chunker, "tokenizer", None) is not None:
            with self._tokenizer_lock():
                return _spans(chunker, document)
        if len(document.text) <= _CHUNK_HERE_CHARS:
            return _spans(chunker, document)
        with self._lock:
            if self._pool is None:
                import multiprocessing
                from concurrent.futures import ProcessPoolExecutor

                # The chunking process dies with this one, even killed with -9 (die_with), at a lower priority.
                self._pool = ProcessPoolExecutor(1, multiprocessing.get_context("forkserver"),
                                                 initializer=_chunking_process, initargs=(os.getpid(),))
            pool = self._pool
        try:
            path = _text_file(document.text)
        except OSError:  # no room for it in the temporary directory: sent with the call, whole
            return pool.submit(_spans, chunker, document).result()
        try:  # the rest of the document (not its parts: their texts are the text's pieces) goes with the call
            return pool.submit(_spans_of_file, chunker, replace(document, text="", parts=()), str(path)).result()
        finally:
            path.unlink(missing_ok=True)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def vectors(self, document: CollectionDocument, chunker: Chunker, embedder: Any,
                make: bool = False) -> np.ndarray:
        """The collection's chunk vectors: each file's rows from the store, stacked in the collection's chunk order.
        Files without stored rows are embedded now (in one batch) and stored only when ``make`` (the collection's
        indexing job); otherwise (a question) :class:`IndexNotReady` says so: a question never embeds a collection,
        and never waits for it."""
        import numpy as np

        rows = self._rows(document, chunker.key, lambda entry: self.spans(entry, chunker), embedder, make, "dense")
        parts = [rows[entry.name][1] for entry in document.files]
        return np.vstack(parts) if parts else np.zeros((0, embedder.dimension), "float32")

    def sentences(self, document: CollectionDocument, embedder: Any,
                  make: bool = False) -> tuple[list[tuple[int, int]], np.ndarray]:
        """The collection's sentences (spans in its text) and their vectors, each file's from the store (its
        :data:`SENTENCES` segment), as :meth:`vectors` makes and loads chunks' (``make``: the indexing job)."""
        import numpy as np

        rows = self._rows(document, SENTENCES, lambda entry: self.spans(entry, _SENTENCE_CUTTER), embedder, make,
                          "sentence-window")
        spans = [(offset + start, offset + end) for entry, (offset, _) in zip(document.files, document.parts)
                 for start, end in rows[entry.name][0]]
        parts = [rows[entry.name][1] for entry in document.files]
        return spans, np.vstack(parts) if parts else np.zeros((0, embedder.dimension), "float32")

    def _rows(self, document: CollectionDocument, chunking: str, spans_of: Callable[[FileEntry], tuple],
              embedder: Any, make: bool, retriever: str) -> dict[str, tuple[tuple, np.ndarray]]:
        """Each file's spans and embedding rows for ``chunking``, by name: from the store, the missing ones embedded
        and stored when ``make``, else :class:`IndexNotReady` for ``retriever``."""
        import numpy as np

        rows: dict[str, tuple[tuple, np.ndarray]] = {}
        missing: list[FileEntry] = []
        for entry in document.files:
            segment = self.store.segment(SegmentKey(entry.content_hash, chunking, embedder.name))
            if (segment is not None and segment.text_hash == entry.document.content_hash
                    and segment.embeddings is not None and segment.dim):  # (a file of no chunks: no rows, stored)
                rows[entry.name] = (segment.spans,
                                    np.frombuffer(segment.embeddings, dtype="<f4").reshape(-1, segment.dim))
            else:
                missing.append(entry)
        if missing and not make:
            raise IndexNotReady(retriever, document.id, len(missing), len(document.files))
        return rows | self._embed(missing, chunking, spans_of, embedder)

    def _embed(self, entries: list[FileEntry], chunking: str, spans_of: Callable[[FileEntry], tuple],
               embedder: Any) -> dict[str, tuple[tuple, np.ndarray]]:
        """The files' spans and rows, embedded in one batch and each file's stored as its segment (the indexing
        job's: one job per collection at a time, so each is written once)."""
        import numpy as np

        spans = [spans_of(entry) for entry in entries]
        texts = [[entry.document.text[s:e] for s, e in file_spans] for entry, file_spans in zip(entries, spans)]
        flat = [t for file_texts in texts for t in file_texts]
        embedded = uncached(embedder).embed(flat) if flat else np.zeros((0, embedder.dimension), "float32")
        rows, at = {}, 0
        for entry, file_spans in zip(entries, spans):
            matrix = np.ascontiguousarray(embedded[at:at + len(file_spans)], dtype="<f4")
            at += len(file_spans)
            self.store.put_segment(Segment(SegmentKey(entry.content_hash, chunking, embedder.name),
                                           entry.document.content_hash, file_spans, matrix.tobytes(),
                                           matrix.shape[1]))
            rows[entry.name] = (file_spans, matrix)
        return rows

    def bm25(self, document: CollectionDocument, chunker: Chunker, chunks: list[Chunk],
             ranges: dict[str, tuple[int, int]]) -> SegmentBM25:
        """BM25 over the collection's chunks (``ranges``: each file's, by name): its live index brought to this
        version (new files added, gone ones deleted)."""
        key = (document.collection_id, chunker.key)
        live = self._bm25.get_or_put(key, LiveBM25)
        return SegmentBM25(live.sync(document.files, chunks, ranges), live.schema, chunks, ranges)

    def forget(self, collection_id: str) -> None:
        """Drop a deleted collection's live indexes."""
        self._bm25.drop(lambda key: key[0] == collection_id)


class CollectionIndex(DocumentIndex):
    """A collection's :class:`DocumentIndex`, made of its files' segments: the chunks are each file's, shifted to
    where the file is in the collection's text; BM25 is the collection's live index; dense vectors are the files'
    rows stacked. Other retrievers are built over the stacked chunks as over any document's."""

    def __init__(self, document: CollectionDocument, chunker: Chunker, cache_dir: str | Path,
                 embedder_factory: Callable[[], Embedder] | None = None, progress: ProgressFactory | None = None,
                 **made_with: Any):
        """As :class:`DocumentIndex` (``made_with``: its readers and options), its config the collection's."""
        self._segments = document.segments
        self.ranges: dict[str, tuple[int, int]] = {}  # each file's chunks, by name
        self._file_bytes: dict[str, int] = {}  # each file's part of memory_bytes (its parsed document and chunks)
        self._named = False  # whether its folder on disk is named by the collection (_name_folder)
        made_with["config"] = {"chunking": chunker.key, "files": len(document.files)}
        super().__init__(document, chunker, cache_dir, embedder_factory, progress, **made_with)
        document.indexes[chunker.key] = weakref.ref(self)  # the next version's index starts from this one

    def _load_or_chunk(self) -> list[Chunk]:
        """The files' chunks, each shifted to where its file is in the collection's text: those of the files before
        the first one that changed taken from the previous version's index while it is in memory (the same chunks,
        where they were), the others' cut from their segments; and what they weigh (``memory_bytes``), counted
        per file, so only the files changed are counted again."""
        document = self.document
        kept, previous = self._previous()
        chunks: list[Chunk] = []
        if previous is not None:  # (lists and dicts copied whole in C: microseconds for 5,000 files)
            chunks = previous.chunks[:previous.ranges[document.files[kept - 1].name][1] if kept else 0]
            self.ranges, self._file_bytes = dict(previous.ranges), dict(previous._file_bytes)
            for entry in previous.document.files[kept:]:
                self.ranges.pop(entry.name, None)
                self._file_bytes.pop(entry.name, None)
        for entry, (offset, part) in zip(document.files[kept:], document.parts[kept:]):
            first, size = len(chunks), entry.document.memory_bytes()
            for start, end in self._segments.spans(entry, self.chunker):
                # read from the file's own text when asked, never a copy held beside it; the file's text is what
                # the collection's later versions share (a chunk of an unchanged file is kept as it is)
                chunks.append(SpanChunk(len(chunks), offset + start, offset + end, part.text, offset))
                size += CHUNK_OVERHEAD_BYTES
            self.ranges[entry.name] = (first, len(chunks))
            self._file_bytes[entry.name] = size
        self._text_bytes = sys.getsizeof(document.text) + sum(self._file_bytes.values())  # as DocumentIndex counts
        return chunks

    def sentence_spans(self, start: int, end: int) -> tuple[tuple[int, int], ...]:
        """The sentences of the text from ``start`` to ``end`` (a chunk, or a sentence window that may run over
        several files), relative to ``start``: from its files' sentences, cut once by the indexing job, clipped to
        it; split now, as any document's, when a file's are not stored (a collection indexed before they were)."""
        inside: list[tuple[int, int]] = []
        offsets = self._file_offsets
        first = max(bisect_right(offsets, start) - 1, 0)
        for at in range(first, max(bisect_left(offsets, end), first + 1)):  # the files it overlaps
            spans = self._segments.spans(self.document.files[at], _SENTENCE_CUTTER, make=False)
            if spans is None:
                return super().sentence_spans(start, end)
            inside += _clipped(spans, offsets[at], start, end)
        return tuple(inside) or ((0, end - start),)

    @cached_property
    def _file_offsets(self) -> list[int]:
        """Where each file's text starts in the collection's text, in file order (each file one part)."""
        return [offset for offset, _ in self.document.parts]

    def _previous(self) -> tuple[int, CollectionIndex | None]:
        """(How many first files are the previous version's, its index for this chunker while in memory)."""
        basis = self.document.basis
        made = basis[1].get(self.chunker.key) if basis is not None else None
        previous = made() if made is not None else None
        return (basis[0], previous) if previous is not None else (0, None)

    def chunk_vectors(self) -> np.ndarray:
        """The chunks' vectors as the store holds them (loaded once); a file without them: :class:`IndexNotReady`
        (the indexing job makes them: :meth:`build`)."""
        vectors = getattr(self, "_vectors", None)
        if vectors is None:  # loaded outside the lock (two first questions may both load): see :meth:`retriever`
            vectors = self._segments.vectors(self.document, self.chunker, self.embedder)
            with self._lock:
                if getattr(self, "_vectors", None) is None:
                    self._vectors = vectors
                vectors = self._vectors
        return vectors

    def retriever(self, spec):
        if isinstance(spec, str):
            spec = RETRIEVERS.get(spec).spec()
        if spec not in self._retrievers:  # what it loads from the store, loaded before the lock: a question loading
            self._load_stored(spec)  # vectors never holds up another's BM25 on this collection
        with self._lock:
            if spec.name == "bm25" and spec not in self._retrievers:
                self._retrievers[spec] = self._segments.bm25(self.document, self.chunker, self.chunks, self.ranges)
            try:
                found = super().retriever(spec)
            except IndexNotReady as exc:  # told as missing for the retriever asked for (hybrid, not its dense half)
                raise exc.named(spec.name) from None
            self._name_folder()
            return found

    def _name_folder(self) -> None:
        """A retriever that wrote in this index's folder (the tree index: summaries of the collection's text) leaves
        the folder named by its collection in a ``meta.json``, as a document's index is, so that it goes when a
        file of the collection does (:func:`lcrag.store.derived.forget_collection_caches`)."""
        if self._named or not self.dir.is_dir():
            return
        atomic_write_text(self.dir / "meta.json", json.dumps({"document": self.document.source,
                                                              "collection": self.document.collection_id,
                                                              "config": self.config}))
        self._named = True

    def _load_stored(self, spec) -> None:
        """The stored vectors ``spec`` reads: its chunks' (dense, hybrid, tree), or its files' sentences
        (sentence-window, whose retriever is made of them here); :class:`IndexNotReady` when they are not all made."""
        try:
            if spec.name == "sentence-window":
                spans, vectors = self._segments.sentences(self.document, self.embedder)
                with self._lock:
                    self._retrievers.setdefault(spec, SentenceWindowRetriever(self.document, spans, vectors,
                                                                              self.embedder, **spec.kwargs))
            elif spec.name in _CHUNK_VECTOR_RETRIEVERS:
                self.chunk_vectors()
        except IndexNotReady as exc:
            raise exc.named(spec.name) from None

    def build(self, spec) -> Any:
        """(The collection's indexing job) the retriever ``spec`` with all it needs made now: the files' embeddings
        missing from the store embedded and stored (not under this index's lock: a question on it meanwhile is
        answered or refused at once), then the retriever itself (a summary retriever writes its summaries here)."""
        if isinstance(spec, str):
            spec = RETRIEVERS.get(spec).spec()
        try:
            return self.retriever(spec)
        except IndexNotReady as missing:
            if missing.retriever == "sentence-window":  # its own segments (sentences), stored and loaded as chunks'
                self._segments.sentences(self.document, self.embedder, make=True)
                return self.retriever(spec)
            vectors = self._segments.vectors(self.document, self.chunker, self.embedder, make=True)
        with self._lock:
            self._vectors = vectors
        return self.retriever(spec)

    def read_best(self, question: str, retriever: PartSpec, tokenizer: Tokenizer, limit: int) -> TruncatedText:
        """LongRAG's long read over the collection: its files, whole, ranked by their best chunk for ``question``
        (files no chunk of which was retrieved after, in name order), the best that fit ``limit`` tokens, in name
        order; the files read are told as a ``read`` event."""
        units = self.document.units()
        owner = [0] * len(self.chunks)
        for number, entry in enumerate(self.document.files):
            first, end = self.ranges[entry.name]
            owner[first:end] = [number] * (end - first)
        order: dict[int, float] = {}
        for scored in self.retriever(retriever).run(question, len(self.chunks)):
            order.setdefault(owner[scored.chunk.index], scored.score)
        ranked = [ScoredChunk(units[n], s) for n, s in order.items()]
        ranked += [ScoredChunk(u, 0.0) for u in units if u.index not in order]
        chosen, used = best_that_fit(ranked, lambda c: self.chunk_tokens(c, tokenizer), tokenizer, limit)
        if not chosen:  # even the best file is over the window: it, cut in the middle
            chosen, kept = [ranked[0].chunk], truncate_middle(ranked[0].chunk.text, tokenizer, limit)
        else:
            kept = TruncatedText("\n\n".join(c.text for c in chosen), used, used)
        streaming.emit("read", unit="file", files=[self.document.files[c.index].name for c in chosen])
        return kept
