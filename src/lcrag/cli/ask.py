"""``lcrag ask``: answer a question about a document, a folder of them or a corpus index, with its sources, route,
tokens and cost."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from lcrag.cli.flags import PartOption, PriceAs, PricesFile, RunFile, config_from_flags
from lcrag.cli.question_flags import question_flags
from lcrag.core.progress import progress_factory, spinner

if TYPE_CHECKING:
    from lcrag.core.types import Answer


@question_flags("ask")  # -s, -r, -k, --budget and every other declared setting (lcrag.core.question_settings)
def ask(
    ctx: typer.Context,
    doc: Annotated[Path, typer.Argument(help="A document (.pdf, .docx, .html, .epub, .md, .txt), a directory of them, JSONL with a 'text' field, or a corpus index (`lcrag corpus build`): its units are the chunks, and LC reads the best units filling the window.")],
    question: Annotated[str, typer.Argument(help="The question.")],
    tokenizer: Annotated[Optional[str], typer.Option("--tokenizer", help="tokenizer.json for servers without /tokenize.")] = None,
    prompts: Annotated[Optional[Path], typer.Option("--prompts", help="JSON file replacing prompt templates.")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not read or write the completion cache.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object with the answer, route, tokens, chunks and timings.")] = False,
    prices: PricesFile = None,
    price_as: PriceAs = None,
    option: PartOption = None,
    config: RunFile = None,
) -> None:
    """Answer QUESTION about DOC."""
    from lcrag.cli.stream import TerminalAnswer, show_answer
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
    show_answer(answer, calls_cost(answer.calls, table, price_as), price_as, as_json, live)


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
