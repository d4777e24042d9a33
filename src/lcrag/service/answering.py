"""What the service answers with: one Pipeline for every request (its reader, embedder and kept indexes; a request's
options, such as strategy, retriever, k, budget and routing, are that question's choices), the collections'
documents kept loaded, and a bounded queue in front of the reader (as many generations at once as the reader takes:
:mod:`lcrag.service.slots`, one for the embedded reader, a pool's servers' together; more in flight than
``max_waiting`` is refused with 429). An answer is kept in the collection store (:mod:`lcrag.service.answer_cache`):
the same question about the same version of a collection is answered again, by any replica, without a reader call.

Uploaded files are untrusted: they are parsed in a sandbox (:mod:`lcrag.documents.sandbox`: confined processes, each
file once per content, the outcome kept on disk beside the collections). A question costs nothing before its place
in the queue: a collection in error answers its error at once, and waiting for a collection's indexing, or reading
its files, happens only in a place in the queue (429 beyond it)."""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lcrag.documents.limits import ParseLimits
from lcrag.documents.loaders import join_documents
from lcrag.documents.sandbox import Sandbox
from lcrag.core.errors import InputError, OptionError
from lcrag.evaluation.prices import PriceTable, calls_cost
from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.core.provenance import Source, locate, snippet
from lcrag.readers import streaming
from lcrag.service.answer_cache import AnswerCache
from lcrag.store.collections import EmptyCollection, Listed, NotFound
from lcrag.store.embedded import EmbeddedStore, file_digest
from lcrag.service.limits import MAX_KEPT_ANSWER_BYTES
from lcrag.store.segments import FileEntry, IndexNotReady, Segments, collection_document
from lcrag.service.requests import QuestionChoices
from lcrag.service.slots import ReaderSlots
from lcrag.store.base import KEPT_ANSWERS, CollectionState, IndexCost
from lcrag.strategies.routing.learned import BUNDLED
from lcrag.core.registry import RETRIEVERS
from lcrag.retrieval.embedders import uncached
from lcrag.core.types import Answer, Document, LLMCall

log = logging.getLogger(__name__)

# The longest a question waits for its collection's indexing (in its place in the queue; the client may leave).
INDEXING_WAIT = 600.0
# The retrievers that embed a question's query (the embedder a replica warms when it offers one of them).
_QUERY_EMBEDDING = {"dense", "hybrid", "sentence-window"}
# The longest closing waits for the questions it stopped to reach their next step boundary and let go of the reader.
STOP_WAIT = 2.0


def _stat_key(info: os.stat_result) -> tuple:
    """What tells a changed file from the one read before (a file is never rewritten in place; this is a check)."""
    return info.st_ino, info.st_size, info.st_mtime_ns


# Request fields that choose how a question is answered: the request model's, each a Settings field of the same name.
ANSWER_OPTIONS = tuple(QuestionChoices.model_fields)


def default_retrievers(own: str) -> tuple[str, ...]:
    """The retrievers a server offers unless told, and so the indexes every collection's indexing makes: every
    registered one that makes no reader call (tree and raptor write summaries with the reader: minutes of generation
    a client would order for free) and embeds no more than the chunks (sentence-window embeds every sentence:
    several times the ingestion of dense and hybrid, which share the chunks' vectors), and the server's own."""
    cheap = [n for n in RETRIEVERS.names()
             if not RETRIEVERS.get(n).meta.get("calls_reader") and not RETRIEVERS.get(n).meta.get("embeds_sentences")]
    return tuple(dict.fromkeys([*cheap, own]))


def billed(answer: Answer) -> Answer:
    """``answer`` with the reader calls its retriever made to build its index for it (RAPTOR or tree summaries,
    written when the document was first read with it) among its calls: the request that caused them pays for them
    in its usage, cost and metrics, like any other call."""
    cost = answer.index_cost
    if not cost or not cost.get("billed_here") or not cost.get("calls"):
        return answer
    model = answer.calls[-1].model if answer.calls else ""
    build = LLMCall(model, cost["prompt_tokens"], cost["completion_tokens"], seconds=cost.get("seconds", 0.0),
                    stage=f"index:{cost.get('retriever', 'summaries')}")
    answer.calls = [build, *answer.calls]
    return answer


class Busy(RuntimeError):
    """More requests are waiting for the reader than the service queues (HTTP 429)."""


class ShuttingDown(streaming.Cancelled):
    """A question the server stopped as it shut down: still running after ``--shutdown-seconds`` (HTTP 503)."""


@dataclass
class _Files:
    """What this process made of a collection's files: the listing it read them at (:class:`Listed`: the
    collection's id and version, each file's stat), each file's stat key and what it gave (by name), the names
    whose reading failed (read again at the next pass), and the document they made. The next version starts from
    it: only the files changed since are read, hashed and chunked again."""

    listed: Listed
    read: dict[str, tuple[tuple, FileEntry | str]]
    failed: frozenset[str] = frozenset()
    document: Document | None = None
    # The files that gave a document, in name order (and their names, for bisect), and the lines of those that
    # could not be read, by name: brought up to date for the files looked at, never gathered from every file again.
    entries: list[FileEntry] = field(default_factory=list)
    entry_names: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass
class _Loaded:
    """The collections' documents as loaded, each with the identity of the collection it was read from (a collection
    deleted and created again is another one; on a shared store a version is another too), what was made of each
    collection's files (:class:`_Files`, kept across its versions), and the documents let go of at a change, to be
    released once the change's document replaces them; under one lock, so that keeping a document and checking
    whose it is never interleave with a delete."""

    entries: dict[str, tuple[str, Document]] = field(default_factory=dict)
    files: dict[str, _Files] = field(default_factory=dict)
    stale: dict[str, Document] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _gather(files: _Files, kept: _Files | None, looked: list[str]) -> None:
    """``files``' entries and skipped lines: ``kept``'s with the names ``looked`` at changed (each file removed,
    then put back as it reads now), or, without ``kept``, gathered from every file."""
    if kept is None:
        outcomes = [files.read[n][1] for n in files.listed.names]
        files.entries = [outcome for outcome in outcomes if isinstance(outcome, FileEntry)]
        files.entry_names = [entry.name for entry in files.entries]
        files.skipped = {n: o for n, o in zip(files.listed.names, outcomes) if isinstance(o, str)}
        return
    entries, names, skipped = list(kept.entries), list(kept.entry_names), dict(kept.skipped)
    for name in looked:
        at = bisect.bisect_left(names, name)
        if at < len(names) and names[at] == name:
            del names[at], entries[at]
        skipped.pop(name, None)
        outcome = files.read.get(name, (None, None))[1]
        if isinstance(outcome, FileEntry):
            names.insert(at, name)
            entries.insert(at, outcome)
        elif outcome is not None:
            skipped[name] = outcome
    files.entries, files.entry_names, files.skipped = entries, names, skipped


class Answering:
    def __init__(self, settings: Settings, collections_root: Path, prices: PriceTable | None = None,
                 price_as: str | None = None, max_waiting: int = 8, pipeline: Pipeline | None = None,
                 routers: dict[str, str] | None = None, memory_bytes: int | None = None,
                 parse_limits: ParseLimits | None = None, parse_workers: int = 2, store=None,
                 answer_cache: bool | None = None, kept_answers: int = KEPT_ANSWERS,
                 kept_answer_bytes: int = MAX_KEPT_ANSWER_BYTES, retrievers: tuple[str, ...] | None = None):
        self.settings = settings
        # The retrievers questions may choose (lcrag serve --retrievers; default here: the settings' own): a
        # collection's indexing job makes what each of them needs, so that a question only loads it (never embeds).
        self.retrievers = tuple(retrievers) if retrievers else (settings.retriever,)
        self._requeued: set[str] = set()  # collection identities re-indexed for an index a question found missing
        # The routers a request may name: the ones lcrag ships and the operator's (--router NAME=FILE). A request
        # field is never opened as a path on the server.
        self.routers = {name: name for name in BUNDLED} | dict(routers or {})
        # One bound for everything kept between questions: every per-option pipeline shares the base's memory.
        self.base = pipeline or Pipeline(settings, **({} if memory_bytes is None else {"memory_bytes": memory_bytes}))
        self.prices, self.price_as = prices or PriceTable(), price_as
        # The collection store: ``store(root, index)`` (a shared one: lcrag.store.postgres), else the embedded.
        self.collections = (store or EmbeddedStore)(collections_root, self._index)
        # Files' segments (chunks, embeddings) by content, in the store; a chunker using the reader's tokenizer
        # takes a place at the reader for it (parsing and embedding never do).
        self.segments = Segments(self.collections, lambda: self.slots)
        # Answers kept in the store, by collection version and question (on with the completion cache, by default),
        # each at most kept_answer_bytes as written.
        self.answers = AnswerCache(self.collections, self.base, settings.cache if answer_cache is None else answer_cache,
                                   kept_answers, kept_answer_bytes)
        # Uploaded files are parsed in confined processes, at most parse_workers at a time, each once per content
        # (the outcomes kept beside the collections, for lcrag serve and lcrag mcp alike, across restarts).
        self.parser = Sandbox(parse_limits, self.collections.root.parent / "parsed", parse_workers)
        self.parser.start()
        self._documents = _Loaded()
        self._parsing = ThreadPoolExecutor(parse_workers, thread_name_prefix="lcrag-parse")
        # Places at the reader: as many questions at once as it takes, never more than are let in.
        self.slots = ReaderSlots(lambda: self.base.reader, max_waiting)
        self._waiting = 0
        self._count = threading.Condition()
        self.max_waiting = max_waiting
        # The listeners of the questions being answered: a server shutting down cancels them (stop_questions).
        self._asked: dict[int, streaming.Listener] = {}  # by id: a listener is a dataclass, not hashable
        self.stopping = threading.Event()
        self._closed = False
        # Questions run in their own pool, one thread per place in the queue (and one more): a question
        # beyond the queue gets its 429 at once, and uploads and metadata never wait behind questions for a thread.
        self.executor = ThreadPoolExecutor(max_waiting + 1, thread_name_prefix="lcrag-answer")
        # What a change makes ready is loaded here before its first question (:meth:`warm`): one thread, each
        # collection queued once however many changes come meanwhile.
        self.warm_on_change = True
        self._warming = ThreadPoolExecutor(1, thread_name_prefix="lcrag-warm")
        self._warm_queued: set[str] = set()
        self._embedder_warm = False

    # -- documents ---------------------------------------------------------------------------------------------
    def _load(self, name: str, progress=None,
              cancelled: threading.Event | None = None) -> tuple[Document, list[str]]:
        """The collection as one document, its files read as they were before (each file parsed once, when it
        first comes: only the files added or changed since are parsed now, in parallel) and the lines of the
        files that could not be read. The files changed since the version read last are the store's to say
        (:meth:`Listed.changed`): only they are looked at, and the document is made from the last one
        (:func:`collection_document`). A question reading it stops after the file in hand once ``cancelled``."""
        listed = self.collections.listed(name)  # regular files only: a symbolic link planted among them is not read
        directory = self.collections.files_dir(name)
        with self._documents.lock:
            kept = self._documents.files.get(name)
        if kept is not None and kept.listed.id != listed.id:
            kept = None  # another collection of that name
        read, fresh, looked = self._unchanged(listed, kept, directory)
        failed = set()
        for done, (path, outcome) in enumerate(zip(fresh, self._parsing.map(self._read_file, fresh)), 1):
            read[path.name] = outcome
            if not outcome[0]:
                failed.add(path.name)
            if cancelled is not None and cancelled.is_set():  # those under way finish, kept by the sandbox
                raise streaming.Cancelled("the client left while its collection's files were read")
            if progress:
                progress(len(listed.names) - len(fresh) + done, len(listed.names))
        files = _Files(listed, read, frozenset(failed))
        _gather(files, kept if looked is not None else None, looked or ())
        entries, skipped = files.entries, [files.skipped[n] for n in sorted(files.skipped)]
        if entries:
            files.document = collection_document(name, listed.id, entries, self.segments,
                                                 kept.document if kept else None)
        with self._documents.lock:
            self._documents.files[name] = files
        document = files.document
        if not entries and not skipped:
            raise EmptyCollection(name)
        if not entries:
            raise InputError(f"no readable document in the collection ({len(skipped)} skipped)"
                             + (f": {skipped[0]}" if skipped else ""))
        return document, skipped

    @staticmethod
    def _unchanged(listed: Listed, kept: _Files | None, directory: Path
                   ) -> tuple[dict[str, tuple[tuple, FileEntry | str]], list[Path], list[str] | None]:
        """What is still as read in ``kept`` (by name), the paths to read now, and the names looked at: when the
        store says which files changed since ``kept``'s version, only those (and the ones whose reading failed);
        else (None) every file's stat is compared."""
        touched = listed.changed((kept.listed.id, kept.listed.version)) if kept is not None else None
        if touched is None:
            known = kept.read if kept is not None else {}
            read = {n: known[n] for n, info in listed.items() if n in known and known[n][0] == _stat_key(info)}
            return read, [directory / n for n in listed.names if n not in read], None
        read = dict(kept.read)  # (copied whole in C)
        looked, names = sorted(touched | kept.failed), []
        for name in looked:
            info = listed.stats.get(name)
            if info is None or read.get(name, ((),))[0] != _stat_key(info):
                read.pop(name, None)
                if info is not None:
                    names.append(name)
        return read, [directory / n for n in names], looked

    def _read_file(self, path: Path) -> tuple[tuple, FileEntry | str]:
        """One file of a collection as read (its documents, in the sandbox), or the line saying why it could not be;
        sources and messages name the file as clients know it (the name it was uploaded under, which GET
        /v1/collections/NAME/files/FILE serves), never a path on the server."""
        try:
            key = _stat_key(path.lstat())
            docs, skipped = self.parser.load_files([path])
            if skipped:
                return key, self.collections.public(skipped[0])
            docs = [replace(d, source=Path(d.source).name) for d in docs]
            document = docs[0] if len(docs) == 1 else join_documents(docs, Path(path.name))
            return key, FileEntry(path.name, file_digest(path), document)
        except OSError as exc:
            return (), self.collections.public(f"{path}: could not be read ({exc.strerror or exc})")

    def _index(self, name: str, files_dir: Path, progress) -> list[str]:
        """Index the collection's changes: the files added since the last pass are parsed and chunked, and every
        offered retriever's index is made (:meth:`_build`). Nothing here holds the reader's lock."""
        identity = self.collections.identity(name)  # taken first: what is read is this collection's or a later one's
        try:
            document, skipped = self._load(name, progress)
            self._build(name, document)
        except Exception:
            self._drop(name, identity)  # the collection is in error: its previous document no longer answers
            raise
        self._keep(name, identity, document)
        return skipped

    def _build(self, name: str, document: Document) -> None:
        """What every offered retriever needs, made once per collection in its indexing job (the questions only
        load it): the chunks' embeddings, stored as the files' segments (a file already embedded, by any replica,
        is loaded, never embedded again), BM25, and the summaries of a retriever that writes them with the reader,
        whose calls are the collection's (logged here), not its first question's."""
        index = self.base.index(document)
        self.segments.cut_sentences(document)  # what its answers quote: no question splits a chunk it cites
        for spec in self._offered_specs():
            retriever = index.build(spec)
            cost = getattr(retriever, "build_cost", None)
            if index.take_build_cost(spec) and cost is not None and cost.calls:  # (taken: no question pays it)
                log.info("collection %s: %s index built with %s", name, spec.name, cost.to_dict())
                self.collections.add_index_cost(self.collections.state(name).id, spec.name, IndexCost(
                    cost.calls, cost.prompt_tokens, cost.completion_tokens, cost.seconds))

    def index_cost(self, name: str) -> dict[str, dict]:
        """What building each retriever's index (its summaries) has cost the collection, by retriever: reader calls,
        tokens and seconds, billed to the collection by its indexing jobs (GET /v1/collections/NAME)."""
        costs = self.collections.index_costs(self.collections.state(name).id)
        return {retriever: cost.to_dict() for retriever, cost in costs.items()}

    def _offered_specs(self) -> list:
        """The offered retrievers with the server's options, those writing summaries with the reader last (a
        retriever that cannot take the server's options is one no question can choose: left out)."""
        specs = []
        for name in sorted(self.retrievers, key=lambda n: bool(RETRIEVERS.get(n).meta.get("calls_reader"))):
            try:
                own = name == self.settings.retriever  # (its settings are the pipeline's: no choice kept for it)
                specs.append(self.base.retriever_spec(None if own else self.base.settings_for({"retriever": name})))
            except OptionError:
                continue
        return specs

    def _loaded_retriever(self, collection: str, document: Document, settings: Settings):
        """The retriever a question's ``settings`` choose, as the collection's indexing made it (loaded, never built
        here): one not made yet is refused at once (:class:`IndexNotReady`, 503), and, when the collection says
        ready all the same (indexed by a server that did not offer it), its indexing is run again, once."""
        index = self.base.index(document, settings.chunking_for(settings.strategy), settings)
        try:
            return index.retriever(self.base.retriever_spec(settings))
        except IndexNotReady:
            identity = self._identity(collection)
            if identity and identity not in self._requeued and self.collections.status(collection).state == "ready":
                self._requeued.add(identity)
                self.collections.reindex(collection)
            raise

    @staticmethod
    def check_answerable(name: str, state: CollectionState) -> None:
        """Refuse at once, before any work, a question to a collection in error (400: its error, as indexing found
        it; nothing is read again for it until a change re-indexes it) or empty. ``state``: the collection's, read
        just before (an unknown collection was refused by that read: 404)."""
        if state.state == "error":
            raise InputError(state.error or f"collection {name!r} could not be indexed")
        if state.state == "empty":
            raise EmptyCollection(name)

    def document(self, name: str, cancelled: threading.Event | None = None,
                 state: CollectionState | None = None) -> Document:
        """The collection's document: kept, else read (each file parsed once per content, in the sandbox). A
        collection being indexed is waited for (at most :data:`INDEXING_WAIT`, then 429; until ``cancelled``).
        ``state``: the collection's, read just before (else it is read here)."""
        state = state or self.collections.state(name)
        give_up = time.monotonic() + INDEXING_WAIT
        while state.state == "indexing":
            if cancelled is not None and cancelled.is_set():
                raise streaming.Cancelled("the client left while its collection was being indexed")
            if time.monotonic() > give_up:
                raise Busy(f"collection {name!r} is still being indexed ({state.done} of {state.files} files)")
            self.collections.wait(name, 0.2)
            state = self.collections.state(name)
        if state.state == "error":
            raise InputError(state.error or f"collection {name!r} could not be indexed")
        identity = self.collections.identity_of(state)
        with self._documents.lock:
            kept = self._documents.entries.get(name)
        if kept is not None and kept[0] == identity:
            return kept[1]
        document = self._load(name, cancelled=cancelled)[0]
        if not self._keep(name, identity, document):
            raise NotFound(f"collection {name!r} was deleted while its documents were read")
        return document

    def forget(self, name: str) -> None:
        """Drop what is kept of a collection that changed: a collection deleted or created anew loses its document,
        what was read of its files and its indexes and answering contexts in every pipeline's memory. A collection
        still the one its document was read from keeps it until the indexing its change started replaces it
        (asking waits for that indexing); one whose new version another process made (a shared store) lets go of
        its document, which is released from memory once the new version's replaces it (its index is where the
        new one takes its unchanged files' chunks from), and keeps what was read of its files."""
        identity = self._identity(name)
        collection_id = self._collection_id(name) if identity is not None else None
        released, ended = [], set()  # documents to release; ids of collections gone
        with self._documents.lock:
            kept = self._documents.entries.get(name)
            if kept is not None and kept[0] != identity:
                del self._documents.entries[name]
                if collection_id is not None and getattr(kept[1], "collection_id", None) == collection_id:
                    older = self._documents.stale.get(name)  # one let go of before: no basis any more
                    self._documents.stale[name] = kept[1]
                    released += [older] if older is not None else []
                else:
                    released.append(kept[1])
                    ended.add(getattr(kept[1], "collection_id", kept[0]))
            files = self._documents.files.get(name)
            if files is not None and files.listed.id != collection_id:
                del self._documents.files[name]
                ended.add(files.listed.id)
            if collection_id is None or ended:
                older = self._documents.stale.pop(name, None)
                released += [older] if older is not None else []
        for gone in ended:
            self.segments.forget(gone)
        for document in released:
            self._release(document)
        if self.warm_on_change and collection_id is not None:
            self._queue_warm(name)

    def _queue_warm(self, name: str) -> None:
        with self._count:
            if name in self._warm_queued or self._closed:
                return
            self._warm_queued.add(name)
        try:
            self._warming.submit(self.warm, name)
        except RuntimeError:  # closed meanwhile
            pass

    def warm(self, name: str) -> bool:
        """Load now what a question on the collection would load first (issue 43: the first questions after ready
        on a replica that did not index it loaded the collection, its vectors, its live BM25 and the embedder,
        while other questions waited for the cores): while it is being indexed, the embedder an offered retriever
        embeds queries with; once ready, its document and every offered retriever's index, as the indexing job
        stored them. Whether the collection was loaded. Whatever fails is left to the question, which says why."""
        with self._count:
            self._warm_queued.discard(name)
        try:
            state = self.collections.state(name)
            self._warm_embedder()
            if state.state != "ready":
                return False
            document = self.document(name, self.stopping, state)  # (a server closing stops it)
            for spec in self._offered_specs():
                if not RETRIEVERS.get(spec.name).meta.get("calls_reader"):
                    settings = self.base.settings_for(None if spec.name == self.settings.retriever
                                                      else {"retriever": spec.name})
                    self._loaded_retriever(name, document, settings)
            return True
        except Exception as exc:  # noqa: BLE001 - a warm-up is never an error: the question meets it, and says it
            log.debug("collection %s not warmed: %s", name, exc)
            return False

    def _warm_embedder(self) -> None:
        """The embedder made (its model loaded), when an offered retriever embeds queries: a question's query is then
        its only work. Nothing is embedded here."""
        if self._embedder_warm or not set(self.retrievers) & _QUERY_EMBEDDING:
            return
        self._embedder_warm = True
        uncached(self.base.embedder)

    def _identity(self, name: str) -> str | None:
        try:
            return self.collections.identity(name)
        except NotFound:
            return None

    def _collection_id(self, name: str) -> str | None:
        try:
            return self.collections.collection_id(name)
        except NotFound:
            return None

    def _keep(self, name: str, identity: str, document: Document) -> bool:
        """Keep ``document`` as the collection's if the collection is still the one it was read from (indexing that
        ends after a delete never puts the old document back), releasing the documents it replaces; whether it
        was kept."""
        with self._documents.lock:
            current = self._identity(name) == identity
            previous = self._documents.entries.get(name) if current else None
            stale = self._documents.stale.pop(name, None) if current else None
            if current:
                self._documents.entries[name] = (identity, document)
        if not current:
            self._release(document)  # read for a collection that is gone
            return False
        for earlier in {id(d): d for d in (previous[1] if previous else None, stale) if d is not None}.values():
            if earlier.content_hash != document.content_hash:
                self._release(earlier)  # the collection's earlier content
        return True

    def _drop(self, name: str, identity: str) -> None:
        with self._documents.lock:
            kept = self._documents.entries.get(name)
            if kept is None or kept[0] != identity:
                return
            del self._documents.entries[name]
        self._release(kept[1])

    def _release(self, document: Document) -> None:
        """Drop ``document``'s indexes and contexts from the memory of every pipeline (a shared one once)."""
        content_hash = document.content_hash
        self.base.forget(content_hash)

    # -- answers -----------------------------------------------------------------------------------------------
    def choices(self, options: dict[str, Any]) -> dict[str, Any]:
        """The request's options as the one pipeline's per-question choices, checked as the CLI checks its flags
        (an option neither the strategy nor the retriever takes is refused here, before the question waits)."""
        given = {k: v for k, v in options.items() if k in ANSWER_OPTIONS and v is not None}
        if "router" in given:
            given["router"] = self.router(given["router"])
        if "options" in given:  # over the server's own (lcrag serve --option)
            given["options"] = self.settings.options | given["options"]
        settings = self.base.settings_for(given)
        self.base.strategy(settings.strategy, settings)
        return given

    def router(self, name: Any) -> str:
        """The router a request names, as the server knows it; any other value is refused (HTTP 400)."""
        if not isinstance(name, str) or name not in self.routers:
            raise InputError(f"router: one of the routers this server offers ({', '.join(sorted(self.routers))}); "
                             f"got {str(name)[:40]!r}")
        return self.routers[name]

    def ask(self, collection: str, question: str, options: dict[str, Any],
            listener: streaming.Listener | None = None, history: list[dict[str, str]] = ()) -> Answer:
        """The answer, after the questions queued before it (or the one kept for this version of the collection,
        without a reader call). The ``listener`` gets the answer's events as they happen (``started`` once the reader
        is this question's, then those of :mod:`lcrag.readers.streaming`; a kept answer: ``started`` and its text as
        one ``token``); setting its ``cancelled`` (the client left) drops a waiting question from the queue and stops
        a running generation. ``history``: the conversation the question follows (role and content, oldest first)."""
        listener = listener or streaming.Listener()
        choices = self.choices(options)
        state = self.collections.state(collection)  # one read: whether it is answerable, its version, its document
        self.check_answerable(collection, state)
        with self._count:  # before any parsing or waiting: beyond the queue, a question costs nothing
            if self.stopping.is_set():
                raise ShuttingDown("the server is shutting down; ask again when it is back")
            if self._waiting >= self.max_waiting:
                raise Busy(f"{self._waiting} requests are already waiting for the reader")
            self._waiting += 1
            self._asked[id(listener)] = listener
        try:
            version = self.answers.version_of(state)  # before the document: a change meanwhile is a new version
            document = self.document(collection, listener.cancelled, state)
            key = self.answers.key(document, question, list(history), choices) if version else ""
            kept = self.answers.get(version, key)
            if kept is not None:
                return self._replay(kept, collection, listener)
            self._loaded_retriever(collection, document, self.base.settings_for(choices))  # before the reader
            answer = self._generate(collection, document, question, history, choices, listener)
            self.answers.put(version, key, answer, collection)
            return answer
        except streaming.Cancelled:
            if self.stopping.is_set():
                raise ShuttingDown("the server is shutting down: the question was stopped after its "
                                   "--shutdown-seconds; ask again when it is back") from None
            raise
        finally:
            with self._count:
                self._waiting -= 1
                self._asked.pop(id(listener), None)
                self._count.notify_all()

    def _generate(self, collection: str, document: Document, question: str, history: list[dict[str, str]],
                  choices: dict[str, Any], listener: streaming.Listener) -> Answer:
        """The reader's answer, in a place at the reader (waited for until ``listener`` is cancelled)."""
        self.slots.take(listener.cancelled)
        try:
            read: list[str] = []  # the files LC read whole, over a collection larger than the window
            with streaming.listening(self._describing(listener, document, read)):
                streaming.check_cancelled()
                listener.on_event("started", {"collection": collection})
                answer = billed(self.base.ask(document, question, history=history, **choices))
            if read and answer.route == "lc":
                answer.retrieval = {"unit": "file", "files": read}
            return answer
        finally:
            self.slots.give_back()

    @staticmethod
    def _replay(answer: Answer, collection: str, listener: streaming.Listener) -> Answer:
        """A kept answer, told as a live one is: ``started``, then its text as one token (as a reader that cannot
        stream gives it)."""
        if listener.cancelled.is_set():
            raise streaming.Cancelled("the client left while its question waited")
        listener.on_event("started", {"collection": collection, "from_cache": True})
        if answer.conversation:  # how a follow-up was asked, and what it read, as the live answer told them
            listener.on_event("conversation", answer.conversation)
        if answer.chunks:
            listener.on_event("retrieved", {"tokens": None, "chunks": [s.to_dict() for s in answer.sources]})
        listener.on_event("token", {"text": answer.text, "stage": "answer", "provisional": False})
        return answer

    def search(self, collection: str, query: str, k: int, retriever: str | None = None) -> list[dict[str, Any]]:
        """The ``k`` passages of the collection that best match ``query`` (file, pages, section, a quote, score), by
        the server's retriever or ``retriever``; no reader call, so it never waits in the reader's queue (a retriever
        that calls the reader is refused: ask with it instead, queued and billed)."""
        settings = self.base.settings_for({"retriever": retriever} if retriever else {})
        if RETRIEVERS.get(settings.retriever).meta.get("calls_reader"):
            raise InputError(f"retriever: {settings.retriever} writes summaries with the reader; search makes no "
                             "model call (ask with it: the question is queued and its calls billed)")
        document = self.document(collection)
        ranked = self._loaded_retriever(collection, document, settings).run(query, k)
        return [self._source(document, scored.chunk, scored.score, 2000).to_dict() for scored in ranked]

    @staticmethod
    def _source(document: Document, chunk, score: float, quote_chars: int) -> Source:
        return Source(**locate(document, chunk.start, chunk.end), chunk=chunk.index, score=score,
                      snippet=snippet(document.text[chunk.start:chunk.end], quote_chars))

    @staticmethod
    def _describing(listener: streaming.Listener, document: Document, read: list[str]) -> streaming.Listener:
        """The listener, with retrieved chunks told as the places they come from (file, pages, section, a quote),
        and the files a long read took (``read`` events) noted in ``read``."""
        def on_event(kind: str, data: dict[str, Any]) -> None:
            if kind == "read":
                read[:] = data["files"]
            if kind == "retrieved":
                data = data | {"chunks": [Answering._source(document, c, c.score, 160).to_dict()
                                          for c in data["chunks"]]}
            listener.on_event(kind, data)

        return streaming.Listener(on_event, listener.cancelled)

    def cost(self, answer: Answer) -> dict[str, Any]:
        total = calls_cost(answer.calls, self.prices, self.price_as)
        return {"currency": "USD", "total": total, "priced_as": self.price_as}

    def stop_questions(self) -> None:
        """Cancel every question being answered (each stops at its next step boundary and answers 503), and refuse
        those that come after: what a server shutting down does once its drain time is over."""
        with self._count:
            self.stopping.set()
            for listener in self._asked.values():
                listener.cancelled.set()

    def close(self) -> None:
        """Stop the questions still running and wait (at most :data:`STOP_WAIT` seconds) for them to let go of the
        reader and the store, then close the pools, the sandbox's processes and the store. Once: a second call
        does nothing."""
        with self._count:
            if self._closed:
                return
            self._closed = True
        self.stop_questions()
        self.executor.shutdown(wait=False, cancel_futures=True)
        self._warming.shutdown(wait=False, cancel_futures=True)
        with self._count:
            self._count.wait_for(lambda: not self._asked, STOP_WAIT)
        self._parsing.shutdown(wait=False, cancel_futures=True)
        self.segments.close()
        self.parser.close()
        self.collections.close()
        self.base.close()
