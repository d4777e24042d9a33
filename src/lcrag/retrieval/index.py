"""A document's chunks, BM25 index and embeddings, persisted on disk under a content hash.

Layout: ``CACHE/indexes/<sha256(document + chunking)>/`` holds ``chunks.jsonl``, ``bm25/`` and one
``embeddings-<sha256(embedder)>.npy`` per embedder, so a second question on the same document embeds nothing,
and switching the embedder does not re-chunk. ``manifest.json`` records each part's files with sizes and checksums:
a part is checked before use, and a damaged one is set aside and rebuilt (:mod:`lcrag.retrieval.integrity`), under
the lock ``CACHE/indexes/<key>.lock`` that makes concurrent processes build each part once.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lcrag.assembly.truncation import TruncatedText, fill_with_chunks
from lcrag.chunking import Chunker, SentenceChunker
from lcrag.core.errors import InputError
from lcrag.core.lru import SizedLRU
from lcrag.readers import streaming
from lcrag.readers.base import Reader
from lcrag.core.registry import RETRIEVERS, PartSpec
from lcrag.retrieval.base import Retriever
from lcrag.retrieval.dense import embed_chunks, load_vectors
from lcrag.retrieval.embedders import Embedder
from lcrag.retrieval.integrity import ArtifactDamaged, ArtifactStore
from lcrag.retrieval.raptor import RaptorConfig
from lcrag.core.files import atomic_write_text
from lcrag.core.tokenization import Tokenizer, count_tokens
from lcrag.core.types import Chunk, Document, Ranked

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class SummaryIndexConfig:
    """How an index builds its summary structures (the same for every question over it). What a question chooses
    of a retriever (``window``, ``tree_navigation``, a plugin's option) is in its :class:`RetrieverSpec`."""

    tree_branch: int = 2  # tree: nodes kept per level
    tree_children: int = 10  # tree: children per summary (LlamaIndex's num_children)
    raptor: RaptorConfig = field(default_factory=RaptorConfig)


RetrieverSpec = PartSpec  # a retriever's name and options (kind "retriever")
ProgressFactory = Callable[[str, int], Callable[[int], None]]


# A chunk's memory beyond its text (the Chunk object, its numbers, the list slot), measured with tracemalloc.
CHUNK_OVERHEAD_BYTES = 150
_SENTENCES_KEPT = 4096  # chunks' sentence spans kept per index (a cited chunk is split once, not at each answer)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _read_counts(path: Path) -> dict[str, int]:
    try:
        counts = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise ArtifactDamaged(f"{path.name}: {error}") from None
    if not isinstance(counts, dict) or not all(type(n) is int and n >= 0 for n in counts.values()):
        raise ArtifactDamaged(f"{path.name} is not a table of token counts")
    return counts


class DocumentIndex:
    def __init__(
        self,
        document: Document,
        chunker: Chunker,
        cache_dir: str | Path,
        embedder_factory: Callable[[], Embedder] | None = None,
        progress: ProgressFactory | None = None,
        reader_factory: Callable[[], Reader] | None = None,
        options: SummaryIndexConfig | None = None,
        summary_reader_factory: Callable[[], Reader] | None = None,
        config: dict | None = None,
    ):
        self.document = document
        self.config = config  # the configuration that built the index (lcrag.pipeline.config's to_dict()), kept in meta.json
        self.cache_dir = Path(cache_dir)
        self._reader_factory = reader_factory
        self._summary_reader_factory = summary_reader_factory
        self.options = options or SummaryIndexConfig()
        self.chunker = chunker
        self.key = _sha(f"{document.content_hash}\n{chunker.key}")
        self.dir = Path(cache_dir) / "indexes" / self.key
        self.store = ArtifactStore(self.dir)
        self._embedder_factory = embedder_factory
        self._embedder: Embedder | None = None
        self._progress = progress
        self._retrievers: dict[RetrieverSpec, Retriever] = {}
        self._unbilled: set[RetrieverSpec] = set()  # retrievers built here whose reader calls no question paid yet
        self._token_counts: dict[str, dict[int, int]] = {}
        self._lock = threading.RLock()
        self.embedded_chunks = 0  # chunks embedded by this object: 0 when the index was already on disk
        self._text_bytes: int | None = None
        self._sentences: SizedLRU[tuple[int, int], tuple[tuple[int, int], ...]] = SizedLRU.counted(_SENTENCES_KEPT)
        self.chunks = self._load_or_chunk()

    def sentence_spans(self, start: int, end: int) -> tuple[tuple[int, int], ...]:
        """The sentences of the text from ``start`` to ``end`` (a chunk cited), as spans relative to ``start``:
        split with syntok when first asked (~8 ms for 300 words), then kept."""
        kept = self._sentences.get((start, end))
        if kept is None:
            kept = tuple(SentenceChunker.sentence_spans(self.document.text[start:end])) or ((0, end - start),)
            self._sentences.put((start, end), kept)
        return kept

    # -- chunks -----------------------------------------------------------------------------------------------
    def _load_or_chunk(self) -> list[Chunk]:
        return self.store.open("chunks", ["chunks.jsonl", "meta.json"], self._read_chunks, self._write_chunks)

    def _read_chunks(self) -> list[Chunk]:
        text = self.document.text
        chunks = []
        try:
            for number, line in enumerate((self.dir / "chunks.jsonl").read_text(encoding="utf-8").splitlines()):
                index, start, end = json.loads(line)
                if index != number or not 0 <= start <= end <= len(text):
                    raise ValueError(f"line {number + 1} is not chunk {number} within the document")
                chunks.append(Chunk(index, start, end, text[start:end]))
        except (ValueError, TypeError, UnicodeDecodeError) as error:
            raise ArtifactDamaged(f"chunks.jsonl: {error}") from None
        if not chunks:
            raise ArtifactDamaged("chunks.jsonl has no chunks")
        return chunks

    def _write_chunks(self) -> None:
        chunks = self.chunker.run(self.document)
        if not chunks:
            raise InputError(f"document {self.document.id or self.document.source!r} produced no chunks")
        atomic_write_text(self.dir / "chunks.jsonl", "".join(json.dumps([c.index, c.start, c.end]) + "\n" for c in chunks))
        atomic_write_text(
            self.dir / "meta.json",
            json.dumps({"document": self.document.source or self.document.id, "chunker": self.chunker.key,
                        "chunks": len(chunks), "characters": len(self.document.text), "config": self.config}, indent=1),
        )

    def memory_bytes(self) -> int:
        """Roughly the memory this index holds: the document (its text, its parts' and their layouts), its chunks
        and its retrievers' arrays (vectors); what a cache of indexes weighs them by."""
        if self._text_bytes is None:  # the document and chunks never change: measured once
            self._text_bytes = self.document.memory_bytes() + sum(CHUNK_OVERHEAD_BYTES + sys.getsizeof(c.text)
                                                                  for c in self.chunks)
        size = self._text_bytes
        for retriever in list(self._retrievers.values()):
            fields = getattr(retriever, "__dict__", {}).values()
            size += sum(v.nbytes for v in fields if isinstance(getattr(v, "nbytes", None), int))
        return size

    # -- retrievers -------------------------------------------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            if self._embedder_factory is None:
                raise InputError("dense retrieval needs an embedder")
            self._embedder = self._embedder_factory()
        return self._embedder

    def chunk_vectors(self) -> np.ndarray:
        """The chunks' embeddings by :attr:`embedder`, embedded once and loaded from disk after."""
        embedder = self.embedder
        name = f"embeddings-{_sha(embedder.name)[:16]}.npy"
        path = self.dir / name
        return self.store.open(name, [name], lambda: load_vectors(path, len(self.chunks)),
                               lambda: self._embed(embedder, path))

    def _embed(self, embedder: Embedder, path: Path) -> None:
        tick = self._progress("embedding chunks", len(self.chunks)) if self._progress else None
        embed_chunks(self.chunks, embedder, path, progress=tick)
        self.embedded_chunks += len(self.chunks)

    @property
    def reader(self) -> Reader:
        if self._reader_factory is None:
            raise InputError("summary-based retrievers (tree, raptor) need a reader for their summaries")
        return self._reader_factory()

    @property
    def summary_reader(self) -> Reader:
        """The reader that writes summaries (the answering reader unless another was given)."""
        return self._summary_reader_factory() if self._summary_reader_factory else self.reader

    def retriever(self, spec: str | RetrieverSpec) -> Retriever:
        """Any registered retriever (:data:`lcrag.core.registry.RETRIEVERS`) with the options its spec gives (a name: its
        defaults), built on first use by its factory, which takes this index and the options, and loaded from disk
        after; one per spec, so two questions choosing different options never share one."""
        if isinstance(spec, str):
            spec = RETRIEVERS.get(spec).spec()  # unknown: an OptionError listing the registered ones
        with self._lock:
            if spec not in self._retrievers:
                retriever = self._retrievers[spec] = RETRIEVERS.get(spec.name).create(self, **spec.kwargs)
                if getattr(retriever, "built_now", False):  # it spent reader calls on its summaries just now
                    self._unbilled.add(spec)
            return self._retrievers[spec]

    def take_build_cost(self, spec: str | RetrieverSpec) -> bool:
        """Whether the retriever ``spec`` was built by this process and its build not yet billed to a question:
        true once, for the question that caused it."""
        if isinstance(spec, str):
            spec = RETRIEVERS.get(spec).spec()
        with self._lock:
            taken = spec in self._unbilled
            self._unbilled.discard(spec)
            return taken

    def search(self, spec: str | RetrieverSpec, query: str, depth: int | None) -> Ranked:
        """The retriever ``spec``'s ranking for ``query``: a tree index's navigation calls with it, and a summary
        retriever's build cost (billed to the first question that finds it built by this process)."""
        retriever = self.retriever(spec)
        with_calls = getattr(retriever, "run_with_calls", None)  # a retriever that asks the reader per query
        ranked, calls = with_calls(query, depth) if with_calls is not None else (retriever.run(query, depth), [])
        cost = getattr(retriever, "build_cost", None)  # a summary retriever's (RAPTOR, tree index)
        if cost is None:
            return Ranked(ranked, calls)
        return Ranked(ranked, calls, cost.to_dict() | {
            "retriever": retriever.name, "build_seconds": round(retriever.build_seconds, 3),
            "built_now": bool(retriever.built_now),
            # This question caused the build (its reader calls are billed to it once: lcrag serve's usage).
            "billed_here": self.take_build_cost(spec)})

    def read_best(self, question: str, retriever: PartSpec, tokenizer: Tokenizer, limit: int) -> TruncatedText:
        """The chunks ``retriever`` ranks best for ``question``, whole, while they fit ``limit`` tokens, in document
        order (a collection reads its best files this way: :class:`lcrag.store.segments.CollectionIndex`)."""
        ranked = self.retriever(retriever).run(question, None)
        return fill_with_chunks(ranked, lambda chunks: self.chunk_tokens(chunks, tokenizer), tokenizer, limit)

    # -- token counts for budgets -----------------------------------------------------------------------------
    def chunk_tokens(self, chunks: list[Chunk], tokenizer: Tokenizer) -> list[int]:
        """Each chunk's length in ``tokenizer`` tokens, counted once and kept on disk.

        Keyed by the text's hash, not the chunk index: sentence windows and summary nodes number their pieces in
        their own way, and all of them share this one table per document.
        """
        name = f"tokens-text-{_sha(tokenizer.name)[:16]}.json"
        path = self.dir / name
        with self._lock:
            counts = self._token_counts.get(tokenizer.name)
            if counts is None:
                counts = self.store.open(name, [name], lambda: _read_counts(path),
                                          lambda: atomic_write_text(path, "{}"))
                self._token_counts[tokenizer.name] = counts
            keys = [_sha(c.text)[:20] for c in chunks]
            missing = [(key, c) for key, c in zip(keys, chunks) if key not in counts]
            for key, chunk in streaming.checked(missing, every=64):  # a budget over many chunks counts them all
                counts[key] = count_tokens(tokenizer, chunk.text)
            if missing:
                # Another process may add other counts meanwhile; the last table wins and the rest are recounted.
                table = json.dumps(counts)
                self.store.update(name, [name], lambda: atomic_write_text(path, table))
            return [counts[key] for key in keys]
