"""benchmarks/route_lara.py's calibrated rows (issue 44): each locked test reader's router adapted from its own
LC/RAG agreement on the training documents only, the test part scored held at 0.3 beside the shipped router."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import pytest

from lcrag.evaluation.locked_split import LockedSplit

pytestmark = pytest.mark.unit

BENCHMARKS = Path(__file__).parents[3] / "benchmarks"
SPLIT = LockedSplit.load()
READERS = ["gpt-4o", "llama-3.3-70b", "qwen2.5-7b-instruct", "mistral-nemo"]  # the last a test reader


def items(part: str, prefix: str, documents: int) -> list[str]:
    docs = sorted(d for d in (SPLIT.test_documents if part == "test" else SPLIT.train_documents)
                  if d.startswith(prefix))[:documents]
    return sorted(i for i, d in SPLIT.document_of.items() if d in docs)


def runs(root: Path) -> list[Path]:
    """Rows as `lcrag eval --strategies lc,self-route` writes them, with both answers' texts: where retrieval is
    weak the RAG answer declines and LC answers (they disagree, LC wins), else they say the same."""
    rng, made = random.Random(2), []
    asked = items("train", "32k/financial", 2) + items("train", "32k/paper", 2) + items("test", "32k/financial", 2)
    for reader in READERS:
        rows = []
        for item in asked:
            top = rng.uniform(0.1, 0.9)
            weak = rng.random() < 0.9 - top
            rag = "The text does not say." if weak else "The revenue was 12 million."
            common = {"item_id": item, "dataset": "lara-32k", "question": f"What is {item}?"}
            rows.append({**common, "config": "lc", "strategy": "lc", "score": 1.0 if weak else 0.5,
                         "prediction": "The revenue was 12 million.", "prompt_tokens": 20000,
                         "calls": [{"prompt_tokens": 20000}]})
            rows.append({**common, "config": "self-route|bm25|k5", "strategy": "self-route",
                         "score": 0.0 if weak else 0.5, "route_score": 0.0 if weak else 0.5, "route": "rag",
                         "raw_route_answer": rag, "prompt_tokens": 1500, "calls": [{"prompt_tokens": 1500}],
                         "chunk_scores": [top, top / 2, 0.1]})
        (root / reader).mkdir(parents=True)
        (root / reader / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        made.append(root / reader)
    return made


@pytest.fixture
def script(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import route_lara

    route_lara.TARGETS.clear()
    return route_lara


def test_the_test_readers_are_calibrated_on_their_own_agreement_and_scored_beside_the_shipped_router(
        tmp_path, monkeypatch, script):
    made, out, router = runs(tmp_path / "runs"), tmp_path / "test.md", tmp_path / "router.json"
    monkeypatch.setattr(sys, "argv", ["route_lara.py", *map(str, made), "--out", str(out), "--router-out",
                                      str(router), "--test-router", str(router), "--test-only"])
    assert script.main() == 0
    rates = json.loads(router.read_text())["fitted_on"]["disagreement"]
    assert rates["what/declines"] == 1.0 and rates["what/answers"] == 0.0  # the training readers' own
    report = out.read_text()
    assert "## The training part" not in report  # --test-only
    section = report.split("## Calibrated on the reader's own answers")[1]
    pool = len(items("train", "32k/financial", 2) + items("train", "32k/paper", 2))
    assert f"- mistral-nemo: {pool} answers on training documents" in section
    for policy in ("shipped router", "calibrated, N = 50", "calibrated, N = 100", "calibrated, N = 200",
                   "Self-Route rule (its own share)", "random at 0.3 (expected)"):
        assert f"| mistral-nemo | 32k | {policy} |" in section
    # the calibration questions are the test reader's on training documents: none of the test part's
    everything = [q for run in made for q in script.load_questions([run])[0]]
    assert all(SPLIT.document_of[q.item_id] in SPLIT.train_documents
               for q in script.calibration_pool(everything, SPLIT, "mistral-nemo"))


def test_the_targets_paragraph_without_a_defined_oracle_gain(script):
    cells = [{"reader": "r", "length": "32k", "lc_beats_rag": True, "vs_lc": -0.01, "gain": math.nan,
              "vs_rule": 0.0, "cost": 0.3}]
    assert "no cell has one defined" in "\n".join(script.targets_paragraph(cells))
