"""``lcrag demo``: every strategy on a synthetic document's planted questions, in one table."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer

from lcrag.cli.flags import LLM, CacheDir, RetrieverOpt, stdout
from lcrag.core.options import at_least
from lcrag.core.progress import progress_factory, spinner

def demo(
    words: Annotated[int, typer.Option("--words", help="Length of the synthetic document.")] = 2000,
    llm: LLM = "smollm2",
    retriever: RetrieverOpt = "bm25",
    seed: Annotated[int, typer.Option("--seed")] = 7,
    cache_dir: CacheDir = None,
) -> None:
    """Ask a synthetic document's planted questions with every strategy and print a table."""
    from lcrag.evaluation import contains_answer
    from lcrag.pipeline.pipeline import Pipeline, Settings
    from lcrag.strategies import document_strategies
    from lcrag.documents.synthetic import needle_document

    at_least("words", words, 1)
    document, facts = needle_document(words, seed=seed)
    workdir = cache_dir or Path(tempfile.mkdtemp(prefix="lcrag-demo-"))
    # Small chunks keep RAG prompts short for a small CPU reader; the completion cache is off so timings are real.
    settings = Settings(llm=llm, retriever=retriever, k=3, chunking="words:100", cache=False, cache_dir=workdir, max_tokens=32)
    strategies = document_strategies()  # every registered strategy that answers over one document, in order
    table = _answers_table(f"lcrag demo · {len(document.text.split())}-word synthetic document · reader {llm}")
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
    stdout().print(table)
    stdout().print(_totals_table(strategies, totals, len(facts)))


def _answers_table(title: str):
    from rich.table import Table

    table = Table(title=title)
    table.add_column("question", max_width=36)
    table.add_column("strategy", no_wrap=True)
    table.add_column("route", no_wrap=True)
    table.add_column("answer", max_width=44, overflow="ellipsis", no_wrap=True)
    for col in ("correct", "prompt tokens", "seconds"):
        table.add_column(col, justify="right", no_wrap=True)
    return table


def _totals_table(strategies: list[str], totals: dict[str, list[int]], questions: int):
    """Each strategy's correct answers and prompt tokens, and its tokens as a share of LC's."""
    from rich.table import Table

    lc_tokens = totals["lc"][1] or 1
    summary = Table(title="totals")
    for col in ("strategy", "correct", "prompt tokens", "% of LC tokens"):
        summary.add_column(col)
    for name in strategies:
        correct, tokens = totals[name]
        summary.add_row(name, f"{correct}/{questions}", str(tokens), f"{100 * tokens / lc_tokens:.0f}%")
    return summary
