"""``lcrag eval`` (a strategies × retrievers × k matrix over a dataset, resumable), ``lcrag report`` (its report)
and ``lcrag passkey`` (synthetic PassKey datasets for it)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from lcrag.cli.flags import (PartOption, PriceAs, PricesFile, RunFile, check_choice, config_from_flags,
                             listed, stdout, tokenizer_for, whole_numbers)
from lcrag.documents.limits import ParseLimits
from lcrag.core.errors import LcragError, OptionError
from lcrag.cli.question_flags import question_flags
from lcrag.core.options import longrag_choices
from lcrag.core.progress import progress_factory, spinner, stderr
from lcrag.core.registry import DATASET_FORMATS, RETRIEVERS, STRATEGIES
from lcrag.core.files import ensure_directory

if TYPE_CHECKING:
    from lcrag.pipeline.config import Config


def _eval_config_from_flags(ctx: typer.Context, run_file: Path | None, options: list[str] | None) -> Config:
    """``lcrag eval``'s configuration: the run file's, then the flags given (comma-separated lists become tuples).
    Strategies, retrievers and units are checked against the registries there, as a run file's are."""
    def items(name: str) -> Callable:
        return lambda value: tuple(listed(value, name))

    def numbers(name: str) -> Callable:
        return lambda value: tuple(whole_numbers(value, name))

    run = config_from_flags(ctx, run_file, {
        "strategies": ("strategies", items("strategies")), "retriever": ("retrievers", items("retriever")),
        "k": ("ks", numbers("k")), "budget": ("budgets", numbers("budget")), "fmt": ("format", None),
        "unit": ("units", items("unit")),
    }, options=options)
    for flag, value in (("--dataset", run.eval.dataset), ("--out", run.eval.out)):
        if value is None:
            raise OptionError(f"{flag} is required (or {flag[2:]} in the eval section of --config)")
    return run


@question_flags("eval", without=("strategy",))  # --strategies: the matrix's
def evaluate(
    ctx: typer.Context,
    dataset: Annotated[Optional[Path], typer.Option("--dataset", help="A dataset file or directory (its format: see --format); required, here or in --config.")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="Run directory: rows.jsonl, manifest.json, cache/; re-run to resume; required, here or in --config.")] = None,
    strategies: Annotated[str, typer.Option("--strategies", help=f"Comma-separated strategies: {', '.join(STRATEGIES.names())}.")] = "lc,rag,self-route",
    retriever: Annotated[str, typer.Option("--retriever", help=f"Comma-separated retrievers: {', '.join(RETRIEVERS.names())} (corpus strategies: the corpus index's scorers, {', '.join(longrag_choices('scorer'))}).")] = "bm25",
    k: Annotated[str, typer.Option("-k", help="Comma-separated k values.")] = "5",
    budget: Annotated[Optional[str], typer.Option("--budget", help="Comma-separated retrieved-token budgets (added to the k values).")] = None,
    fmt: Annotated[Optional[str], typer.Option("--format", help=f"Dataset format, one of {', '.join(DATASET_FORMATS.names())} (default: from the path).")] = None,
    tokenizer: Annotated[Optional[str], typer.Option("--tokenizer", help="tokenizer.json for servers without /tokenize (replay: the tokenizer standing in for the recorded reader's).")] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", help="First N questions of each dataset file.")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Parallel requests (HTTP readers).")] = 1,
    filter_closed_book: Annotated[bool, typer.Option("--filter-closed-book", help="Mark questions answered without context.")] = False,
    drop_closed_book: Annotated[bool, typer.Option("--drop-closed-book", help="...and leave them out.")] = False,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Skip and count malformed records instead of stopping.")] = False,
    corpus: Annotated[Optional[Path], typer.Option("--corpus", help="A corpus index (lcrag corpus build) for corpus-backed datasets and --strategies longrag.")] = None,
    unit: Annotated[str, typer.Option("--unit", help=f"Corpus strategies (longrag): comma-separated units, of {', '.join(longrag_choices('unit'))}.")] = "grouped",
    option: PartOption = None,
    config: RunFile = None,
    judge: Annotated[Optional[str], typer.Option("--judge", help="Then judge the answers with LaRA's LLM judge on this OpenAI-compatible model (LCRAG_BASE_URL/OPENAI_BASE_URL and LCRAG_API_KEY/OPENAI_API_KEY, or openai:MODEL@BASE_URL; verdicts cached): each configuration's quality as a prediction-powered estimate with its 95% interval, next to the metric alone, in the report and printed.")] = None,
    judge_sample: Annotated[Optional[int], typer.Option("--judge-sample", help="With --judge: judge N sampled answers per configuration (default: every answer).")] = None,
    judge_seed: Annotated[int, typer.Option("--judge-seed", help="The seed of the --judge-sample draw.")] = 0,
) -> None:
    """Run a strategies × retrievers × k/budget matrix over a dataset; resumable."""
    from lcrag.evaluation.judge_sample import judge_run, open_judge
    from lcrag.evaluation.runner import EvalRunner, expand_configs

    judged = open_judge(judge, judge_sample)  # bad judge flags stop here, before any answer
    run = _eval_config_from_flags(ctx, config, option)
    wanted = run.eval
    names, retrievers = list(wanted.strategies), list(wanted.retrievers)
    settings = run.settings()
    loaded = _load_dataset(wanted, ctx.obj or ParseLimits())
    configs = expand_configs(names, retrievers, list(wanted.ks), list(wanted.budgets), list(wanted.units))
    runner = EvalRunner(loaded.items, configs, wanted.out, settings, dataset_path=wanted.dataset,
                        concurrency=wanted.concurrency, filter_closed_book=wanted.filter_closed_book,
                        drop_closed_book=wanted.drop_closed_book, corpus=wanted.corpus, eval_config=wanted)
    rows, tokens = _run_with_progress(runner)
    _report_run(runner, rows, tokens, wanted.out)
    if judged is not None:
        stdout().print("\n" + judge_run(wanted.out, judged, judge_sample, judge_seed), markup=False, highlight=False)


def _load_dataset(wanted, limits: ParseLimits):
    """The eval section's dataset, read within the files' size limit; malformed records skipped are counted."""
    from lcrag.evaluation.datasets import load_dataset

    loaded = load_dataset(wanted.dataset, wanted.format, skip_bad=wanted.skip_bad, limit=wanted.limit,
                          max_bytes=limits.file_bytes)
    if loaded.skipped:
        stderr.print(f"[yellow]skipped {loaded.skipped} malformed record(s); first: {loaded.errors[0]}[/yellow]")
    return loaded


def _report_run(runner, rows: list[dict], tokens: dict[str, int], out: Path) -> None:
    """What the run wrote and this session's tokens, after the pairs skipped for want of a recorded answer."""
    if runner.unanswered:
        stderr.print(f"[yellow]skipped {len(runner.unanswered)} (question, strategy) pair(s) the reader holds no "
                     f"answer for; first: {runner.unanswered[0]}[/yellow]", highlight=False)
    stdout().print(f"{len(rows)} rows in {out / 'rows.jsonl'} · this session: {tokens['prompt']} prompt + "
                   f"{tokens['completion']} completion tokens · report: lcrag report {out}", highlight=False)


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

    from lcrag.documents.synthetic import PASSKEY_QUESTIONS, passkey_records

    names = listed(variants, "variants")
    for name in names:
        check_choice("variant", name, tuple(PASSKEY_QUESTIONS))
    try:
        depth_values = [float(d) for d in listed(depths, "depths")]
    except ValueError:
        raise LcragError("--depths takes numbers between 0 and 1 separated by commas") from None
    if any(not 0 <= d <= 1 for d in depth_values):
        raise LcragError("--depths takes numbers between 0 and 1")
    length_values = whole_numbers(lengths, "lengths")
    if not length_values or min(length_values) < 64:
        raise LcragError("--lengths must be at least 64 tokens each")
    ensure_directory(out, "OUT (a directory for the generated JSONL files)", LcragError)
    with ExitStack() as stack, spinner("generating PassKey haystacks…"):
        tok = tokenizer_for(tokenizer, stack)
        for name in names:
            path = out / f"synthetic_{name.replace('-', '_')}.jsonl"
            tmp = path.with_suffix(".tmp")
            with tmp.open("w", encoding="utf-8") as f:
                for record in passkey_records(tok, length_values, depth_values, [name], seed):
                    f.write(json.dumps(record) + "\n")
            tmp.replace(path)
            stdout().print(f"{path}: {len(length_values) * len(depth_values)} questions", highlight=False)


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
    stdout().print(path.read_text(encoding="utf-8"), markup=False, highlight=False)
    stderr.print(f"written to {path.parent}")
