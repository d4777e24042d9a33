"""``lcrag ask``: answer a question about a document, a folder of them or a corpus index, with its sources, route,
tokens and cost."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from lcrag.cli.flags import (LLM, BaseUrl, CacheDir, ContextWindow, Embedder, PartOption, PoolBackoff, PoolMaxBackoff,
                             PriceAs, PricesFile, RouterFile, RunFile, ServerSlots, SummaryLLM, Threads, Timeout,
                             config_from_flags, stdout)
from lcrag.cli.question_flags import question_flags
from lcrag.core.http_client import DEFAULT_TIMEOUT
from lcrag.core.progress import progress_factory, spinner, stderr

if TYPE_CHECKING:
    from lcrag.core.types import Answer


@question_flags()  # -s, -r, -k, --budget and every other declared setting (lcrag.core.question_settings)
def ask(
    ctx: typer.Context,
    doc: Annotated[Path, typer.Argument(help="A document (.pdf, .docx, .html, .epub, .md, .txt), a directory of them, JSONL with a 'text' field, or a corpus index (`lcrag corpus build`): its units are the chunks, and LC reads the best units filling the window.")],
    question: Annotated[str, typer.Argument(help="The question.")],
    llm: LLM = "smollm2",
    embedder: Embedder = "minilm",
    base_url: BaseUrl = None,
    context_window: ContextWindow = None,
    tokenizer: Annotated[Optional[str], typer.Option("--tokenizer", help="tokenizer.json for servers without /tokenize.")] = None,
    prompts: Annotated[Optional[Path], typer.Option("--prompts", help="JSON file replacing prompt templates.")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not read or write the completion cache.")] = False,
    cache_dir: CacheDir = None,
    threads: Threads = None,
    timeout: Timeout = DEFAULT_TIMEOUT,
    backoff: PoolBackoff = None,
    max_backoff: PoolMaxBackoff = None,
    server_slots: ServerSlots = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object with the answer, route, tokens, chunks and timings.")] = False,
    summary_llm: SummaryLLM = None,
    router: RouterFile = None,
    prices: PricesFile = None,
    price_as: PriceAs = None,
    option: PartOption = None,
    config: RunFile = None,
) -> None:
    """Answer QUESTION about DOC."""
    from lcrag.cli.stream import TerminalAnswer
    from lcrag.evaluation.prices import PriceTable, calls_cost
    from lcrag.pipeline.pipeline import as_source

    settings = config_from_flags(ctx, config, {"no_cache": ("cache", lambda no_cache: not no_cache)},
                                 options=option).settings()
    table = PriceTable.load(prices)
    if price_as:
        table.require(price_as)  # an unknown model: one line now, before any model loads
    document = as_source(doc, ctx.obj)
    live = TerminalAnswer(sys.stdout) if sys.stdout.isatty() and not as_json else None
    answer = _answer(settings, document, question, live)
    _show(answer, calls_cost(answer.calls, table, price_as), price_as, as_json, live)


def _show(answer: Answer, cost: float | None, price_as: str | None, as_json: bool, live) -> None:
    """The answer as one JSON object, or its text (ending the live one) and then its provenance."""
    if as_json:
        print(json.dumps({**answer.to_dict(), "cost": {"currency": "USD", "total": cost, "priced_as": price_as}},
                         ensure_ascii=False))
        return
    if live is not None:
        live.finish(answer.text)
    else:
        stdout().print(answer.text, markup=False, highlight=False)
    _print_provenance(answer, cost, price_as)


def _answer(settings, document, question: str, live) -> Answer:
    """The answer, shown as the reader writes it on a terminal (``live``), else behind a spinner."""
    from lcrag.pipeline.pipeline import Pipeline
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
        from lcrag.core.provenance import format_sources

        stdout().print(f"Sources: {format_sources(answer.sources)}", markup=False, highlight=False)
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
