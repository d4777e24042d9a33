"""Routing evaluated offline: pairing rows, features, the fitted router file, policies, APGR/CPT, bootstrap,
leave-one-dataset-out, and `lcrag route fit/eval`."""

from __future__ import annotations

import json
import random
import sys


from lcrag.evaluation.routing.report import bootstrap, policies
from lcrag.strategies.routing.learned import features


def write_run(path, n=60, seed=0, datasets=("a", "b", "c")):
    """LC wins where retrieval is weak (low top score) and the RAG step declines more: a learnable signal."""
    rng = random.Random(seed)
    path.mkdir(parents=True)
    rows = []
    for i in range(n):
        weak = rng.random() < 0.4
        top = rng.uniform(0.1, 0.3) if weak else rng.uniform(0.6, 0.9)
        decline = rng.uniform(0.2, 0.5) if weak else rng.uniform(0.0, 0.05)
        lc, rag = (1.0, 0.0) if weak else (rng.choice([0.0, 1.0]),) * 2
        item, dataset = f"q{i}", datasets[i % len(datasets)]
        rows.append({"item_id": item, "config": "lc", "dataset": dataset, "strategy": "lc", "question": f"Who is {i}?", "score": lc,
                     "prompt_tokens": 5000, "truncated_tokens": 100, "calls": [{"prompt_tokens": 5000}]})
        rows.append({"item_id": item, "config": "self-route|bm25|k5", "dataset": dataset, "strategy": "self-route", "question": f"Who is {i}?",
                     "score": rag, "route_score": rag, "route": "rag", "raw_route_answer": "Bob",
                     "prompt_tokens": 1500, "calls": [{"prompt_tokens": 1500}], "chunk_scores": [top, top / 2, 0.1],
                     "decline_probability": decline})
    (path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_cli_route_fit_and_eval(tmp_path):
    import subprocess

    run = write_run(tmp_path / "r")
    cli = [sys.executable, "-m", "lcrag.cli", "route"]
    fitted = subprocess.run([*cli, "fit", run, "--out", tmp_path / "router.json"], capture_output=True, text=True)
    assert fitted.returncode == 0, fitted.stderr
    assert "60 of 60 questions come from runs made before" in fitted.stderr  # these rows record no grounding
    out = subprocess.run([*cli, "eval", run, "--router", tmp_path / "router.json"], capture_output=True, text=True)
    assert out.returncode == 0 and "learned router" in out.stdout and "APGR" in out.stdout
    bad = subprocess.run([*cli, "eval", tmp_path], capture_output=True, text=True)
    assert bad.returncode == 2 and "no rows.jsonl" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_route_eval_reports_cascades_against_the_two_way_routers(tmp_path):
    import subprocess

    run = write_run(tmp_path / "r")
    wide = tmp_path / "wide"
    wide.mkdir()
    rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines()]
    widened = [dict(r, prompt_tokens=4000, calls=[{"prompt_tokens": 4000}], route_score=min(1.0, r["score"] + 0.5),
                    decline_probability=r["decline_probability"] / 2) for r in rows if r["strategy"] == "self-route"]
    (wide / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in widened[:30]))
    out = subprocess.run([sys.executable, "-m", "lcrag.cli", "route", "eval", run, "--wide", wide, "--price-as",
                          "gpt-4o-mini"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "30 questions also answered by the wide step" in out.stdout
    assert out.stdout.count("T1=") == 16 and "learned router at equal tokens" in out.stdout
