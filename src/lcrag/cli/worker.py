"""`lcrag worker`: indexes collections of a shared store (PostgreSQL) as jobs, beside or instead of the replicas'
own job threads; as many as wanted, on any machine that reaches the database. Stopped by SIGTERM or Ctrl-C; a
worker killed mid-job loses nothing: its lease runs out and another worker or replica takes the job."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Annotated, Optional

import typer

from lcrag.cli.engine import engine
from lcrag.cli.service_flags import (JOB_RETENTION_SECONDS, CacheDir, IndexWorkers, JobLease, JobRetention, NewRunFile,
                                     Retrievers, RunFile, ServiceFlags, StoreUrl)
from lcrag.core.errors import OptionError


def worker(
    store: StoreUrl = None,
    config: RunFile = None,
    cache_dir: CacheDir = None,
    workers: IndexWorkers = 1,
    lease: JobLease = 30,
    job_retention: JobRetention = JOB_RETENTION_SECONDS,
    embedder: Annotated[Optional[str], typer.Option("--embedder", help="The embedder, if not the run file's (it must be the replicas').")] = None,
    retrievers: Retrievers = None,
    new_run_file: NewRunFile = False,
    stop_after: Annotated[Optional[float], typer.Option("--stop-after", help="Stop after this many seconds (for scripts and tests).", min=0)] = None,
) -> None:
    """Run a shared store's indexing jobs (parsing, chunking and embedding collections' files): with the replicas'
    run file, so that segments are made as they would make them."""
    if not store:
        raise OptionError("lcrag worker needs --store postgresql://USER@HOST/DATABASE (or LCRAG_STORE)")
    flags = ServiceFlags(config=config, cache_dir=cache_dir, max_waiting=1, store=store, index_workers=workers,
                         job_lease=lease, job_retention=job_retention, retrievers=retrievers, new_run_file=new_run_file)
    answering = engine(flags, embedder)
    answering.warm_on_change = False  # a worker answers nothing: a ready collection is not loaded into its memory
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    typer.echo(f"lcrag worker: {workers} indexing thread(s) on {answering.collections.db.shown} "
               f"(files mirrored in {Path(answering.collections.root)})", err=True)
    try:
        stop.wait(stop_after)
    except KeyboardInterrupt:
        pass
    finally:
        answering.close()
