"""One run file per shared store, checked (issue 43, item 6): the first process on a PostgreSQL store records what
shapes its segments (chunking, embedder, retrievers offered); a worker or replica started with another run file
refuses in one line naming the difference (exit code 2), the same one starts, and --new-run-file records its own."""

from __future__ import annotations

import subprocess
import sys

import pytest
from postgres_fixtures import database, postgres  # noqa: F401 - fixtures

from lcrag.pipeline.pipeline import Settings
from lcrag.store.postgres_database import PostgresStore
from lcrag.service.run_identity import RunFileMismatch, check_identity, differences, run_identity


def test_the_identity_names_what_shapes_segments_and_only_those():
    words = run_identity(Settings(chunking="words:300", embedder="minilm"), ["dense", "bm25", "bm25"])
    assert words == {"chunking": "words:300", "embedder": "minilm", "retrievers": ["bm25", "dense"]}
    tokens = run_identity(Settings(chunking="tokens:128", llm="smollm2"), ["bm25"])
    assert tokens["tokenizer"] == "smollm2"  # a chunking in tokens is counted by the reader's tokenizer
    assert run_identity(Settings(chunking="words:300", k=9, budget=4000), ["dense", "bm25"]) == words  # per question
    assert differences(words, tokens) == [
        "chunking: the store's 'words:300', this process's 'tokens:128'",
        "retrievers: the store's ['bm25', 'dense'], this process's ['bm25']",
        "tokenizer: the store's None, this process's 'smollm2'"]


def test_the_store_records_the_first_and_refuses_another(database):
    store = PostgresStore(database)
    try:
        first = run_identity(Settings(chunking="words:300"), ["bm25", "dense"])
        assert check_identity(store, first) is False and check_identity(store, first) is False
        other = run_identity(Settings(chunking="words:200"), ["bm25", "dense"])
        with pytest.raises(RunFileMismatch, match="chunking: the store's 'words:300', this process's 'words:200'"):
            check_identity(store, other)
        assert check_identity(store, other, replace=True) is True  # recorded anew: collections to index again
        assert check_identity(store, other) is False
        with pytest.raises(RunFileMismatch):
            check_identity(store, first)
    finally:
        store.close()


def _worker(database: str, tmp_path, run_file: str, *extra: str) -> subprocess.CompletedProcess:
    config = tmp_path / f"run-{abs(hash(run_file))}.yaml"
    config.write_text(run_file)
    return subprocess.run([sys.executable, "-m", "lcrag.cli", "worker", "--store", database, "--config", str(config),
                           "--cache-dir", str(tmp_path / "cache"), "--stop-after", "0", *extra],
                          capture_output=True, text=True, timeout=300)


def test_a_worker_with_another_run_file_refuses_in_one_line(database, tmp_path):
    assert _worker(database, tmp_path, "chunking:\n  chunking: words:120\n").returncode == 0
    refused = _worker(database, tmp_path, "chunking:\n  chunking: words:90\n")
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "chunking: the store's 'words:120', this process's 'words:90'" in lines[0]
    assert _worker(database, tmp_path, "chunking:\n  chunking: words:120\n").returncode == 0
    assert _worker(database, tmp_path, "chunking:\n  chunking: words:90\n", "--new-run-file").returncode == 0
    assert _worker(database, tmp_path, "chunking:\n  chunking: words:120\n").returncode == 2
