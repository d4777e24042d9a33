"""Issue 33 with the bundled models: `lcrag eval --concurrency 8` over 50 documents writes the rows `--concurrency 1`
writes, and `lcrag analyze failures` rebuilds the run's reader (recorded as `gguf:FILE#FINGERPRINT`) from its spec."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

WORDS = ["river", "stone", "field", "cloud", "lamp", "market", "harbor", "garden", "winter", "bridge", "orchard"]
COMPARED = ("question", "config", "prediction", "route", "raw_route_answer", "chunks", "chunk_scores",
            "question_terms", "answer_grounding", "prompt_tokens", "completion_tokens", "truncated_tokens", "score", "em", "f1",
            "route_score", "closed_book_correct")
# What depends on the order the server saw the prompts in, not on the runner: how much of a prompt llama.cpp found
# in its prefix cache (and the timings).
SERVER_STATE = ("seconds", "cached_prompt_tokens")


def write_dataset(path, n: int, seed: int = 7):
    """``n`` short documents, one question each: a code planted among filler sentences."""
    rng = random.Random(seed)
    with path.open("w") as f:
        for i in range(n):
            filler = [" ".join(rng.choice(WORDS) for _ in range(8)).capitalize() + "." for _ in range(5)]
            code = f"{rng.choice('BCDFGHK')}{rng.randint(100, 999)}"
            filler.insert(rng.randint(0, 5), f"The code for vault {i} is {code}.")
            f.write(json.dumps({"id": f"q{i}", "question": f"What is the code for vault {i}?", "answers": [code],
                                "context": " ".join(filler)}) + "\n")
    return path


def lcrag(*args, timeout=1800):
    return subprocess.run([sys.executable, "-m", "lcrag.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def run_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("config") / "short.yaml"
    path.write_text("reader:\n  max_tokens: 8\n")  # short answers keep the 200-odd calls quick
    return path


def rows_of(run_dir) -> dict:
    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]
    return {(r["item_id"], r["config"]): {k: r.get(k) for k in COMPARED}
            | {"calls": [{k: v for k, v in c.items() if k not in SERVER_STATE} for c in r["calls"]]}
            for r in rows}


def decline_probabilities(run_dir) -> dict:
    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]
    return {(r["item_id"], r["config"]): r["decline_probability"] for r in rows}


def test_eight_workers_write_the_rows_one_worker_writes(tmp_path, run_file):
    dataset = write_dataset(tmp_path / "vaults.jsonl", 50)
    common = ["eval", "--dataset", dataset, "--strategies", "rag,self-route", "--chunking", "words:16", "-k", "2",
              "--config", run_file]
    one = lcrag(*common, "--out", tmp_path / "one", "--concurrency", "1")
    assert one.returncode == 0, one.stderr
    eight = lcrag(*common, "--out", tmp_path / "eight", "--concurrency", "8")
    assert eight.returncode == 0, eight.stderr
    rows_one, rows_eight = rows_of(tmp_path / "one"), rows_of(tmp_path / "eight")
    assert len(rows_one) == 100 and rows_one.keys() == rows_eight.keys()
    differ = [key for key in rows_one if rows_one[key] != rows_eight[key]]
    assert differ == [], (differ[:3], [(rows_one[k], rows_eight[k]) for k in differ[:1]])
    assert all(not c["from_cache"] for r in rows_eight.values() for c in r["calls"])  # every answer computed anew
    # Token probabilities move in their last digits with what the server's prefix cache held (the order of the
    # prompts): close, not equal.
    declines_one, declines_eight = decline_probabilities(tmp_path / "one"), decline_probabilities(tmp_path / "eight")
    assert any(p is not None for p in declines_one.values())
    assert declines_eight == {k: p if p is None else pytest.approx(p, abs=0.02) for k, p in declines_one.items()}


def test_analyze_failures_rebuilds_the_runs_reader(tmp_path, run_file):
    dataset = write_dataset(tmp_path / "vaults.jsonl", 3, seed=11)
    run = tmp_path / "run"
    # threshold 0: every Self-Route question goes to LC, so every one is classified
    ev = lcrag("eval", "--dataset", dataset, "--out", run, "--strategies", "self-route", "--chunking", "words:24",
               "-k", "2", "--route-threshold", "0", "--config", run_file)
    assert ev.returncode == 0, ev.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["reader"].startswith("gguf:") and "#" in manifest["reader"]  # an identity, not a spec
    assert manifest["config"]["reader"]["llm"] == "smollm2"
    routes = [json.loads(line)["route"] for line in (run / "rows.jsonl").read_text().splitlines()]
    assert routes == ["lc"] * 3
    fa = lcrag("analyze", "failures", run, timeout=900)
    assert fa.returncode == 0, fa.stderr
    records = (run / "analysis" / "failures.jsonl").read_text().splitlines()
    assert len(records) == 3
    assert "Questions Self-Route sent to LC: 3" in (run / "analysis" / "failures.md").read_text()
