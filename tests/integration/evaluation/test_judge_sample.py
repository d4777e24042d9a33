"""Quality from a judged sample (``--judge MODEL --judge-sample N``): the per-configuration and per-policy tables,
the verdicts cached, the report's section, and bad input as one-line errors. A scripted judge stands in for the
model here; tests/integration/test_judge_sample_with_reader.py runs a real one."""

from __future__ import annotations

import json
import random

import pytest

from lcrag.evaluation.judge import Judge
from lcrag.evaluation.judge_sample import COLUMNS
from lcrag.readers import CachedReader, CompletionCache
from tests.unit.evaluation.test_judge import ScriptedJudge
from tests.unit.test_cli import run_main

QUESTION = "True or false: the door in chapter {i} is open."  # a form the bundled 135M judge answers


def proxy(answer: str, rng: random.Random) -> float:
    """A proxy that tracks the judge, imperfectly: ~0.85 for the right answer, ~0.15 for the wrong one."""
    return round((0.85 if answer == "True" else 0.15) + rng.uniform(-0.1, 0.1), 3)


def write_true_false_run(path, n=40, seed=0, lc_right=0.7, rag_right=0.45):
    """A run of LC and Self-Route rows to questions whose gold answer is "True"; each answer is "True" or "False",
    scored by :func:`proxy`. Weak retrieval (a low top chunk score, a high decline probability) where RAG is wrong."""
    rng = random.Random(seed)
    path.mkdir(parents=True)
    rows = []
    for i in range(n):
        lc = "True" if rng.random() < lc_right else "False"
        rag = "True" if rng.random() < rag_right else "False"
        top, decline = (0.8, 0.02) if rag == "True" else (0.2, 0.4)
        common = {"item_id": f"q{i}", "dataset": "abc"[i % 3], "question": QUESTION.format(i=i),
                  "answers": ["True"], "metric": "lara"}
        rows.append({**common, "config": "lc", "strategy": "lc", "prediction": lc, "score": proxy(lc, rng),
                     "prompt_tokens": 4000, "calls": [{"prompt_tokens": 4000}]})
        rows.append({**common, "config": "self-route|bm25|k5", "strategy": "self-route", "prediction": rag,
                     "raw_route_answer": rag, "score": proxy(rag, rng), "route_score": proxy(rag, rng),
                     "route": "rag", "prompt_tokens": 900, "calls": [{"prompt_tokens": 900}],
                     "chunk_scores": [top, top / 2], "decline_probability": decline})
    (path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def judge(tmp_path):
    """A judge that says True of "True", False of "False", and neither of anything else; verdicts cached."""
    reader = ScriptedJudge({"True": "True", "False": "False", "Maybe": "I cannot tell"})
    return Judge(CachedReader(reader, CompletionCache(tmp_path / "judge.sqlite")))


def cell(body_row, column):
    return body_row[len(body_row) - len(COLUMNS) + COLUMNS.index(column)]


def interval(text):
    """"0.612 [0.571, 0.655]" -> (0.612, 0.571, 0.655)."""
    estimate, rest = text.split(" [")
    low, high = rest.rstrip("]").split(", ")
    return float(estimate), float(low), float(high)


@pytest.mark.parametrize("args, message", [
    (["route", "eval", "{run}", "--judge-sample", "10"], "--judge-sample needs --judge MODEL"),
    (["eval", "--dataset", "{run}/rows.jsonl", "--out", "{run}/new", "--judge", "openai:j@http://127.0.0.1:9/v1"],
     "the judge could not be asked"),  # nothing listens on port 9: found before any answer, not after them all
    (["route", "eval", "{run}", "--judge", "gpt-4o", "--judge-sample", "0"], "--judge-sample must be at least 2"),
    (["eval", "--dataset", "{run}/rows.jsonl", "--out", "{run}/new", "--judge-sample", "5"], "--judge-sample needs"),
    (["eval", "--dataset", "{run}/rows.jsonl", "--out", "{run}/new", "--judge", "m", "--judge-sample", "-1"],
     "--judge-sample must be at least 2"),
])
def test_bad_judge_flags_on_the_command_line(tmp_path, monkeypatch, capsys, args, message):
    run = write_true_false_run(tmp_path / "run", n=6)
    code, err = run_main([a.replace("{run}", str(run)) for a in args], monkeypatch, capsys)
    assert code == 2 and err.strip().count("\n") == 0 and message in err, err
    assert not (run / "new").exists()  # refused before the evaluation started
