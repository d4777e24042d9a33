"""The ``lcrag`` command line."""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from lcrag.cli_analyze import analyze_app
from lcrag.cli_corpus import corpus_app
from lcrag.cli_keys import keys_app
from lcrag.cli_routing import route_app
from lcrag.cli_mcp import mcp
from lcrag.cli_worker import worker
from lcrag.cli_serve import BaseUrl as BaseURL, PoolBackoff, PoolMaxBackoff, ServerSlots, serve
from lcrag.assembly.context import ORDERS
from lcrag.documents.limits import ParseLimits
from lcrag.errors import LcragError, OptionError
from lcrag.options import SettingError, at_least, cli_message, longrag_choices, option_values, reader_forms
from lcrag.progress import progress_factory, spinner, stderr
from lcrag.http_client import DEFAULT_TIMEOUT
from lcrag.registry import CHUNKERS, DATASET_FORMATS, EMBEDDERS, RETRIEVERS, STRATEGIES, spoken_list
from lcrag.retrieval.tree_index import NAVIGATIONS
from lcrag.storage import ensure_directory
from lcrag.strategies import document_strategies

# lcrag.pipeline and lcrag.config are imported by the commands that use them: `lcrag --help` does not need them.
if TYPE_CHECKING:
    from lcrag.config import Config
    from lcrag.types import Answer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  context_settings={"max_content_width": 120}, help="Answer questions over long documents: LC, RAG, OP-RAG, Self-Route.")
app.add_typer(corpus_app, name="corpus")
app.add_typer(analyze_app, name="analyze")
app.add_typer(route_app, name="route")
app.add_typer(keys_app, name="keys")
app.command("serve")(serve)
app.command("mcp")(mcp)
app.command("worker")(worker)
# Wide enough for the demo table when output goes to a file or a pipe (rich assumes 80 columns there).
stdout = Console(width=None if sys.stdout.isatty() else 140)

# Choices and their help come from the registries (built-ins and plugins, which are named without being imported).
Strategy = Annotated[str, typer.Option("--strategy", "-s", help=f"One of: {STRATEGIES.describe()}.")]
RetrieverOpt = Annotated[str, typer.Option("--retriever", "-r", help=f"One of: {RETRIEVERS.describe()}.")]
CHUNKING_HELP = f"UNIT:SIZE (e.g. words:300, tokens:128) or UNIT:SIZE:OVERLAP (sentence-splitter:600:100), UNIT one of: {CHUNKERS.describe()}"
_READER_FORMS = reader_forms()
LLM = Annotated[str, typer.Option("--llm", help=f"The reader: {_READER_FORMS} (smollm2: bundled).")]
Chunking = Annotated[Optional[str], typer.Option("--chunking", help=f"{CHUNKING_HELP} (default: the strategy's own).")]
Embedder = Annotated[str, typer.Option("--embedder", help=f"The embedder: {EMBEDDERS.spec_forms()} (minilm: bundled ONNX).")]
ContextWindow = Annotated[Optional[int], typer.Option("--context-window", help="Reader window in tokens (default: the model's).")]
Threads = Annotated[Optional[int], typer.Option("--threads", help="CPU threads for the embedded reader.")]
Timeout = Annotated[float, typer.Option("--timeout", help="Seconds one call to a reader or embedder may take, retries included; then it fails.")]
Window = Annotated[int, typer.Option("--window", help="sentence-window retriever: sentences either side of a hit (0 to 64).")]
SummaryLLM = Annotated[Optional[str], typer.Option("--summary-llm", help="raptor/tree retrievers: who writes the summaries (default: the --llm reader); same specs as --llm.")]
TreeNavigation = Annotated[str, typer.Option("--tree-navigation", help=f"tree retriever: {spoken_list(NAVIGATIONS)} (llm: the reader picks the branch).")]
CacheDir = Annotated[Optional[Path], typer.Option("--cache-dir", envvar="LCRAG_CACHE_DIR", help="Where indexes and the completion cache live.")]
RouteThreshold = Annotated[Optional[float], typer.Option("--route-threshold", help="Self-Route: send a question to LC when the reader's probability of answering \"unanswerable\" is >= this (0..1; 0: every question). Default: the written answer decides.")]
RouterFile = Annotated[Optional[str], typer.Option("--router", help="A learned router: `lara` (shipped, fitted on ten strong readers' LaRA answers) or a file from `lcrag route fit`, given by a path with a slash or a suffix (./router, router.json). Self-Route goes to LC when it predicts LC beats RAG on the question (holding --lc-share or --lc-cost-share, or at a fixed --route-threshold).")]
LCShare = Annotated[Optional[float], typer.Option("--lc-share", help="With --router: hold this share (0..1) of the questions answered going to LC, per reader, at run time (the threshold follows the router's recent scores, kept in the cache). A shipped router holds its own (lara: 0.3).")]
LCCostShare = Annotated[Optional[float], typer.Option("--lc-cost-share", help="With --router: hold LC's share (0..1) of the prompt tokens instead of the questions.")]
PricesFile = Annotated[Optional[Path], typer.Option("--prices", help="A TOML/YAML price table (USD per million input, cached input, output tokens per model), added over the built-in one.")]
PriceAs = Annotated[Optional[str], typer.Option("--price-as", help="Price the calls as if made with this model (e.g. gpt-4o-mini); otherwise a model not in the table is unpriced.")]
CacheAwareOpt = Annotated[bool, typer.Option("--cache-aware", help="Self-Route: once LC has read a document (its prefix cached by the server), answer its next questions with LC directly while that costs fewer uncached tokens than the RAG step.")]
PartOption = Annotated[Optional[list[str]], typer.Option("--option", help="NAME=VALUE: an option the strategy or retriever declares (e.g. widen=2 for cascade; see the README's list); repeatable, over the run file's options table.")]
RunFile = Annotated[Optional[Path], typer.Option("--config", help="A run file (.yaml/.toml, see the README): its values are used, then the flags given here override them.")]


def _config_from_flags(ctx: typer.Context, run_file: Path | None, renamed: dict[str, tuple[str, Callable]] | None = None,
                       options: list[str] | None = None) -> Config:
    """The run file's configuration (or the defaults) with the values of the flags the user gave over it.

    A flag counts as given when it was on the command line or came from its environment variable (not typer's
    default). Parameters are named as the configuration's fields, except those in ``renamed``: param -> (field,
    conversion of the flag's value). ``options``: the ``--option NAME=VALUE`` flags, added to the run file's options
    table (and winning where both name one)."""
    from lcrag.config import CONFIG_FIELDS, Config

    renamed = renamed or {}
    given = {}
    for param, value in ctx.params.items():
        field, convert = renamed.get(param, (param, None))
        source = ctx.get_parameter_source(param)
        if field in CONFIG_FIELDS and source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            given[field] = convert(value) if convert else value
    base = Config.from_file(run_file) if run_file else Config()
    if options:
        given["options"] = base.options.options | option_values(options)
    return base.merged(given)


def _check(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise LcragError(f"unknown {name} {value!r}; choose one of {', '.join(allowed)}")


@app.command()
def ask(
    ctx: typer.Context,
    doc: Annotated[Path, typer.Argument(help="A document (.pdf, .docx, .html, .epub, .md, .txt), a directory of them, JSONL with a 'text' field, or a corpus index (`lcrag corpus build`): its units are the chunks, and LC reads the best units filling the window.")],
    question: Annotated[str, typer.Argument(help="The question.")],
    strategy: Strategy = "self-route",
    retriever: RetrieverOpt = "bm25",
    k: Annotated[int, typer.Option("-k", help="Chunks to retrieve.")] = 5,
    budget: Annotated[Optional[int], typer.Option("--budget", help="Retrieved-token budget instead of -k.")] = None,
    order: Annotated[Optional[str], typer.Option("--order", help=f"{' or '.join(ORDERS)} (default: the strategy's own).")] = None,
    chunking: Chunking = None,
    llm: LLM = "smollm2",
    embedder: Embedder = "minilm",
    base_url: BaseURL = None,
    context_window: ContextWindow = None,
    tokenizer: Annotated[Optional[str], typer.Option("--tokenizer", help="tokenizer.json for servers without /tokenize.")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Answer length limit.")] = 64,
    prompts: Annotated[Optional[Path], typer.Option("--prompts", help="JSON file replacing prompt templates.")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not read or write the completion cache.")] = False,
    cache_dir: CacheDir = None,
    threads: Threads = None,
    timeout: Timeout = DEFAULT_TIMEOUT,
    backoff: PoolBackoff = None,
    max_backoff: PoolMaxBackoff = None,
    server_slots: ServerSlots = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object with the answer, route, tokens, chunks and timings.")] = False,
    window: Window = 3,
    tree_navigation: TreeNavigation = "embedding",
    summary_llm: SummaryLLM = None,
    unit: Annotated[Optional[str], typer.Option("--unit", help=f"Over a corpus index: the units to retrieve, {', '.join(longrag_choices('unit'))} (default: the smallest built).")] = None,
    route_threshold: RouteThreshold = None,
    router: RouterFile = None,
    lc_share: LCShare = None,
    lc_cost_share: LCCostShare = None,
    cache_aware: CacheAwareOpt = False,
    prices: PricesFile = None,
    price_as: PriceAs = None,
    option: PartOption = None,
    config: RunFile = None,
) -> None:
    """Answer QUESTION about DOC."""
    from lcrag.cli_stream import TerminalAnswer
    from lcrag.evaluation.prices import PriceTable, calls_cost
    from lcrag.pipeline import as_document

    settings = _config_from_flags(ctx, config, {"no_cache": ("cache", lambda no_cache: not no_cache)},
                                  options=option).settings()
    table = PriceTable.load(prices)
    if price_as:
        table.require(price_as)  # an unknown model: one line now, before any model loads
    document = as_document(doc, ctx.obj)
    live = TerminalAnswer(sys.stdout) if sys.stdout.isatty() and not as_json else None
    answer = _answer(settings, document, question, live)
    cost = calls_cost(answer.calls, table, price_as)
    if as_json:
        print(json.dumps({**answer.to_dict(), "cost": {"currency": "USD", "total": cost, "priced_as": price_as}},
                         ensure_ascii=False))
        return
    if live is not None:
        live.finish(answer.text)
    else:
        stdout.print(answer.text, markup=False, highlight=False)
    _print_provenance(answer, cost, price_as)


def _answer(settings, document, question: str, live) -> Answer:
    """The answer, shown as the reader writes it on a terminal (``live``), else behind a spinner."""
    from lcrag.pipeline import Pipeline
    from lcrag.readers import streaming

    with progress_factory() as progress:
        pipeline = Pipeline(settings, progress=progress)
        try:
            if live is None:
                with spinner(f"answering with {settings.strategy}…"):
                    return pipeline.ask(document, question)
            with streaming.listening(live.listener):
                return pipeline.ask(document, question)
        finally:
            pipeline.close()


def _print_provenance(answer: Answer, cost: float | None, price_as: str | None) -> None:
    """The answer's sources on stdout, and its route, tokens, time and cost on stderr."""
    if answer.sources:
        from lcrag.provenance import format_sources

        stdout.print(f"Sources: {format_sources(answer.sources)}", markup=False, highlight=False)
    cached = " (from cache)" if answer.calls and all(c.from_cache for c in answer.calls) else ""
    stderr.print(
        f"[dim]{answer.strategy} → {answer.route} · prompt {answer.prompt_tokens} + completion "
        f"{answer.completion_tokens} tokens · {answer.seconds:.2f}s{cached}"
        + (f" · {answer.truncated_tokens} tokens cut from the middle" if answer.truncated_tokens else "")
        + (f" · P(decline) {answer.decline_probability:.3f}" if answer.decline_probability is not None else "")
        + (f" · ${cost:.6f}" + (f" as {price_as}" if price_as else "") if cost is not None else "")
        + (_index_cost_line(answer.index_cost) if answer.index_cost else "")
        + "[/dim]"
    )


def _index_cost_line(cost: dict) -> str:
    state = "built now" if cost["built_now"] else "built before"
    return (f"\n{cost['retriever']} index ({state}, one-off): {cost['calls']} summary calls, "
            f"{cost['prompt_tokens']} prompt + {cost['completion_tokens']} completion tokens")


INDEX_CHUNKING = "words:300"  # lcrag index's chunking when neither --chunking nor the run file gives one


@app.command()
def index(
    ctx: typer.Context,
    doc: Annotated[Path, typer.Argument(help="The document to index.")],
    chunking: Annotated[str, typer.Option("--chunking", help=f"{CHUNKING_HELP}.")] = INDEX_CHUNKING,
    retriever: Annotated[str, typer.Option("--retriever", "-r", help=f"{', '.join(RETRIEVERS.names())} or all (bm25 and dense).")] = "all",
    llm: LLM = "smollm2",
    embedder: Embedder = "minilm",
    base_url: BaseURL = None,
    cache_dir: CacheDir = None,
    config: Annotated[Optional[Path], typer.Option("--config", help="A run file (.yaml/.toml, see the README): its reader, embedder, chunking and cache sections are used, then the flags given here override them.")] = None,
) -> None:
    """Chunk DOC and build its BM25 index and embeddings on disk (later questions reuse them)."""
    kinds = ("bm25", "dense") if retriever in ("all", "hybrid") else (retriever,)
    RETRIEVERS.check(kinds[0])
    # --retriever is not the retrieval section's retriever (it also takes "all"): it is left out of the run config.
    run = _config_from_flags(ctx, config, {"retriever": ("", None)})
    chunking = run.chunking.chunking or INDEX_CHUNKING
    from lcrag.config import Config
    from lcrag.types import Answer
    from lcrag.pipeline import Pipeline, as_document

    settings = Config(reader=run.reader, embedder=run.embedder, cache=run.cache).merged(
        {"chunking": chunking, "cache": False}).settings()  # indexing asks the reader nothing to cache
    document = as_document(doc, ctx.obj)
    with progress_factory() as progress:
        pipeline = Pipeline(settings, progress=progress)
        try:
            started = time.perf_counter()
            idx = pipeline.index(document, chunking)
            chunked = time.perf_counter()
            for kind in kinds:
                idx.retriever(kind)
            done = time.perf_counter()
        finally:
            pipeline.close()
    stdout.print(
        f"{len(idx.chunks)} chunks ({chunking}) of {document.source or document.id} · "
        f"chunking {chunked - started:.2f}s · {', '.join(kinds)} {done - chunked:.2f}s"
        + (f" · {idx.embedded_chunks / (done - chunked):.1f} chunks/s embedded" if idx.embedded_chunks else " · loaded from cache")
        + f"\n{idx.dir}",
        highlight=False,
    )


@app.command()
def demo(
    words: Annotated[int, typer.Option("--words", help="Length of the synthetic document.")] = 2000,
    llm: LLM = "smollm2",
    retriever: RetrieverOpt = "bm25",
    seed: Annotated[int, typer.Option("--seed")] = 7,
    cache_dir: CacheDir = None,
) -> None:
    """Ask a synthetic document's planted questions with every strategy and print a table."""
    from lcrag.evaluation import contains_answer
    from lcrag.pipeline import Pipeline, Settings
    from lcrag.synthetic import needle_document

    at_least("words", words, 1)
    document, facts = needle_document(words, seed=seed)
    workdir = cache_dir or Path(tempfile.mkdtemp(prefix="lcrag-demo-"))
    # Small chunks keep RAG prompts short for a small CPU reader; the completion cache is off so timings are real.
    settings = Settings(llm=llm, retriever=retriever, k=3, chunking="words:100", cache=False, cache_dir=workdir, max_tokens=32)
    strategies = document_strategies()  # every registered strategy that answers over one document, in order
    table = Table(title=f"lcrag demo · {len(document.text.split())}-word synthetic document · reader {llm}")
    table.add_column("question", max_width=36)
    table.add_column("strategy", no_wrap=True)
    table.add_column("route", no_wrap=True)
    table.add_column("answer", max_width=44, overflow="ellipsis", no_wrap=True)
    for col in ("correct", "prompt tokens", "seconds"):
        table.add_column(col, justify="right", no_wrap=True)
    totals: dict[str, list[int]] = {s: [0, 0] for s in strategies}
    with progress_factory() as progress:
        pipeline = Pipeline(settings, progress=progress)
        try:
            with spinner("loading the reader…"):
                pipeline.reader  # noqa: B018 - load before the timed questions
            tick = progress("asking", len(facts) * len(strategies))
            for fact in facts:
                for name in strategies:
                    answer = pipeline.ask(document, fact.question, strategy=name)
                    ok = contains_answer(answer.text, [fact.answer])
                    totals[name][0] += ok
                    totals[name][1] += answer.prompt_tokens
                    table.add_row(
                        fact.question if name == strategies[0] else "", name, answer.route, answer.text.replace("\n", " "),
                        "yes" if ok else "no", str(answer.prompt_tokens), f"{answer.seconds:.1f}",
                    )
                    tick(1)
                table.add_section()
        finally:
            pipeline.close()
    stdout.print(table)
    lc_tokens = totals["lc"][1] or 1
    summary = Table(title="totals")
    for col in ("strategy", "correct", "prompt tokens", "% of LC tokens"):
        summary.add_column(col)
    for name in strategies:
        correct, tokens = totals[name]
        summary.add_row(name, f"{correct}/{len(facts)}", str(tokens), f"{100 * tokens / lc_tokens:.0f}%")
    stdout.print(summary)


def _csv(value: str, name: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise LcragError(f"--{name} is empty")
    return items


def _ints(value: str | None, name: str) -> list[int]:
    if not value:
        return []
    try:
        return [int(v) for v in _csv(value, name)]
    except ValueError:
        raise LcragError(f"--{name} takes whole numbers separated by commas") from None


def _eval_config_from_flags(ctx: typer.Context, run_file: Path | None, options: list[str] | None) -> Config:
    """``lcrag eval``'s configuration: the run file's, then the flags given (comma-separated lists become tuples).
    Strategies, retrievers and units are checked against the registries there, as a run file's are."""
    def listed(name: str) -> Callable:
        return lambda value: tuple(_csv(value, name))

    def numbers(name: str) -> Callable:
        return lambda value: tuple(_ints(value, name))

    run = _config_from_flags(ctx, run_file, {
        "strategies": ("strategies", listed("strategies")), "retriever": ("retrievers", listed("retriever")),
        "k": ("ks", numbers("k")), "budget": ("budgets", numbers("budget")), "fmt": ("format", None),
        "unit": ("units", listed("unit")),
    }, options=options)
    for flag, value in (("--dataset", run.eval.dataset), ("--out", run.eval.out)):
        if value is None:
            raise OptionError(f"{flag} is required (or {flag[2:]} in the eval section of --config)")
    return run


@app.command("eval")
def evaluate(
    ctx: typer.Context,
    dataset: Annotated[Optional[Path], typer.Option("--dataset", help="A dataset file or directory (its format: see --format); required, here or in --config.")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="Run directory: rows.jsonl, manifest.json, cache/; re-run to resume; required, here or in --config.")] = None,
    strategies: Annotated[str, typer.Option("--strategies", help=f"Comma-separated strategies: {', '.join(STRATEGIES.names())}.")] = "lc,rag,self-route",
    retriever: Annotated[str, typer.Option("--retriever", help=f"Comma-separated retrievers: {', '.join(RETRIEVERS.names())} (corpus strategies: the corpus index's scorers, {', '.join(longrag_choices('scorer'))}).")] = "bm25",
    k: Annotated[str, typer.Option("-k", help="Comma-separated k values.")] = "5",
    budget: Annotated[Optional[str], typer.Option("--budget", help="Comma-separated retrieved-token budgets (added to the k values).")] = None,
    fmt: Annotated[Optional[str], typer.Option("--format", help=f"Dataset format, one of {', '.join(DATASET_FORMATS.names())} (default: from the path).")] = None,
    chunking: Chunking = None,
    llm: LLM = "smollm2",
    embedder: Embedder = "minilm",
    base_url: BaseURL = None,
    context_window: ContextWindow = None,
    tokenizer: Annotated[Optional[str], typer.Option("--tokenizer", help="tokenizer.json for servers without /tokenize (replay: the tokenizer standing in for the recorded reader's).")] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", help="First N questions of each dataset file.")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Parallel requests (HTTP readers).")] = 1,
    filter_closed_book: Annotated[bool, typer.Option("--filter-closed-book", help="Mark questions answered without context.")] = False,
    drop_closed_book: Annotated[bool, typer.Option("--drop-closed-book", help="...and leave them out.")] = False,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Skip and count malformed records instead of stopping.")] = False,
    threads: Threads = None,
    timeout: Timeout = DEFAULT_TIMEOUT,
    backoff: PoolBackoff = None,
    max_backoff: PoolMaxBackoff = None,
    server_slots: ServerSlots = None,
    corpus: Annotated[Optional[Path], typer.Option("--corpus", help="A corpus index (lcrag corpus build) for corpus-backed datasets and --strategies longrag.")] = None,
    unit: Annotated[str, typer.Option("--unit", help=f"Corpus strategies (longrag): comma-separated units, of {', '.join(longrag_choices('unit'))}.")] = "grouped",
    window: Window = 3,
    tree_navigation: TreeNavigation = "embedding",
    summary_llm: SummaryLLM = None,
    route_threshold: RouteThreshold = None,
    router: RouterFile = None,
    lc_share: LCShare = None,
    lc_cost_share: LCCostShare = None,
    cache_aware: CacheAwareOpt = False,
    option: PartOption = None,
    config: RunFile = None,
    judge: Annotated[Optional[str], typer.Option("--judge", help="Then judge the answers with LaRA's LLM judge on this OpenAI-compatible model (LCRAG_BASE_URL/OPENAI_BASE_URL and LCRAG_API_KEY/OPENAI_API_KEY, or openai:MODEL@BASE_URL; verdicts cached): each configuration's quality as a prediction-powered estimate with its 95% interval, next to the metric alone, in the report and printed.")] = None,
    judge_sample: Annotated[Optional[int], typer.Option("--judge-sample", help="With --judge: judge N sampled answers per configuration (default: every answer).")] = None,
    judge_seed: Annotated[int, typer.Option("--judge-seed", help="The seed of the --judge-sample draw.")] = 0,
) -> None:
    """Run a strategies × retrievers × k/budget matrix over a dataset; resumable."""
    from lcrag.evaluation.datasets import load_dataset
    from lcrag.evaluation.judge_sample import judge_run, open_judge
    from lcrag.evaluation.runner import EvalRunner, expand_configs

    judged = open_judge(judge, judge_sample)  # bad judge flags stop here, before any answer
    run = _eval_config_from_flags(ctx, config, option)
    wanted = run.eval
    names, retrievers = list(wanted.strategies), list(wanted.retrievers)
    settings = run.settings()
    loaded = load_dataset(wanted.dataset, wanted.format, skip_bad=wanted.skip_bad, limit=wanted.limit,
                          max_bytes=(ctx.obj or ParseLimits()).file_bytes)
    if loaded.skipped:
        stderr.print(f"[yellow]skipped {loaded.skipped} malformed record(s); first: {loaded.errors[0]}[/yellow]")
    configs = expand_configs(names, retrievers, list(wanted.ks), list(wanted.budgets), list(wanted.units))
    runner = EvalRunner(loaded.items, configs, wanted.out, settings, dataset_path=wanted.dataset,
                        concurrency=wanted.concurrency, filter_closed_book=wanted.filter_closed_book,
                        drop_closed_book=wanted.drop_closed_book, corpus=wanted.corpus, eval_config=wanted)
    rows, tokens = _run_with_progress(runner)
    if runner.unanswered:
        stderr.print(f"[yellow]skipped {len(runner.unanswered)} (question, strategy) pair(s) the reader holds no "
                     f"answer for; first: {runner.unanswered[0]}[/yellow]", highlight=False)
    stdout.print(f"{len(rows)} rows in {wanted.out / 'rows.jsonl'} · this session: {tokens['prompt']} prompt + "
                 f"{tokens['completion']} completion tokens · report: lcrag report {wanted.out}", highlight=False)
    if judged is not None:
        stdout.print("\n" + judge_run(wanted.out, judged, judge_sample, judge_seed), markup=False, highlight=False)


def _run_with_progress(runner) -> tuple[list[dict], dict[str, int]]:
    """The runner's rows, with a progress bar that counts this session's tokens as rows arrive."""
    tokens = {"prompt": 0, "completion": 0}
    with progress_factory() as progress:
        bar = None

        def on_row(done: int, total: int, row: dict) -> None:
            nonlocal bar
            tokens["prompt"] += row["prompt_tokens"]
            tokens["completion"] += row["completion_tokens"]
            if bar is None:
                bar = progress("evaluating", total)
                bar(done - 1)
            bar(1, f"evaluating · {tokens['prompt']:,} prompt + {tokens['completion']:,} completion tokens")

        return runner.run(on_row), tokens


@app.command()
def passkey(
    out: Annotated[Path, typer.Argument(help="Directory for the generated JSONL files (one per variant); `lcrag eval --dataset OUT` reads it.")],
    lengths: Annotated[str, typer.Option("--lengths", help="Comma-separated haystack lengths in reader tokens (up to 128K and beyond).")] = "2048,8192,32768,131072",
    depths: Annotated[str, typer.Option("--depths", help="Comma-separated needle depths, 0 (start) to 1 (end).")] = "0.1,0.5,0.9",
    variants: Annotated[str, typer.Option("--variants", help="passkey (∞Bench), special-token, two-passkeys (Self-Route §5.4).")] = "passkey,special-token,two-passkeys",
    tokenizer: Annotated[str, typer.Option("--tokenizer", help="Whose tokens measure the length: a reader spec (smollm2, PATH.gguf) or tokenizer.json.")] = "smollm2",
    seed: Annotated[int, typer.Option("--seed", help="Seed for the keys.")] = 0,
) -> None:
    """Generate ∞Bench-style PassKey data and the Self-Route paper's two variants, ready for `lcrag eval`."""
    from contextlib import ExitStack

    from lcrag.cli_corpus import _tokenizer
    from lcrag.synthetic import PASSKEY_QUESTIONS, passkey_records

    names = _csv(variants, "variants")
    for name in names:
        _check("variant", name, tuple(PASSKEY_QUESTIONS))
    try:
        depth_values = [float(d) for d in _csv(depths, "depths")]
    except ValueError:
        raise LcragError("--depths takes numbers between 0 and 1 separated by commas") from None
    if any(not 0 <= d <= 1 for d in depth_values):
        raise LcragError("--depths takes numbers between 0 and 1")
    length_values = _ints(lengths, "lengths")
    if not length_values or min(length_values) < 64:
        raise LcragError("--lengths must be at least 64 tokens each")
    ensure_directory(out, "OUT (a directory for the generated JSONL files)", LcragError)
    with ExitStack() as stack, spinner("generating PassKey haystacks…"):
        tok = _tokenizer(tokenizer, stack)
        for name in names:
            path = out / f"synthetic_{name.replace('-', '_')}.jsonl"
            tmp = path.with_suffix(".tmp")
            with tmp.open("w", encoding="utf-8") as f:
                for record in passkey_records(tok, length_values, depth_values, [name], seed):
                    f.write(json.dumps(record) + "\n")
            tmp.replace(path)
            stdout.print(f"{path}: {len(length_values) * len(depth_values)} questions", highlight=False)


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="A directory written by lcrag eval.")],
           prices: PricesFile = None, price_as: PriceAs = None) -> None:
    """Write report.md, CSV tables and PNG plots for a run directory (with money next to tokens when priced)."""
    from lcrag.evaluation.prices import PriceTable, calls_cost
    from lcrag.evaluation.report import write_report

    table = PriceTable.load(prices)
    if price_as:
        table.require(price_as)
    priced = price_as or prices
    path = write_report(run_dir, (lambda row: calls_cost(row.get("calls") or [], table, price_as)) if priced else None)
    stdout.print(path.read_text(encoding="utf-8"), markup=False, highlight=False)
    stderr.print(f"written to {path.parent}")


@app.callback()
def _global_options(
    ctx: typer.Context,
    max_file_mb: Annotated[Optional[float], typer.Option(
        "--max-file-mb", envvar="LCRAG_MAX_FILE_MB",
        help="Largest input file read whole (documents, datasets), in MB; default 512. Corpora are streamed and "
             "have no limit.")] = None,
) -> None:
    """Answer questions over long documents: LC, RAG, OP-RAG, Self-Route."""
    if max_file_mb is not None and not max_file_mb > 0:
        raise SettingError("max_file_mb", f"must be > 0, got {max_file_mb:g}")
    # Handed to the commands in their context object (click passes a parent's obj to its subcommands), which give
    # it to the readers of files: the ParseLimits a document is loaded with, a dataset's max_bytes.
    ctx.obj = ParseLimits(file_mb=max_file_mb) if max_file_mb is not None else ParseLimits()


def _usage_error_line(exc: Exception) -> str | None:
    """The one line for a command-line usage error (bad option value, unknown command), else None.

    Duck-typed: typer ships its own copy of click's exceptions, and other versions use click's own."""
    if getattr(exc, "exit_code", None) != 2 or not callable(getattr(exc, "format_message", None)):
        return None
    param = getattr(exc, "param", None)
    hint = getattr(param, "opts", None) or ([getattr(param, "name", "")] if param is not None else [])
    message = " ".join(exc.format_message().split())
    if hint and hint[0] and hint[0] not in message:
        message = f"{hint[0]}: {message}"
    return f"lcrag: error: {message} (see lcrag --help)"


def _run() -> int:
    # Not typer's standalone mode: its usage errors are a framed box of several lines; ours are one.
    try:
        code = typer.main.get_command(app).main(prog_name="lcrag", standalone_mode=False)
    except Exception as exc:  # noqa: BLE001 - only usage errors are handled here; anything else is re-raised
        if type(exc).__name__ == "NoArgsIsHelpError":  # `lcrag` alone, or a group without its command
            ctx = getattr(exc, "ctx", None)
            print(ctx.get_help() if ctx else str(exc), file=sys.stderr)
            return 2
        if type(exc).__name__ == "Abort":
            raise KeyboardInterrupt from None
        line = _usage_error_line(exc)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 2
    return code if isinstance(code, int) else 0


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="lcrag: %(levelname)s: %(message)s")
    try:
        sys.exit(_run())
    except LcragError as exc:
        print(f"lcrag: error: {cli_message(exc)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("lcrag: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
