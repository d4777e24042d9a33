"""``lcrag corpus build``: a corpus index of retrieval units (LongRAG), which ``lcrag ask INDEX -s longrag`` (or any
strategy that reads a corpus) answers over, as over any source."""

from __future__ import annotations

import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Optional

import typer

from lcrag.chunking.units import GROUPINGS
from lcrag.cli.commands import command_group
from lcrag.cli.flags import tokenizer_for
from lcrag.core.errors import LcragError
from lcrag.core.options import longrag_choices
from lcrag.core.progress import progress_factory, stderr
from lcrag.core.registry import EMBEDDERS, spoken_list
from lcrag.retrieval.corpus.settings import FAISS_KINDS
from lcrag.retrieval.executors import EXECUTORS  # imported at start-up anyway: the retrievers' registry loads its package

corpus_app = command_group("Build a corpus index of long retrieval units (LongRAG); ask it with `lcrag ask INDEX`.")


@corpus_app.callback()
def corpus() -> None:  # a callback keeps `corpus` a group of one command (`lcrag corpus build`), its help the group's
    pass


@corpus_app.command("build")
def build(
    corpus: Annotated[Path, typer.Argument(help="JSONL (or .jsonl.gz): id, title, text, optional links.")],
    out: Annotated[Path, typer.Option("--out", help="Index directory (re-run to resume an interrupted build, or to add units).")],
    unit: Annotated[str, typer.Option("--unit", help=f"{', '.join(longrag_choices('unit'))}, or several, comma-separated.")] = "grouped",
    grouping: Annotated[str, typer.Option("--grouping", help=f"{', '.join(GROUPINGS)} (auto: links if present, else title mentions).")] = "auto",
    group_tokens: Annotated[int, typer.Option("--group-tokens", help="Largest group, in tokens.")] = 4096,
    piece_words: Annotated[int, typer.Option("--piece-words", help="Words per passage / MaxP piece.")] = 100,
    embedder: Annotated[str, typer.Option("--embedder", help=f"{EMBEDDERS.spec_forms()}, or none (BM25 only).")] = "minilm",
    bm25: Annotated[bool, typer.Option("--bm25/--no-bm25", help="Build BM25 over the units.")] = True,
    faiss: Annotated[Optional[str], typer.Option("--faiss", help=f"Also build a faiss index: {spoken_list(FAISS_KINDS)}.")] = None,
    executor: Annotated[str, typer.Option("--executor", help=f"{spoken_list(EXECUTORS)} (ray: embedding on a Ray cluster).")] = "local",
    ray_address: Annotated[Optional[str], typer.Option("--ray-address", help="Ray cluster address (default: start a local one).")] = None,
    tokenizer: Annotated[str, typer.Option("--tokenizer", help="Sizes in: a reader's tokens (smollm2, PATH.gguf), a tokenizer.json, or words.")] = "smollm2",
    batch: Annotated[int, typer.Option("--batch", help="Pieces per embedding batch.")] = 256,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Skip and count malformed records instead of stopping.")] = False,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Rebuild what OUT built with other settings (see below) instead of refusing.")] = False,
) -> None:
    """Ingest CORPUS and build retrieval units, piece embeddings and BM25 into OUT.

    OUT remembers what built it: the corpus by content (sha256, not its path) and --piece-words for everything,
    --tokenizer, --grouping and --group-tokens for the grouped units. Re-running with the same settings resumes or
    adds units; with other settings it is refused, naming them, and --rebuild rebuilds just the affected steps
    (everything for another corpus or piece size, only the grouped units for another grouping). Builds of one OUT
    from several shells are safe: the others wait, then find the work done.
    """
    from lcrag.documents.files import check_regular_file
    from lcrag.retrieval.corpus import CorpusBuildConfig, CorpusIndex, index_directory
    from lcrag.retrieval.embedders import make_embedder
    from lcrag.retrieval.executors import make_batches

    if executor not in EXECUTORS:
        raise LcragError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    use_embedder = embedder.lower() != "none"
    config = CorpusBuildConfig(
        units=tuple(u.strip() for u in unit.split(",") if u.strip()), piece_words=piece_words, grouping=grouping,
        group_tokens=group_tokens, embedder=embedder if use_embedder else None, bm25=bm25, faiss=faiss,
        executor=executor, batch=batch,
    )
    config.check()
    check_regular_file(corpus, max_bytes=sys.maxsize)  # a pipe or device is refused; streamed, so no size limit
    index_directory(out)  # a bad --out fails before any model loads
    started = time.perf_counter()
    with ExitStack() as stack:
        tok = tokenizer_for(tokenizer, stack)
        emb = make_embedder(embedder) if use_embedder else None
        batches = make_batches(executor, embedder, emb, ray_address) if use_embedder and executor != "local" else None
        progress = stack.enter_context(progress_factory())
        index, report = CorpusIndex.build(corpus, out, config, tok, embedder=emb, embed_batches=batches,
                                          progress=progress, skip_bad=skip_bad, rebuild=rebuild)
    meta = index.meta
    units = ", ".join(f"{k}: {v['count']:,}" for k, v in meta.get("units", {}).items() if "count" in v)
    steps = " · ".join(f"{k} {v:.1f}s" for k, v in report.seconds.items()) or "nothing left to build"
    typer.echo(f"{meta['documents']:,} documents, {meta['pieces']:,} pieces; units {units}\n{steps}\n"
               f"total {time.perf_counter() - started:.1f}s → {out}")
    if meta.get("skipped_records"):
        stderr.print(f"[yellow]skipped {meta['skipped_records']} malformed record(s)[/yellow]")
