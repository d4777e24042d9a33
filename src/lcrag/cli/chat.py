"""``lcrag chat``: a conversation about a document, a folder of them or a corpus index. Each line read is a question,
answered with the conversation so far (a follow-up such as "and when?" is first made to stand alone: ``--condense``),
over one pipeline, so the index is made once and the reader stays loaded."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TextIO

import typer

from lcrag.cli.flags import PartOption, PriceAs, PricesFile, RunFile, config_from_flags
from lcrag.cli.question_flags import question_flags
from lcrag.core.errors import LcragError
from lcrag.core.progress import stderr

if TYPE_CHECKING:
    from lcrag.core.types import Answer
    from lcrag.pipeline.pipeline import Pipeline

PROMPT = "> "


@question_flags("chat")  # -s, -r, -k, --condense, --history-turns and every other declared setting
def chat(
    ctx: typer.Context,
    doc: Annotated[Path, typer.Argument(help="A document, a directory of them, JSONL with a 'text' field, or a corpus index, as `lcrag ask` takes it.")],
    prices: PricesFile = None,
    price_as: PriceAs = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per answer (a line each), as `lcrag ask --json` does.")] = False,
    option: PartOption = None,
    config: RunFile = None,
) -> None:
    """Talk about DOC: each line is a question, answered with the conversation so far.

    Type the questions (end with Ctrl-D) or pipe them in. A question that fails is said in one line and the
    conversation goes on; the exit status is then 1."""
    from lcrag.core.progress import progress_factory
    from lcrag.evaluation.prices import PriceTable
    from lcrag.pipeline.pipeline import Pipeline, as_source

    settings = config_from_flags(ctx, config, options=option).settings()
    table = PriceTable.load(prices)
    if price_as:
        table.require(price_as)  # an unknown model: one line now, before any model loads
    document = as_source(doc, ctx.obj)
    with progress_factory() as progress:
        pipeline = Pipeline(settings, progress=progress)
        try:
            failed = _converse(pipeline, document, _questions(sys.stdin), table, price_as, as_json)
        finally:
            pipeline.close()
    if failed:
        raise typer.Exit(1)


def _questions(lines: TextIO) -> Iterator[str]:
    """The questions read from ``lines``, blank lines skipped; a prompt before each when a person types them."""
    interactive = lines.isatty()
    while True:
        if interactive:
            stderr.print(PROMPT, end="")
        line = lines.readline()
        if not line:
            return
        if line.strip():
            yield line.strip()


def _converse(pipeline: Pipeline, document, questions: Iterator[str], table, price_as: str | None,
              as_json: bool) -> int:
    """Answer each question with the conversation so far (its latest ``history_turns`` messages: no more are read,
    so no more are kept); how many failed."""
    from lcrag.cli.stream import TerminalAnswer, show_answer
    from lcrag.evaluation.prices import calls_cost

    history: list[dict[str, str]] = []
    failed = 0
    for question in questions:
        live = TerminalAnswer(sys.stdout) if sys.stdout.isatty() and not as_json else None
        try:
            answer = _answer(pipeline, document, question, history, live)
        except LcragError as exc:  # one question's error (too long, a reader gone): said, and the next one asked
            stderr.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
            failed += 1
            continue
        if answer.conversation and answer.conversation["method"] == "condensed" and not as_json:
            stderr.print(f"[dim]asked as: {answer.conversation['question']}[/dim]", markup=True, highlight=False)
        show_answer(answer, calls_cost(answer.calls, table, price_as), price_as, as_json, live)
        kept = pipeline.settings.history_turns
        history = [*history, {"role": "user", "content": question},
                   {"role": "assistant", "content": answer.text}][-kept:] if kept else []
    return failed


def _answer(pipeline: Pipeline, document, question: str, history: list[dict[str, str]], live) -> Answer:
    from lcrag.readers import streaming

    if live is None:
        return pipeline.ask(document, question, history=history)
    with streaming.listening(live.listener):
        return pipeline.ask(document, question, history=history)
