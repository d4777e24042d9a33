"""The pipeline: documents -> chunking -> retrieval -> assembly -> readers -> strategies, driven by one Settings."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from lcrag.chunking import Chunker, make_chunker
from lcrag.chunking.spec import FALLBACK_CHUNKING, parse_chunking
from lcrag.pipeline.config import MAX_WINDOW_TOKENS, PER_QUESTION, ChunkingConfig, Settings
from lcrag.documents import load_document
from lcrag.documents.limits import ParseLimits
from lcrag.documents.indexed_corpus import CorpusSource, is_corpus_index
from lcrag.core.errors import InputError, OptionError
from lcrag.core.options import at_least, at_most
from lcrag.core.paths import cache_directory
from lcrag.readers import (
    CachedReader,
    CompletionCache,
    Reader,
    make_reader,
    server_stats,
)
from lcrag.readers import streaming
from lcrag.readers.call_context import Asking
from lcrag.core.lru import SizedLRU
from lcrag.readers.kv_store import max_bytes_from_env
from lcrag.core.registry import CHUNKERS
from lcrag.retrieval import DocumentIndex, Embedder, make_embedder
from lcrag.retrieval.index import ProgressFactory
from lcrag.strategies import PromptSet, QueryContext, Strategy, check_reads, make_strategy
from lcrag.strategies.citations import cite
from lcrag.strategies.conversation import Turn, standalone
from lcrag.strategies.routing.learned import Router, router_file_identity
from lcrag.strategies.routing.share_control import ShareLedgers
from lcrag.pipeline.contexts import AnsweringContexts
from lcrag.pipeline.specs import QuestionSpec, RetrieverSpec, frozen, resolve
from lcrag.core.types import Answer, Document, QuestionSource, SourceIndex

if TYPE_CHECKING:
    from lcrag.retrieval.corpus.source import CorpusUnits

# What a pipeline keeps in memory of the documents it has answered over (indexes and answering contexts) unless told
# otherwise: dozens of books, and a bound, so that a long-running service does not grow with every document it sees.
DEFAULT_MEMORY_BYTES = 512 << 20
_CHOICES_KEPT = 256  # settings objects kept per pipeline, one per distinct set of per-question choices
_STRATEGIES_KEPT = 128  # strategies kept per pipeline, one per strategy spec (a router in them is shared)
_CORPORA_KEPT = 16  # corpus indexes kept open per pipeline (one per directory and unit kind)


def as_source(source: QuestionSource | str | Path, limits: ParseLimits | None = None) -> QuestionSource:
    """``source`` itself (a document, a collection, a corpus source), a corpus index (a directory written by ``lcrag
    corpus build``: the strategies that read a corpus then read its retrieval units), or the document loaded from a
    file or directory within ``limits`` (None: the defaults; ``file_mb``: the largest file read whole)."""
    if not isinstance(source, (str, Path)):
        return source
    if is_corpus_index(source):
        return CorpusSource.open(source)
    return load_document(source, limits)


@dataclass(frozen=True)
class IndexMaking:
    """What a pipeline lends a source to make its index for one question (:class:`lcrag.core.types.IndexParts`): the
    choices that shape it, and the pipeline's two ways of making an index and keeping it."""

    pipeline: Pipeline
    chunking: str
    chosen_chunking: str | None
    unit: str | None

    def text_index(self, document: Document, made_as: Callable[..., SourceIndex] | None = None) -> SourceIndex:
        return self.pipeline.text_index(document, self.chunking, made_as)

    def unit_index(self, directory: str, unit: str | None) -> SourceIndex:
        return self.pipeline.unit_index(directory, unit)


class Pipeline:
    """Answers questions over documents; keeps the reader, embedder and indexes warm between questions."""

    def __init__(
        self,
        settings: Settings | None = None,
        reader: Reader | None = None,
        embedder: Embedder | None = None,
        progress: ProgressFactory | None = None,
        summary_reader: Reader | None = None,
        memory: SizedLRU | None = None,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
        query_cache: bool | None = None,
        parse_limits: ParseLimits | None = None,
    ):
        """``memory``: where indexes and answering contexts are kept, least recently used dropped first beyond
        its bound (default: this pipeline's own, of ``memory_bytes``); pipelines may share one when they share
        their reader and embedder (an index is keyed by document, chunking, retriever options and cache directory,
        not by them). ``query_cache``: keep question vectors on disk under the cache directory (default: when
        ``settings.cache`` is on; an eval, which keeps its own completion cache, turns it on by itself).
        ``parse_limits``: what reading a document given by its path may cost (the largest file, its text)."""
        self.settings = settings or Settings()
        self.parse_limits = parse_limits or ParseLimits()
        self.cache_dir = cache_directory(self.settings.cache_dir)
        # A router holding an LC share keeps it per reader in the cache, shared with other processes.
        self.share_ledgers = ShareLedgers(self.cache_dir / "routing-shares")
        self._reader = reader
        self._own_reader = reader is None  # a reader handed in is its owner's to close
        self._summary_reader = summary_reader
        self._own_summary_reader = summary_reader is None
        self._embedder = embedder
        self._query_cache = self.settings.cache if query_cache is None else query_cache
        self._progress = progress
        self.memory: SizedLRU = memory if memory is not None else SizedLRU(memory_bytes, _memory_bytes)
        self.contexts: AnsweringContexts = AnsweringContexts(self.memory, lambda: self.reader, self.share_ledgers)
        self._strategies: SizedLRU[tuple, Strategy] = SizedLRU.counted(_STRATEGIES_KEPT)
        self._choices: SizedLRU[tuple, Settings] = SizedLRU.counted(_CHOICES_KEPT)
        # By directory and unit kind. One dropped is not closed here (a question may still read it): its store
        # closes when the last one using it lets go of it.
        self._corpora: SizedLRU[str, CorpusUnits] = SizedLRU.counted(_CORPORA_KEPT)
        # A lock for the lazily made reader and embedder, so each is made once however many threads ask first.
        self._parts_lock = threading.RLock()

    @property
    def reader(self) -> Reader:
        if self._reader is None:
            with self._parts_lock:
                if self._reader is None:
                    self._reader = self._make_reader()
        return self._reader

    def _make_reader(self) -> Reader:
        s = self.settings
        reader = make_reader(s.llm, context_window=s.context_window, tokenizer=s.tokenizer, **s.reader_endpoint())
        if s.cache and hasattr(reader, "keep_prefixes"):  # LC's document prefixes survive this process
            reader.keep_prefixes(self.cache_dir / "kv", max_bytes_from_env())
        return self._cached(reader)

    def reader_servers(self) -> list[dict]:
        """What each server of the answering reader reported (prompt and cached prompt tokens) and, for a pool of
        servers, how each is doing (:func:`lcrag.readers.server_stats`); [] until the reader is made."""
        return server_stats(self._reader)

    def _cached(self, reader: Reader) -> Reader:
        """``reader`` behind this pipeline's completion cache, when caching is on."""
        if self.settings.cache:
            return CachedReader(reader, CompletionCache(self.cache_dir / "completions.sqlite"))
        return reader

    @property
    def summary_reader(self) -> Reader:
        """The reader that writes summary indexes: ``summary_llm`` when it names another model, else :attr:`reader`."""
        s = self.settings
        if self._summary_reader is None and s.separate_summary_llm is None:
            return self.reader
        with self._parts_lock:
            if self._summary_reader is None:
                # Its own model and window; a local spec ignores base_url, an openai: spec shares the server's.
                self._summary_reader = self._cached(make_reader(s.summary_llm, **s.reader_endpoint()))
        return self._summary_reader

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            with self._parts_lock:
                if self._embedder is None:
                    self._embedder = self._make_embedder()
        return self._embedder

    def _make_embedder(self) -> Embedder:
        s = self.settings
        endpoint = {"base_url": s.base_url, "api_key": s.api_key, "timeout": s.timeout}
        if self._query_cache:  # a question seen before reads its vector from disk, without loading the embedder
            from lcrag.retrieval.query_cache import cached_query_embedder

            return cached_query_embedder(s.embedder, lambda: make_embedder(s.embedder, **endpoint),
                                         self.cache_dir, **endpoint)
        return make_embedder(s.embedder, **endpoint)

    def settings_for(self, choices: Mapping[str, object] | None = None) -> Settings:
        """The settings with one question's choices (:data:`PER_QUESTION`: strategy, retriever, k, options, ...),
        checked as every Settings is; the same choices give the same object, so what is kept per choice is found
        again. Choosing the reader, embedder or cache per question is refused: they are the pipeline's own."""
        if not choices:
            return self.settings
        fixed = sorted(set(choices) - set(PER_QUESTION))
        if fixed:
            raise OptionError(f"{', '.join(fixed)}: a setting of the pipeline itself (its reader, embedder or cache), "
                              "not of one question; make a Pipeline with it")
        key = tuple(sorted((name, frozen(value)) for name, value in choices.items()))
        return self._choices.get_or_put(key, lambda: replace(self.settings, **choices))  # checked by the sections

    def chunker(self, chunking: str) -> Chunker:
        unit, size, overlap = parse_chunking(chunking)
        tokenizer = self.reader.tokenizer if CHUNKERS.get(unit).meta.get("needs_tokenizer") else None
        return make_chunker(unit, size, tokenizer, overlap)

    def index(self, document: QuestionSource | str | Path, chunking: str | None = None,
              settings: Settings | None = None) -> SourceIndex:
        """The source's index for ``chunking`` (default: the configured strategy's; a corpus index has its own units),
        made as its kind makes it (:meth:`lcrag.core.types.QuestionSource.open_index`) and kept: a text's from disk
        when it exists, one per document and chunking, built by one thread while others asking for it wait (no
        pipeline-wide lock is held meanwhile). Its retrievers are built per
        :class:`~lcrag.pipeline.specs.RetrieverSpec` (``index.retriever``)."""
        s = settings or self.settings
        source = as_source(document, self.parse_limits)
        return source.open_index(IndexMaking(self, chunking or s.chunking_for(s.strategy), chunking, s.unit))

    def text_index(self, document: Document, chunking: str,
                   made_as: Callable[..., SourceIndex] | None = None) -> SourceIndex:
        """``document``'s index for ``chunking``, made as ``made_as`` (default :class:`DocumentIndex`) with this
        pipeline's chunker, cache, embedder and readers, kept in its memory."""
        key = ("index", document.content_hash, chunking, self.cache_dir)
        return self.memory.get_or_put(key, lambda: (made_as or DocumentIndex)(
            document, self.chunker(chunking), self.cache_dir, lambda: self.embedder, self._progress,
            reader_factory=lambda: self.reader, summary_reader_factory=lambda: self.summary_reader,
            config={"chunking": ChunkingConfig(chunking).to_dict()},  # embeddings are named by their embedder
        ))

    def retriever_spec(self, settings: Settings | None = None) -> RetrieverSpec:
        """The settings' retriever with the options it declares (``window``, a plugin's own)."""
        return resolve(settings or self.settings).retriever

    def forget(self, content_hash: str) -> int:
        """Drop what is kept in memory of the document with this content hash (its indexes and answering
        contexts; they are built again, from disk, if it is asked about later); how many entries were dropped."""
        return self.memory.drop(lambda key: key[1] == content_hash)

    def corpus(self, source: CorpusSource) -> CorpusUnits:
        """The corpus index's units (its own kind, else the smallest built), opened once."""
        return self.unit_index(source.directory, source.unit)

    def unit_index(self, directory: str, unit: str | None) -> CorpusUnits:
        """The units of the corpus index in ``directory``, opened once (the embedder only loads if dense search is
        used); opening one never holds up another question's corpus, settings or strategy."""
        def opened() -> CorpusUnits:
            from lcrag.retrieval.corpus.source import CorpusUnits  # imported when a corpus is read

            return CorpusUnits.open(directory, unit, lambda: self.embedder)

        return self._corpora.get_or_put(f"{directory}:{unit}", opened)

    def context(self, document: QuestionSource, strategy: str, settings: Settings | None = None,
                spec: QuestionSpec | None = None) -> QueryContext:
        """What a strategy answers with over ``document`` (:class:`~lcrag.pipeline.contexts.AnsweringContexts`),
        kept per document and per :attr:`QuestionSpec.context_key` (the choices that shape it)."""
        s = settings or self.settings
        spec = spec or resolve(s, strategy)
        return self.contexts.made_for(document, spec, self._index_making(s, spec))

    def _index_making(self, settings: Settings, spec: QuestionSpec) -> IndexMaking:
        return IndexMaking(self, spec.chunking, settings.chunking, spec.unit)

    def strategy(self, name: str, settings: Settings | None = None, spec: QuestionSpec | None = None) -> Strategy:
        """The strategy called ``name`` with the options the settings give it, kept per strategy spec (a condition
        says what it says once, e.g. no logprobs), the last :data:`_STRATEGIES_KEPT` of them. A router is parsed
        once per version of its file and shared. An option neither this strategy nor the retriever takes is
        refused."""
        spec = spec or resolve(settings or self.settings, name)
        options = spec.strategy.kwargs
        router = options.get("router")
        key = (spec.strategy, router_file_identity(router) if router else None)

        def made() -> Strategy:
            if router:
                options["router"] = Router.load(router)
            return make_strategy(name, **options)

        return self._strategies.get_or_put(key, made)

    def ask(
        self,
        document: QuestionSource | str | Path,
        question: str,
        strategy: str | None = None,
        prompts: PromptSet | None = None,
        max_tokens: int | None = None,
        sources: bool = True,
        history: Sequence[Turn | Mapping] = (),
        **choices: object,
    ) -> Answer:
        """Answer ``question``; ``prompts`` and ``max_tokens`` override the settings for this call (task prompts),
        and ``choices`` any other setting a question may choose (:data:`PER_QUESTION`: ``k=3``,
        ``retriever="dense"``, ``options={"widen": 4}``), over the same reader, embedder and kept indexes.
        ``sources=False`` leaves ``answer.sources`` empty: locating an LC answer's sources searches the document,
        work a caller that drops them (an eval's rows) need not pay for. ``history``: the conversation the question
        follows (messages with a role and a content, oldest first), from which it is made to stand alone
        (:mod:`lcrag.strategies.conversation`; the ``condense`` setting says how)."""
        if not question.strip():
            raise InputError("the question is empty")
        at_least("max_tokens", max_tokens, 1, optional=True)
        at_most("max_tokens", max_tokens, MAX_WINDOW_TOKENS, optional=True)
        s = self.settings_for(choices)
        strategy = strategy or s.strategy
        spec = resolve(s, strategy)  # every choice, once: the strategy and the context are found by it
        source = as_source(document, self.parse_limits)
        check_reads(strategy, source)  # a corpus index with a strategy that reads one text: refused in one line
        runner = self.strategy(strategy, s, spec)
        ctx = self.contexts.made_for(source, spec, self._index_making(s, spec))
        if prompts is not None or max_tokens is not None:
            # A shallow copy: the truncated-document memo stays shared with the cached context.
            ctx = replace(ctx, prompts=prompts or ctx.prompts,
                          params=replace(ctx.params, max_tokens=max_tokens or ctx.params.max_tokens))
        streaming.check_cancelled()  # a question cancelled while its context was made (its index built) stops here
        asked = standalone(self.reader, history, question, spec.condense, spec.history_turns)
        if asked.method != "as-asked":
            streaming.emit("conversation", **asked.to_dict())  # a stream shows how the follow-up is asked
        if asked.query != asked.question:
            ctx = replace(ctx, query=asked.query)
        # Which question, document and route each answering call is for, given to the reader with the call (the
        # replay reader answers by it): set here, the one place a strategy is run for a question.
        ctx = replace(ctx, asking=Asking(question, ctx.document, runner.route or None))
        streaming.check_cancelled()
        answer = runner.run(ctx, asked.question)
        if asked.method != "as-asked":
            answer.question, answer.calls = question, asked.calls + answer.calls
            answer.conversation = asked.to_dict()
        if sources:
            streaming.check_cancelled()  # locating an LC answer's sources searches the document's index
            answer.sources = cite(ctx, answer, asked.query)  # an LC answer's are located in the document's index
        return answer

    def close(self) -> None:
        """Close what this pipeline made (its readers, its corpora); the readers it was handed stay open."""
        readers = ([self._reader] if self._own_reader else []) + ([self._summary_reader] if self._own_summary_reader
                                                                  else [])
        for reader in readers:
            close = getattr(reader, "close", None)
            if close:
                close()
        if self._own_reader:
            self._reader = None
        for units in self._corpora.values():
            units.close()
        self._corpora.clear()
        if self._own_summary_reader:
            self._summary_reader = None


def _memory_bytes(value: DocumentIndex | QueryContext) -> int:
    """What a kept index or answering context weighs: an index its own measure, a context its document's text and
    the truncated texts LC sent."""
    if isinstance(value, DocumentIndex):
        return value.memory_bytes()
    return sys.getsizeof(value.document.text or "") + value.memo_bytes()  # a corpus keeps no text


def _settings(**settings) -> Settings:
    unknown = set(settings) - set(Settings.__dataclass_fields__)
    if unknown:
        raise InputError(f"unknown setting(s): {', '.join(sorted(unknown))}")
    return replace(Settings(), **settings)


def index(document: Document | str | Path, chunking: str = FALLBACK_CHUNKING, retrievers=("bm25", "dense"), **settings) -> DocumentIndex:
    """Chunk, BM25-index and embed a document on disk, as ``lcrag index`` does; later questions reuse it."""
    pipeline = Pipeline(_settings(**settings))
    try:
        idx = pipeline.index(document, chunking)
        for kind in retrievers:
            idx.retriever(kind)
        return idx
    finally:
        pipeline.close()


def ask(document: Document | str | Path, question: str, strategy: str = "self-route", **settings) -> Answer:
    """Answer one question: ``lcrag.ask("book.txt", "Who is Alice's sister?", strategy="self-route", k=5)``.

    Keyword arguments are :class:`Settings` fields. For many questions, keep a :class:`Pipeline` instead.
    """
    pipeline = Pipeline(_settings(strategy=strategy, **settings))
    try:
        return pipeline.ask(document, question)
    finally:
        pipeline.close()
