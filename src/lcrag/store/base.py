"""The collection store: where a service keeps its collections, their files, each file's segment (its chunks and
embeddings), their state and version, and answers it may serve again.

Two backends implement :class:`CollectionStore`: the embedded one (:class:`lcrag.store.embedded.EmbeddedStore`:
a folder of files per collection under the cache directory plus one SQLite file; ``lcrag serve`` with no flags) and a
database one (PostgreSQL, a package of its own). Everything that crosses the interface is a plain value — strings,
ints, floats, bytes, tuples of them — so a backend maps it to columns without an ORM; an embedding matrix is
``bytes`` (float32, row-major, little-endian) with its row and column counts.

**Content addressing.** A file is named in a collection by the name clients know it by; its content by the SHA-256
of its bytes (:attr:`FileRecord.content_hash`). A segment is keyed by that hash and by how it was cut and embedded
(:class:`SegmentKey`), never by a collection: the same file in two collections is parsed, chunked and embedded once.

**Versions.** :attr:`CollectionState.version` changes (grows) on every file added or removed and when a collection
is created again under a name; in-memory indexes of a collection are caches keyed by ``(collection id, version)``,
and so are cached answers (:meth:`CollectionStore.cached_answer`), so nothing of an earlier version is served.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

STATES = ("empty", "indexing", "ready", "error")
# Answers a collection version keeps by default (``lcrag serve --kept-answers``): a JSON answer is a few KB, so a
# busy collection's cache stays tens of MB, and the store does not grow with every new question.
KEPT_ANSWERS = 10_000


@dataclass(frozen=True)
class FileRecord:
    """One file of a collection: its public name (as uploaded, made safe, numbered when taken), the SHA-256 of its
    bytes, its size and when it was added (seconds since the epoch)."""

    name: str
    content_hash: str
    size: int
    added: float = 0.0


@dataclass(frozen=True)
class CollectionState:
    """A collection as a store knows it. ``id`` tells it from an earlier collection of the same name; ``version``
    changes on every file added or removed; ``state`` is one of :data:`STATES` (``indexing``: ``done`` of ``files``
    segments made); ``skipped``: one line per file that could not be read, naming it by its public name."""

    name: str
    id: str
    version: int
    state: str = "empty"
    files: int = 0
    done: int = 0
    error: str | None = None
    skipped: tuple[str, ...] = ()
    updated: float = 0.0


@dataclass(frozen=True)
class SegmentKey:
    """What a segment is made from and how: the file's bytes (SHA-256), the chunker's key (``Chunker.key``: the
    same key gives the same chunks) and the embedder's name (``""``: chunks only)."""

    content_hash: str
    chunking: str
    embedder: str = ""


@dataclass(frozen=True)
class Segment:
    """One file's part of a collection's index. ``text_hash`` is the parsed text's
    :attr:`lcrag.core.types.Document.content_hash` (the spans index that text: a segment made from another parse of the
    same bytes is not used); ``spans`` are the chunks' ``(start, end)`` character offsets in it, in order;
    ``embeddings`` (None when ``key.embedder`` is empty) is ``len(spans) x dim`` float32, row-major, little-endian;
    ``tokens``: the parsed text's length in the reader's tokens when counted (0: not counted), what a long read of
    whole files (LongRAG's long units) needs to know before it reads them."""

    key: SegmentKey
    text_hash: str
    spans: tuple[tuple[int, int], ...]
    embeddings: bytes | None = None
    dim: int = 0
    tokens: int = 0


@dataclass(frozen=True)
class IndexCost:
    """Reader calls and tokens a collection's indexing spent on a retriever's index (tree or RAPTOR summaries):
    billed to the collection, never to the question that first uses the retriever."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "seconds": round(self.seconds, 3)}


class StoreError(RuntimeError):
    """The store could not do what was asked (its storage or database failed); the message names no path."""


@runtime_checkable
class CollectionStore(Protocol):
    """Collections, files, segments, state and versions, and an answer cache. Every method may be called from any
    thread; a method that names an unknown collection or file raises :class:`lcrag.store.collections.NotFound`."""

    # -- collections -----------------------------------------------------------------------------------------
    def create(self, name: str) -> object:
        """Create the collection (creating one that exists changes nothing)."""
        ...

    def delete(self, name: str) -> None:
        """Delete the collection, its files and answers, and the segments of contents no other file holds."""
        ...

    def names(self) -> list[str]:
        """The collections' names, sorted."""
        ...

    def state(self, name: str) -> CollectionState:
        """The collection's id, version, indexing state and counts."""
        ...

    def version(self, name: str) -> int:
        """The collection's version (one indexed lookup: what a replica checks per question)."""
        ...

    def identity_of(self, state: CollectionState) -> str:
        """What a document read of the collection at ``state`` is kept for (a different one is read again), taken
        from ``state`` without reading the store again."""
        ...

    def set_state(self, name: str, version: int, state: str, done: int = 0, error: str | None = None,
                  skipped: tuple[str, ...] = ()) -> bool:
        """Record the indexing ``state`` reached for ``version``; ignored (False) when the collection has moved on
        to another version meanwhile (an indexing pass that ends after a newer file arrived never says ready)."""
        ...

    # -- files -----------------------------------------------------------------------------------------------
    def file_records(self, name: str) -> list[FileRecord]:
        """The collection's files, sorted by name."""
        ...

    def put_file(self, name: str, filename: str, chunks: Iterable[bytes], max_bytes: int) -> tuple[FileRecord, bool]:
        """Stream an upload into the collection, written once to its place (over ``max_bytes``:
        :class:`lcrag.store.collections.TooLarge`, nothing kept); the record and whether it is new (a new file
        changes the version; the same content under the same name is kept once and changes nothing)."""
        ...

    def remove_file(self, name: str, filename: str) -> None:
        """Remove one file (a new version), and its segments unless another file holds the same content."""
        ...

    def local_path(self, name: str, filename: str) -> Path:
        """A local file holding the file's bytes, for the parser (the embedded store's own file; a database store's
        copy in a local cache, by content hash)."""
        ...

    # -- segments --------------------------------------------------------------------------------------------
    def segment(self, key: SegmentKey) -> Segment | None:
        """The segment made for ``key``, if any (by any process or replica)."""
        ...

    def put_segment(self, segment: Segment) -> None:
        """Keep ``segment`` (putting one that exists replaces it: the same key makes the same segment)."""
        ...

    def add_index_cost(self, collection_id: str, retriever: str, cost: IndexCost) -> None:
        """Add what an indexing job's build of ``retriever``'s index (its summaries) cost to the collection's."""
        ...

    def index_costs(self, collection_id: str) -> dict[str, IndexCost]:
        """What building each retriever's index has cost the collection so far, by retriever (none: empty)."""
        ...

    # -- answers ---------------------------------------------------------------------------------------------
    def cached_answer(self, collection_id: str, version: int, key: str) -> bytes | None:
        """An answer kept for this collection version and question key (the question, its options and the reader,
        hashed by the caller), else None."""
        ...

    def cache_answer(self, collection_id: str, version: int, key: str, answer: bytes,
                     keep: int = KEPT_ANSWERS) -> bool:
        """Keep an answer (a later version never reads it), and at most ``keep`` of the version's answers: the ones
        written longest ago go first. Only while the collection is at ``version`` (checked as it is written);
        whether it was kept."""
        ...

    def close(self) -> None:
        ...
