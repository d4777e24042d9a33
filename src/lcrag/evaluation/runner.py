"""The evaluation runner: strategies × retrievers × k/budget over a dataset, one JSONL row per (question, config).

Rows are appended and fsync'ed as they finish; completions go to the run's own cache as each call returns. Killed at
any moment and started again on the same run directory, the runner skips finished rows, drops a half-written last
line, and answers the rest from the cache where a call was already made: no LLM call is repeated, no row lost or
written twice. A router holding an LC share routes a resumed run as an unbroken one: its ledger (``RUN/cache``) is
written before the row, and a question re-asked keeps its first route uncounted (one in flight at the kill is among
the last routes; one that ended with no answer is pinned, :meth:`ShareLedgers.answering`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from lcrag.pipeline.config import Config, EvalConfig
from lcrag.core.errors import InputError, NoAnswer, OptionError, RunDirectoryError
from lcrag.evaluation.datasets import EvalItem, file_hash
from lcrag.evaluation.metrics import METRICS, exact_match, has_answer, refined_exact_match
from lcrag.evaluation.prompts import PROMPT_VERSION, prompts_for
from lcrag.core.lru import SizedLRU
from lcrag.evaluation.rundir import (
    MANIFEST,
    ROWS,
    ensure_run_dir,
    hold_run,
    open_run_cache,
    read_manifest,
    read_rows,
    repair_torn_tail,
)
from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.readers import CachedReader, CompletionCache, Reader, make_reader
from lcrag.core.question_settings import QUESTION_SETTINGS, by_name, identity_additions
from lcrag.core.redaction import redact_spec, redact_url
from lcrag.core.registry import RETRIEVERS, STRATEGIES
from lcrag.core.files import atomic_write_text
from lcrag.documents.indexed_corpus import CorpusSource
from lcrag.retrieval.corpus.index import CorpusIndex
from lcrag.core.text import QUESTION_WORDS, content_words, question_type  # noqa: F401  (the analysis imports them)
from lcrag.strategies.routing.learned import bundled_router, numbers_in, retrieved_text, shipped_name, text_signals
from lcrag.strategies import needs_corpus, strategy_needs
from lcrag.core.types import Document

# Document texts whose Document, content words and figures the workers keep (each of the three kinds an entry): at
# least this many, and this many per worker (each works on one document at a time, others may wait their turn).
DOCUMENTS_KEPT = 16
DOCUMENTS_KEPT_PER_WORKER = 4


@dataclass(frozen=True)
class RunConfig:
    strategy: str
    retriever: str = "bm25"
    k: int = 5
    budget: int | None = None
    unit: str | None = None  # corpus strategies: passage, document or grouped

    def to_dict(self) -> dict:
        # Fields left at None are omitted, so that adding an optional field does not make earlier run
        # directories look like different runs.
        return {k: v for k, v in asdict(self).items() if v is not None or k == "budget"} | {"id": self.id}

    @property
    def id(self) -> str:
        size = f"budget{self.budget}" if self.budget else f"k{self.k}"
        if strategy_needs(self.strategy) in ("question", "document"):  # no retrieval: one config
            return self.strategy
        if self.unit:
            return f"{self.strategy}|{self.unit}|{self.retriever}|{size}"
        return f"{self.strategy}|{self.retriever}|{size}"


def expand_configs(strategies: list[str], retrievers: list[str], ks: list[int], budgets: list[int],
                   units: list[str] | None = None) -> list[RunConfig]:
    """The matrix, without duplicates: LC and closed-book do not depend on retrieval, so they appear once; corpus
    strategies also run over each unit kind (budgets are context-token limits for them)."""
    configs: dict[str, RunConfig] = {}
    for strategy in strategies:
        for unit in (units or ["grouped"]) if needs_corpus(strategy) else [None]:
            for retriever in retrievers:
                for size in [("k", k) for k in ks] + [("budget", b) for b in budgets]:
                    kw = {"k": size[1]} if size[0] == "k" else {"budget": size[1]}
                    config = RunConfig(strategy, retriever, unit=unit, **kw)
                    configs.setdefault(config.id, config)
    return list(configs.values())


def _options_for(config: RunConfig, options: dict) -> dict:
    """The options (``--option``) a configuration's strategy or retriever takes: a matrix of strategies shares one
    set, each part reading its own."""
    parts = [STRATEGIES.get(config.strategy)] + ([RETRIEVERS.get(config.retriever)] if config.retriever in RETRIEVERS
                                                 else [])
    return {name: value for name, value in options.items() if any(p.option(name) for p in parts)}


def _short(value) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def _package_versions() -> dict[str, str]:
    out = {}
    for name in ("lcrag", "xllamacpp", "tantivy", "onnxruntime", "tokenizers", "numpy", "rouge", "httpx"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


class RowLog:
    """Append-only JSONL of finished rows, safe against a kill in the middle of a write.

    Reading refuses a damaged file (``file:line``) and changes nothing; :meth:`repair` then cuts off a torn last line,
    the one damage a kill leaves."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._file = read_rows(path)
        self.done: dict[tuple[str, str], dict] = self._file.rows

    def repair(self) -> None:
        repair_torn_tail(self._file)

    def append(self, row: dict) -> None:
        line = json.dumps(row, ensure_ascii=False) + "\n"
        with self._lock:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            self.done[(row["item_id"], row["config"])] = row


def router_sha256(router: str) -> str:
    """sha256 of a router as :meth:`Router.load` reads it: the text of a router shipped with lcrag when ``router``
    is its bare name (``lara``), else its file's."""
    name = shipped_name(router)
    return hashlib.sha256(bundled_router(name).encode("utf-8")).hexdigest() if name else file_hash(router)


class EvalRunner:
    def __init__(
        self,
        items: list[EvalItem],
        configs: list[RunConfig],
        out_dir: str | Path,
        settings: Settings | None = None,
        reader: Reader | None = None,
        dataset_path: str | Path | None = None,
        concurrency: int = 1,
        filter_closed_book: bool = False,
        drop_closed_book: bool = False,
        corpus: str | Path | None = None,
        eval_config: EvalConfig | None = None,
    ):
        if not items:
            raise InputError("the dataset has no questions")
        from lcrag.core.options import EvalOptions  # the eval options are checked where the CLI checks them

        EvalOptions(ks=tuple(c.k for c in configs if c.budget is None),
                    budgets=tuple(c.budget for c in configs if c.budget is not None), concurrency=concurrency)
        # Checked whether or not a strategy asked reads it: a wrong --corpus is said, never silently unused.
        self.corpus_dir = CorpusIndex.check(corpus) if corpus else None
        needs_context = [c.id for c in configs if strategy_needs(c.strategy) in ("document", "chunks")]
        if any(needs_corpus(c.strategy) for c in configs) and self.corpus_dir is None:
            raise InputError("longrag reads a corpus: pass --corpus INDEX (built with `lcrag corpus build`)")
        missing = [i.id for i in items if i.context is None]
        if missing and needs_context and self.corpus_dir is None:
            raise InputError(f"{len(missing)} question(s) have no context: with a corpus-backed dataset pass "
                             f"--corpus INDEX (built with `lcrag corpus build`) for {', '.join(needs_context)}")
        self.items = items
        self.configs = configs
        # Shared by the worker threads (--concurrency), behind one lock: the documents and their content words
        # (bounded: a few per worker) and what this session answered or could not.
        self._lock = threading.Lock()
        # What the workers keep per document text: its Document (content hash computed once), its content words and
        # figures (router signals); made once however many workers ask, the least recently used dropped first, so a
        # long dataset does not keep every document's words.
        self._documents: SizedLRU[tuple[str, str], object] = SizedLRU.counted(
            max(DOCUMENTS_KEPT, DOCUMENTS_KEPT_PER_WORKER * concurrency))
        self.unanswered: list[str] = []  # (question, config) pairs the reader holds no answer for, with why
        self.out = Path(out_dir)
        ensure_run_dir(self.out)
        self.settings = replace(settings or Settings(), cache=False, cache_dir=self.out / "cache")
        self.dataset_path = dataset_path
        self.concurrency = concurrency
        self.filter_closed_book = filter_closed_book or drop_closed_book
        self.drop_closed_book = drop_closed_book
        self.eval_config = eval_config  # recorded in the manifest with the settings (the run file's view)
        self._reader = reader  # given: the caller's, never closed here
        self.pipeline: Pipeline | None = None  # the one pipeline of a run (see _open_pipeline)
        self._summary_reader: CachedReader | None = None
        self.rows: RowLog | None = None  # read in run(), once this process holds the run directory

    # -- manifest --------------------------------------------------------------------------------------------------
    def identity(self) -> dict:
        """Every setting that can change an answer; a run directory's rows all come from one identity.

        Needs the reader (its identity and effective context window, which sets LC truncation): call after
        :meth:`_open_pipeline`. URLs are redacted and API keys never included. ``reader`` is the reader's identity
        (``gguf:FILE#FINGERPRINT``: what its answers are keyed by, not a spec to load it); ``llm`` and the
        manifest's ``config.reader.llm`` are the spec it was loaded from."""
        s = self.settings
        reader = self._cached_reader.inner
        recorded = {
            "configs": [c.to_dict() for c in self.configs],
            "reader": getattr(reader, "identity", reader.model),
            "llm": redact_spec(s.llm),
            "base_url": redact_url(s.base_url),
            "tokenizer": s.tokenizer,
            "context_window": reader.context_window,
            "max_tokens": s.max_tokens,
            "embedder": s.embedder if any(c.retriever != "bm25" for c in self.configs) else None,
            "chunking": s.chunking or "strategy default",
            "order": s.order,
            "prompt_version": PROMPT_VERSION,
            "prompts_sha256": hashlib.sha256(json.dumps(s.prompts.identity(), sort_keys=True).encode()).hexdigest(),
            "summary_llm": redact_spec(s.separate_summary_llm) if self._uses({"tree", "raptor"}) else None,
            "retriever_options": self._retriever_options(),
            "corpus": str(self.corpus_dir) if self.corpus_dir else None,
            **({"corpus_unit": s.unit} if s.unit else {}),
            **({"route_threshold": s.route_threshold} if s.route_threshold is not None else {}),
            **({"router_sha256": router_sha256(s.router), "lc_share": s.lc_share,
                "lc_cost_share": s.lc_cost_share} if s.router else {}),
            **({"cache_aware": True} if s.cache_aware else {}),  # named only when on: an identity lists what was used
            **({"options": dict(sorted(s.options.items()))} if s.options else {}),
            "dataset_sha256": file_hash(self.dataset_path) if self.dataset_path else None,
            "closed_book_filter": "drop" if self.drop_closed_book else ("mark" if self.filter_closed_book else "off"),
        }
        # Every other declared per-question setting, by its name when not at its default: none is left out.
        declared = {setting.name: getattr(s, setting.name) for setting in QUESTION_SETTINGS}
        return recorded | identity_additions(declared, recorded)

    def manifest(self, identity: dict | None = None) -> dict:
        """The identity plus what describes this session's question list and software (not compared on resume:
        a larger --limit extends a run)."""
        return {
            **(identity or self.identity()),
            "dataset": str(self.dataset_path) if self.dataset_path else None,
            "items": len(self.items),
            "items_sha256": hashlib.sha256("\n".join(i.id for i in self.items).encode()).hexdigest(),
            "metrics": {m: METRICS[m].variant for m in sorted({i.metric for i in self.items})},
            "packages": _package_versions(),
            "python": platform.python_version(),
            "config": self._config(),
        }

    def _config(self) -> dict:
        """The configuration that built this run, from the same objects a run file builds (no secrets)."""
        config = Config.from_settings(self.settings, eval=self.eval_config).to_dict()
        return config if self.eval_config else {k: v for k, v in config.items() if k != "eval"}

    def _uses(self, retrievers: set[str]) -> bool:
        return any(c.retriever in retrievers for c in self.configs)

    def _retriever_options(self) -> dict | None:
        """Settings of the retrievers that have any (None otherwise)."""
        used = {c.retriever for c in self.configs}
        options = {}
        if "sentence-window" in used:
            options["window"] = self.settings.window
        if "tree" in used:
            options["tree_navigation"] = self.settings.tree_navigation
        return options or None

    def _check_manifest(self, old: dict | None) -> None:
        """Refuse a run directory produced by other settings (naming the keys); never rewrite its identity."""
        identity = json.loads(json.dumps(self.identity()))  # as read back from JSON (tuples become lists)
        manifest = self.manifest(identity)
        if old is None:
            manifest["started"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
            atomic_write_text(self.out / MANIFEST, json.dumps(manifest, indent=1))
            return
        missing = object()
        # A declared setting recorded in the old run but at its default now (so left out) differs too.
        settings_recorded = [k for k in old if k in by_name() and k not in identity]
        changed = [k for k in [*identity, *settings_recorded] if old.get(k, missing) != identity.get(k, missing)]
        if changed:
            details = "; ".join(f"{k}: {_short(old.get(k, '(not recorded)'))} -> {_short(manifest.get(k, '(default)'))}"
                                for k in changed)
            raise RunDirectoryError(f"{self.out} holds a different run ({', '.join(changed)} differ): {details}; "
                                    f"use a new --out, or the settings recorded in {self.out / MANIFEST}")
        session = {k: manifest[k] for k in ("dataset", "items", "items_sha256", "metrics")}
        if any(old.get(k) != v for k, v in session.items()):
            atomic_write_text(self.out / MANIFEST, json.dumps(old | session, indent=1))

    def _log_session(self, wall: float, rows: list[dict]) -> None:
        """Wall time of this process's share of the run against time spent waiting on the reader (harness overhead)."""
        llm = sum(c["seconds"] for r in rows for c in r["calls"] if not c["from_cache"])
        with (self.out / "sessions.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps({"ended": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "rows": len(rows),
                                "wall_seconds": round(wall, 3), "llm_seconds": round(llm, 3),
                                "concurrency": self.concurrency}) + "\n")

    # -- running ---------------------------------------------------------------------------------------------------
    def _open_pipeline(self, cache: CompletionCache) -> None:
        """The run's one pipeline, for every configuration: one reader behind the run's cache (its identity is part
        of the run's, so it is made first; a model loads on its first call), one embedder (loaded when a
        configuration needs it), one memory of indexes (a document is indexed once for all configurations) and one
        opening of a corpus index. A configuration is a question's choices."""
        s, log = self.settings, self.out / "llm_calls.log"
        self._summary_reader = None
        if s.separate_summary_llm:
            # Summaries by another model: one reader for every configuration, its calls cached and logged like the
            # answering reader's.
            self._summary_reader = CachedReader(make_reader(s.summary_llm, **s.reader_endpoint()), cache,
                                                miss_log=log)
        reader = self._reader or make_reader(s.llm, context_window=s.context_window, tokenizer=s.tokenizer,
                                             **s.reader_endpoint())
        self._cached_reader = CachedReader(reader, cache, miss_log=log)
        # Question vectors kept in the run's cache: each dense configuration (every k) embeds a question once.
        self.pipeline = Pipeline(s, reader=self._cached_reader, summary_reader=self._summary_reader,
                                 query_cache=True)

    def _close_pipeline(self) -> None:
        if self._summary_reader is not None:
            self._summary_reader.inner.close()
        if self.pipeline is not None:
            self.pipeline.close()  # its corpora: the readers it was handed are the run's
            if self._reader is None:  # the run made its reader (a caller's stays open)
                self._cached_reader.close()
        self.pipeline = None

    def _check_options(self, configs: list[RunConfig]) -> None:
        taken = {name for c in configs for name in _options_for(c, self.settings.options)}
        for name in self.settings.options:
            if name not in taken:
                raise OptionError(f"option {name!r}: no strategy or retriever of this run takes it")

    def _choices(self, config: RunConfig) -> dict:
        """What a configuration chooses for each of its questions."""
        return {"retriever": config.retriever, "k": config.k, "budget": config.budget,
                "options": _options_for(config, self.settings.options)}

    def _row(self, item: EvalItem, config: RunConfig, answer, closed_book_correct: bool | None) -> dict:
        metric = METRICS[item.metric]
        return {
            "item_id": item.id, "dataset": item.dataset, "config": config.id, "strategy": config.strategy,
            "retriever": config.retriever, "k": config.k, "budget": config.budget,
            "question": item.question, "question_type": question_type(item.question), "answers": item.answers,
            "prediction": answer.text, "metric": metric.name, "metric_variant": metric.variant,
            "score": metric.score_item(answer.text, item),  # LongBench classification also reads all_classes
            # strict and loose correctness for the win-lose analysis, whatever the task metric is
            "em": exact_match(answer.text, item.answers), "f1": METRICS["qa_f1"].score(answer.text, item.answers),
            "route": answer.route,
            "raw_route_answer": answer.raw_route_answer,
            # a routed strategy's first answer scored too (Self-Route's RAG step), so routers can be compared offline
            "route_score": (metric.score_item(answer.raw_route_answer, item)
                            if answer.raw_route_answer is not None else None),
            "prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
            "calls": [asdict(c) for c in answer.calls], "chunks": [c.index for c in answer.chunks],
            # what a router may read before choosing: retrieval scores (in the order given) and Self-Route's
            # probability of declining
            "chunk_scores": [round(c.score, 6) for c in answer.chunks],
            "decline_probability": answer.decline_probability,
            # a learned router holding an LC share: its score, threshold and the realized shares after this question
            **({"routing": answer.routing} if answer.routing else {}),
            **(self._route_terms(item, answer)
               if answer.raw_route_answer is not None and isinstance(item.context, str) else {}),
            "truncated_tokens": answer.truncated_tokens, "seconds": round(answer.seconds, 4),
            # opening (or, the first time, building) the retriever's index for this document
            "index_seconds": round(answer.timings.get("index", 0.0), 4),
            "closed_book_correct": closed_book_correct,
            **({"summary_chunks": sum(1 for c in answer.chunks if c.layer), "index_cost": answer.index_cost}
               if answer.index_cost else {}),
            **(self._corpus_fields(item, config, answer) if needs_corpus(config.strategy) else {}),
        }

    def _route_terms(self, item: EvalItem, answer) -> dict:
        """A router's term signals: the share of the question's key terms in the document and in the chunks, and
        the RAG answer's grounding in them (its own terms and figures)."""
        text = item.context
        words = self._documents.get_or_put(("words", text), lambda: content_words(text))
        figures = self._documents.get_or_put(("numbers", text), lambda: numbers_in(text))
        document, chunks, grounding = text_signals(item.question, answer.raw_route_answer, words, figures,
                                                   retrieved_text(text, answer.chunks))
        return {"question_terms": {"document": round(document, 4), "chunks": round(chunks, 4)},
                "answer_grounding": grounding.to_row()}

    def _corpus_fields(self, item: EvalItem, config: RunConfig, answer) -> dict:
        """LongRAG's measures: refined EM, answer recall of the context the reader saw, gold-document recall."""
        corpus = self.pipeline.corpus(self._corpus_source(config)).index  # the pipeline's opening of it
        titles = {t for c in answer.chunks for t in corpus.unit_titles(config.unit, c.index)}
        gold = item.meta.get("supporting_titles") or []
        return {
            "refined_em": refined_exact_match(answer.text, item.answers),
            "answer_recall": has_answer(answer.context or "", item.answers),
            "gold_recall": all(t in titles for t in gold) if gold else None,
            "unit": config.unit, "units": len(answer.chunks), "context_tokens": answer.context_tokens,
            "long_answer": answer.long_answer,
        }

    def _corpus_source(self, config: RunConfig) -> CorpusSource:
        return CorpusSource.open(self.corpus_dir, unit=config.unit)

    def _corpus_choices(self, item: EvalItem, config: RunConfig) -> dict:
        """A corpus configuration's choices: its scorer, k or budget (with a budget, units are read best first
        until it is full, whatever k says), and the turn-1 prompt of the item's task."""
        from lcrag.strategies.longrag import TURN1

        task = item.task if item.task in TURN1 else "nq"
        return self._choices(config) | {"options": {**self._choices(config)["options"], "task": task}}

    def run(self, progress: Callable[[int, int, dict], None] | None = None) -> list[dict]:
        """Run what is not done yet; returns the rows of this run. ``progress(done, total, row)`` after each row.

        One process at a time per run directory (another is refused, told which process holds it). Damaged rows,
        manifest or cache refuse the run before anything is written; only a torn last line is repaired."""
        with hold_run(self.out):
            self.rows = RowLog(self.out / ROWS)
            old = read_manifest(self.out)
            if old is None and self.rows.done:
                raise RunDirectoryError(f"{self.out / MANIFEST} is missing, so the settings behind the "
                                        f"{len(self.rows.done)} rows in {self.out / ROWS} are unknown; restore it "
                                        f"or start a new --out")
            cache = open_run_cache(self.out / "cache" / "completions.sqlite")
            try:
                self._open_pipeline(cache)
                self._check_manifest(old)  # before the embedder and indexes load: a refusal comes at once
                self.rows.repair()
                closed_book = RunConfig("closed-book")
                self._check_options([*self.configs, closed_book])
                return self._run(self.pipeline, closed_book, progress)
            finally:
                self._close_pipeline()
                cache.close()

    def _source(self, item: EvalItem, config: RunConfig, corpus: CorpusSource | None) -> Document:
        """What ``config`` reads for ``item``: its own context; for a corpus-backed question, the corpus index
        (every strategy retrieves its units); closed-book never reads it, so the question stands in."""
        if item.context is None and corpus is not None and strategy_needs(config.strategy) != "question":
            return corpus
        text = item.context if item.context is not None else item.question
        # Named by the first question that reads it: the name is not part of any answer.
        return self._documents.get_or_put(("document", text), lambda: Document(text, id=item.id))

    def _run(self, pipeline: Pipeline, closed_book: RunConfig,
             progress: Callable[[int, int, dict], None] | None) -> list[dict]:
        # Opened once, before any worker starts: read-only from then on.
        corpus = (CorpusSource.open(self.corpus_dir) if self.corpus_dir is not None
                  and any(i.context is None for i in self.items) else None)

        def answer_row(item: EvalItem, config: RunConfig, closed_book_correct: bool | None) -> dict:
            # A question routed (and counted in a held LC share) that ends with no row is re-asked by every resume:
            # its route is pinned so that it keeps it and is not counted again (share_control).
            with pipeline.share_ledgers.answering():
                if needs_corpus(config.strategy):  # a corpus is a source, answered by the same pipeline
                    answer = pipeline.ask(self._corpus_source(config), item.question, config.strategy,
                                          sources=False, **self._corpus_choices(item, config))
                else:
                    document = self._source(item, config, corpus)
                    prompts, max_tokens = prompts_for(item, self.settings.prompts)
                    answer = pipeline.ask(document, item.question, config.strategy, prompts=prompts,
                                          max_tokens=max_tokens, sources=False,  # rows keep no sources
                                          **self._choices(config))
            row = self._row(item, config, answer, closed_book_correct)
            self.rows.append(row)
            return row

        started = time.perf_counter()
        session_rows: list[dict] = []
        try:
            closed: dict[str, bool] = {}
            if self.filter_closed_book:
                # Question filtering (LC-vs-RAG revisited): a question the reader answers with no context at all.
                for item in self.items:
                    row = self.rows.done.get((item.id, closed_book.id)) or answer_row(item, closed_book, None)
                    closed[item.id] = row["score"] >= 0.999
            items = [i for i in self.items if not (self.drop_closed_book and closed.get(i.id))]
            todo = [(i, c) for i in items for c in self.configs if (i.id, c.id) not in self.rows.done]
            total = len(items) * len(self.configs)
            finished = total - len(todo)

            def work(pair: tuple[EvalItem, RunConfig]) -> dict | None:
                try:
                    row = answer_row(pair[0], pair[1], closed.get(pair[0].id))
                except NoAnswer as error:  # counted and reported, never a row scored 0
                    with self._lock:
                        self.unanswered.append(f"{pair[0].id} ({pair[1].id}): {error}")
                    return None
                with self._lock:
                    session_rows.append(row)
                return row

            # One worker is a plain in-order loop; more send concurrent requests (HTTP readers). Rows come back in order.
            with ThreadPoolExecutor(self.concurrency) as pool:
                for row in pool.map(work, todo):
                    finished += 1
                    if progress and row is not None:
                        progress(finished, total, row)
        finally:
            with self._lock:
                rows = list(session_rows)
            self._log_session(time.perf_counter() - started, rows)
        keep = {(i.id, c.id) for i in items for c in self.configs}
        return [r for key, r in self.rows.done.items() if key in keep]
