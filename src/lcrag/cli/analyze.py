"""`lcrag analyze`: failure reasons of Self-Route's LC-routed questions; LC-only vs RAG-only questions."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from lcrag.cli.commands import command_group
from lcrag.core.errors import LcragError
from lcrag.core.options import reader_forms
from lcrag.core.progress import stderr

analyze_app = command_group("Analyse evaluation runs: why RAG failed, which questions each side wins.")


def _md(header: list[str], body: list[list]) -> str:
    from lcrag.evaluation.report import _md_table

    return _md_table(header, body) if body else "(no questions)"


def _manifest(run_dir: Path) -> dict:
    """The run's manifest; a missing or damaged one is a one-line error naming the file."""
    from lcrag.evaluation.rundir import read_manifest

    manifest = read_manifest(run_dir) if run_dir.is_dir() else None
    if manifest is None:
        raise LcragError(f"{run_dir} holds no manifest.json: not a run directory of lcrag eval")
    return manifest


def _run_reader(run_dir: Path, manifest: dict, llm: str | None, base_url: str | None) -> dict:
    """The run's reader as :class:`Settings` fields, rebuilt from the spec it was loaded from: the manifest's
    ``config.reader`` (older manifests: ``llm``), never its ``reader``, which is the reader's identity
    (``gguf:FILE#FINGERPRINT``, ``openai:MODEL@URL``): what its answers are keyed by, not a way to load it.
    Retrieval needs this reader (token chunking counts in its tokenizer); a run that does not record how to load it
    (or recorded it without credentials) is read with ``--llm`` when given."""
    config = manifest.get("config")
    reader = config.get("reader") if isinstance(config, dict) else None
    reader = reader if isinstance(reader, dict) else {}
    spec = reader.get("llm") or manifest.get("llm")
    url = base_url or reader.get("base_url")
    if not spec or "***" in spec or (url and "***" in url):  # none recorded, or stored without its credentials
        if not llm:
            raise LcragError(f"{run_dir / 'manifest.json'} records the run's reader as {manifest.get('reader')!r} "
                             f"but not how to load it{' with its credentials' if spec else ''}: pass --llm")
        return {"llm": llm, "base_url": base_url}
    fields = {"llm": spec, "base_url": url}
    for name in ("context_window", "tokenizer", "threads", "timeout"):
        if reader.get(name) is not None:
            fields[name] = reader[name]
    return fields


def _check_failures_options(llm: str | None, base_url: str | None, dataset: Path | None) -> None:
    """Checked now, even when no question needs classifying."""
    from lcrag.core.http_client import check_base_url
    from lcrag.readers import parse_reader_spec

    if llm:
        parse_reader_spec(llm)
    if base_url:
        check_base_url(base_url)
    if dataset is not None and not dataset.exists():
        raise LcragError(f"--dataset {dataset} does not exist")


def _file_limits(ctx: typer.Context):
    """lcrag --max-file-mb, as the root command keeps it (its ParseLimits)."""
    from lcrag.documents.limits import ParseLimits

    limits = ctx.find_root().obj
    return limits if isinstance(limits, ParseLimits) else ParseLimits()


@analyze_app.command("failures")
def failures(
    ctx: typer.Context,
    run_dir: Annotated[Path, typer.Argument(help="A run directory of `lcrag eval` with a self-route configuration.")],
    dataset: Annotated[Optional[Path], typer.Option("--dataset", help="The run's dataset (default: the path in its manifest).")] = None,
    llm: Annotated[Optional[str], typer.Option("--llm", help=f"Classifier reader (default: the run's reader): {reader_forms()}.")] = None,
    base_url: Annotated[Optional[str], typer.Option("--base-url", envvar="LCRAG_BASE_URL")] = None,
) -> None:
    """Classify the questions Self-Route sent to LC into the paper's failure reasons, per dataset."""
    from lcrag.evaluation.analysis import classify_failures, failure_table, items_by_id, routed_to_lc
    from lcrag.evaluation.datasets import load_dataset
    from lcrag.evaluation.report import load_rows
    from lcrag.pipeline.pipeline import Pipeline, Settings
    from lcrag.readers import CachedReader, CompletionCache, make_reader
    from lcrag.strategies.base import Timer, retrieve_context
    from lcrag.core.types import Document

    manifest = _manifest(run_dir)
    _check_failures_options(llm, base_url, dataset)
    rows = routed_to_lc(load_rows(run_dir))
    out_dir = run_dir / "analysis"
    out_dir.mkdir(exist_ok=True)
    records: list[dict] = []
    if rows:
        path = dataset or (Path(manifest["dataset"]) if manifest.get("dataset") else None)
        if path is None:
            raise LcragError("pass --dataset: the run's manifest names none")
        items = items_by_id(load_dataset(path, max_bytes=_file_limits(ctx).file_bytes).items)
        chunking = None if manifest.get("chunking") in (None, "strategy default") else manifest["chunking"]
        settings = Settings(**_run_reader(run_dir, manifest, llm, base_url),
                            embedder=manifest.get("embedder") or "minilm", chunking=chunking, cache=False,
                            cache_dir=run_dir / "cache")
        base = Pipeline(settings)
        classifier = make_reader(llm, base_url) if llm else base.reader
        cached = CachedReader(classifier, CompletionCache(out_dir / "completions.sqlite"))

        def context_for(row: dict, item) -> str:
            # Retrieval is deterministic and its index sits in the run's cache: the chunks RAG-and-Route saw.
            choice = base.settings_for({"retriever": row["retriever"], "k": row["k"], "budget": row["budget"]})
            ctx = base.context(Document(item.context, id=item.id), "self-route", choice)
            return retrieve_context(ctx, item.question, replace(ctx.assembler, order="score"), Timer()).text

        try:
            records = classify_failures(rows, items, context_for, cached, out_dir / "failures.jsonl",
                                        on_row=lambda r: stderr.print(f"[dim]{r['item_id']}: {r['reason']}[/dim]"))
        finally:
            if classifier is not base.reader:
                classifier.close()
            base.close()
    header, body = failure_table(records)
    text = (f"# Failure analysis of `{run_dir}`\n\nQuestions Self-Route sent to LC: {len(records)}; classifier "
            f"`{llm or manifest['reader']}`, prompt of the Self-Route paper's Table 8 with our own few-shot examples."
            f"\n\n{_md(header, body)}\n")
    (out_dir / "failures.md").write_text(text, encoding="utf-8")
    typer.echo(text)


@analyze_app.command("questions")
def questions(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run directories of `lcrag eval` with lc and rag configurations.")],
    rag_config: Annotated[Optional[str], typer.Option("--rag-config", help="One RAG configuration id, e.g. 'rag|bm25|k5' (default: each RAG configuration against LC).")] = None,
    top: Annotated[int, typer.Option("--top", help="TF-IDF words to list.")] = 15,
    loose: Annotated[bool, typer.Option("--loose", help="LC better vs RAG better (one correct, or both wrong and a higher F1) instead of LC only vs RAG only.")] = False,
    out: Annotated[Optional[Path], typer.Option("--out", help="Write the Markdown here too.")] = None,
) -> None:
    """LC-only against RAG-only questions: by question word, and the top TF-IDF words of each side."""
    from lcrag.evaluation.analysis import exclusive_questions, question_words, tfidf_words
    from lcrag.evaluation.report import load_rows
    from lcrag.core.options import at_least

    at_least("top", top, 1)
    for run_dir in run_dirs:
        _manifest(run_dir)
    rows = [r for d in run_dirs for r in load_rows(d)]
    configs = sorted({r["config"] for r in rows if r["strategy"] == "rag"})
    if rag_config is not None and rag_config not in configs:
        raise LcragError(f"--rag-config {rag_config!r} is not in these runs; they hold {', '.join(configs) or 'no RAG rows'}")
    sides = exclusive_questions(rows, rag_config, loose)
    first, second = sides
    qw_header, qw_body = question_words(sides)
    tf_header, tf_body = tfidf_words(sides, top)
    text = (f"# {first} vs {second}\n\nRuns: {', '.join(f'`{d}`' for d in run_dirs)}; RAG configuration: "
            f"{rag_config or 'each, against LC'}. {first}: {len(sides[first])}, {second}: {len(sides[second])} "
            f"({'loose: correctness, then F1' if loose else 'strict correctness'}).\n\n## By question word\n\n{_md(qw_header, qw_body)}\n\n"
            f"## Top {top} TF-IDF words (one document per side and dataset; English stop words removed)\n\n"
            f"{_md(tf_header, tf_body)}\n")
    if out:
        out.write_text(text, encoding="utf-8")
    typer.echo(text)
