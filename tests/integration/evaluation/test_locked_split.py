"""LaRA's locked test set (issue 44): the shipped split's parts, the refusal to fit on anything but the training
part, and benchmarks/route_lara.py fitting on the training part alone and scoring the test part only when asked."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from lcrag.core.errors import InputError
from lcrag.evaluation.locked_split import LockedSplit, fit_training_router
from lcrag.evaluation.routing.report import Question, fit_router, load_questions
from lcrag.strategies.routing.learned import FEATURES


BENCHMARKS = Path(__file__).parents[3] / "benchmarks"
SPLIT = LockedSplit.load()
TRAIN_READERS = ["gpt-4o", "llama-3.3-70b", "qwen2.5-7b-instruct"]


def items_of(part: str, prefix: str, documents: int) -> list[str]:
    """The question ids of the first ``documents`` documents of ``part`` whose name starts with ``prefix``."""
    docs = sorted(d for d in (SPLIT.test_documents if part == "test" else SPLIT.train_documents)
                  if d.startswith(prefix))[:documents]
    return sorted(i for i, d in SPLIT.document_of.items() if d in docs)


def question(reader: str, item_id: str, rng: random.Random) -> Question:
    weak = rng.random() < 0.4  # LC wins where retrieval is weak: a learnable signal
    x = [rng.uniform(0.1, 0.3) if weak else rng.uniform(0.6, 0.9)] + [rng.random() for _ in FEATURES[1:]]
    return Question(f"/runs/{reader}", item_id, "lara-32k", 1.0 if weak else 0.5, 0.0 if weak else 0.5, 5000, 1500,
                    x, None, False)


def test_a_fit_given_test_rows_or_rows_of_neither_part_refuses():
    rng = random.Random(0)
    train = [question("gpt-4o", i, rng) for i in items_of("train", "32k/financial", 6)]
    fit_training_router(train, SPLIT)  # the training part alone fits
    for reader, part in (("mistral-nemo", "test"), ("gpt-4o", "test"), ("mistral-nemo", "train")):
        outside = question(reader, items_of(part, "32k/financial", 1)[0], rng)
        with pytest.raises(InputError, match="outside the training part"):
            fit_training_router([*train, outside], SPLIT)
    kept, test, neither = SPLIT.partition([*train, question("mistral-nemo", items_of("test", "32k", 1)[0], rng),
                                           question("gpt-4o", items_of("test", "32k", 1)[0], rng)])
    assert kept == train and [q.run for q in test] == ["/runs/mistral-nemo"] and [q.run for q in neither] == ["/runs/gpt-4o"]


def synthetic_runs(root: Path) -> list[Path]:
    """A run per reader (three training readers and one test reader), each answering questions on training and
    on test documents: rows as `lcrag eval --strategies lc,self-route` writes them."""
    rng, runs = random.Random(1), []
    items = items_of("train", "32k/financial", 2) + items_of("train", "32k/paper", 2)
    test_items = items_of("test", "32k/financial", 2)
    for reader in [*TRAIN_READERS, "mistral-nemo"]:
        rows = []
        for item in items + test_items:
            top = rng.uniform(0.1, 0.9)  # LC wins more often the weaker the retrieval: scores that rank
            weak = rng.random() < 0.9 - top
            lc, rag = (1.0, 0.0) if weak else (rng.choice([0.0, 1.0]), rng.choice([0.0, 1.0]))
            common = {"item_id": item, "dataset": "lara-32k", "question": f"What is {item}?"}
            rows.append({**common, "config": "lc", "strategy": "lc", "score": lc, "prompt_tokens": 20000,
                         "calls": [{"prompt_tokens": 20000}]})
            rows.append({**common, "config": "self-route|bm25|k5", "strategy": "self-route", "score": rag,
                         "route_score": rag, "route": "rag", "raw_route_answer": "Bob", "prompt_tokens": 1500,
                         "calls": [{"prompt_tokens": 1500}], "chunk_scores": [top, top / 2, 0.1]})
        (root / reader).mkdir(parents=True)
        (root / reader / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        runs.append(root / reader)
    return runs


def route_lara(monkeypatch, *args) -> int:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import route_lara as script

    script.TARGETS.clear()
    monkeypatch.setattr(sys, "argv", ["route_lara.py", *map(str, args)])
    return script.main()


def test_route_lara_fits_on_the_training_part_and_scores_the_test_part_only_when_asked(tmp_path, monkeypatch):
    runs = synthetic_runs(tmp_path / "runs")
    train_items = len(items_of("train", "32k/financial", 2) + items_of("train", "32k/paper", 2))
    test_items = len(items_of("test", "32k/financial", 2))
    out, router_file = tmp_path / "routing.md", tmp_path / "router.json"
    assert route_lara(monkeypatch, *runs, "--out", out, "--router-out", router_file) == 0
    fitted = json.loads(router_file.read_text())["fitted_on"]
    assert fitted["questions"] == 3 * train_items and fitted["readers"] == TRAIN_READERS
    report = out.read_text()
    assert f"This run: {3 * train_items} training answers, {test_items} test answers" in report
    assert "## Locked test set: scored once" not in report and "| mistral-nemo |" not in report  # never read

    again = tmp_path / "again.json"  # fitted and scored in one run: the router this run fits
    assert route_lara(monkeypatch, *runs, "--out", out, "--router-out", again, "--test-router", again) == 0
    scored = out.read_text().split("## Locked test set: scored once")[1].split("## The training part")[0]
    assert f"| mistral-nemo | 32k | {test_items} |" in scored and "Not a held-out measure" not in scored

    fit_router(load_questions(runs)[0], "trees").save(tmp_path / "seen.json")  # a router that saw the test reader says so
    assert route_lara(monkeypatch, *runs, "--out", out, "--test-router", tmp_path / "seen.json") == 0
    assert "Not a held-out measure: this router was fitted on the test readers mistral-nemo" in out.read_text()
