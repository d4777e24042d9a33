"""``lcrag index``: chunk a document and build its indexes on disk, ahead of its questions."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from lcrag.cli.flags import CHUNKING_HELP, LLM, BaseUrl, CacheDir, Embedder, config_from_flags, stdout
from lcrag.core.progress import progress_factory
from lcrag.core.registry import RETRIEVERS

INDEX_CHUNKING = "words:300"  # lcrag index's chunking when neither --chunking nor the run file gives one


def index(
    ctx: typer.Context,
    doc: Annotated[Path, typer.Argument(help="The document to index.")],
    chunking: Annotated[str, typer.Option("--chunking", help=f"{CHUNKING_HELP}.")] = INDEX_CHUNKING,
    retriever: Annotated[str, typer.Option("--retriever", "-r", help=f"{', '.join(RETRIEVERS.names())} or all (bm25 and dense).")] = "all",
    llm: LLM = "smollm2",
    embedder: Embedder = "minilm",
    base_url: BaseUrl = None,
    cache_dir: CacheDir = None,
    config: Annotated[Optional[Path], typer.Option("--config", help="A run file (.yaml/.toml, see the README): its reader, embedder, chunking and cache sections are used, then the flags given here override them.")] = None,
) -> None:
    """Chunk DOC and build its BM25 index and embeddings on disk (later questions reuse them)."""
    kinds = ("bm25", "dense") if retriever in ("all", "hybrid") else (retriever,)
    RETRIEVERS.check(kinds[0])
    # --retriever is not the retrieval section's retriever (it also takes "all"): it is left out of the run config.
    run = config_from_flags(ctx, config, {"retriever": ("", None)})
    chunking = run.chunking.chunking or INDEX_CHUNKING
    from lcrag.pipeline.config import Config
    from lcrag.pipeline.pipeline import Pipeline, as_source

    settings = Config(reader=run.reader, embedder=run.embedder, cache=run.cache).merged(
        {"chunking": chunking, "cache": False}).settings()  # indexing asks the reader nothing to cache
    document = as_source(doc, ctx.obj)
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
    stdout().print(
        f"{len(idx.chunks)} chunks ({chunking}) of {document.source or document.id} · "
        f"chunking {chunked - started:.2f}s · {', '.join(kinds)} {done - chunked:.2f}s"
        + (f" · {idx.embedded_chunks / (done - chunked):.1f} chunks/s embedded" if idx.embedded_chunks else " · loaded from cache")
        + f"\n{idx.dir}",
        highlight=False,
    )
