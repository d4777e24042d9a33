"""`lcrag analyze failures` rebuilds the run's reader from the spec it was loaded from (issue 33): the manifest's
``config.reader``, not its ``reader``, which is the reader's identity (``gguf:FILE#FINGERPRINT``) -- passed as a spec,
it was "GGUF model …#0123… does not exist"."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from reader_servers import Stub


IDENTITY = "gguf:SmolLM2-135M-Instruct.Q4_1.gguf#0123456789abcdef"  # how the bundled reader is recorded


@pytest.fixture
def server():
    """An OpenAI-compatible reader on loopback that answers every classification "(B)" and records the prompts."""
    stub = Stub(answer=lambda prompt: "(B)")
    yield stub.url, stub.chats
    stub.kill()


def write_run(run_dir, dataset, manifest_extra):
    """A run of two questions Self-Route sent to LC, its manifest as `lcrag eval` writes it for the reader."""
    run_dir.mkdir()
    with dataset.open("w") as f:
        for i in range(2):
            f.write(json.dumps({"id": f"q{i}", "question": f"What is the code for vault {i}?", "answers": [f"K{i}"],
                                "context": f"Some text. The code for vault {i} is K{i}. More text. " * 8}) + "\n")
    rows = [{"item_id": f"{dataset.stem}/q{i}", "dataset": dataset.stem, "config": "self-route|bm25|k2",
             "strategy": "self-route", "retriever": "bm25", "k": 2, "budget": None, "route": "lc"} for i in range(2)]
    (run_dir / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = {"reader": IDENTITY, "dataset": str(dataset), "chunking": "words:10", "embedder": None,
                **manifest_extra}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))


def analyze(run_dir, *args):
    return subprocess.run([sys.executable, "-m", "lcrag.cli", "analyze", "failures", str(run_dir), *args],
                          capture_output=True, text=True, timeout=300)


def test_the_reader_is_rebuilt_from_its_spec_not_its_identity(tmp_path, server):
    url, prompts = server
    config = {"reader": {"llm": "openai:stub", "base_url": url, "context_window": None, "tokenizer": None,
                         "threads": None, "timeout": 30, "max_tokens": 64}}
    write_run(tmp_path / "run", tmp_path / "data.jsonl", {"llm": "openai:stub", "config": config})
    result = analyze(tmp_path / "run")
    assert result.returncode == 0, result.stderr
    assert len(prompts) == 2 and all("The code for vault" in p for p in prompts)  # RAG's chunks, classified
    records = [json.loads(line) for line in (tmp_path / "run" / "analysis" / "failures.jsonl").read_text().splitlines()]
    assert [r["reason"] for r in records] == ["general", "general"]
    assert f"classifier `{IDENTITY}`" in (tmp_path / "run" / "analysis" / "failures.md").read_text()


def test_a_manifest_without_the_spec_asks_for_llm_in_one_line(tmp_path, server):
    url, prompts = server
    write_run(tmp_path / "run", tmp_path / "data.jsonl", {})
    result = analyze(tmp_path / "run")
    assert result.returncode == 2 and "not how to load it: pass --llm" in result.stderr, result.stderr
    assert IDENTITY in result.stderr and "Traceback" not in result.stderr
    given = analyze(tmp_path / "run", "--llm", "openai:stub", "--base-url", url)
    assert given.returncode == 0, given.stderr
    assert len(prompts) == 2
