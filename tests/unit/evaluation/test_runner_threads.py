"""`lcrag eval --concurrency N` (issue 33): the runner's shared state is safe from its worker threads and bounded, and
N workers write the rows one worker writes."""

from __future__ import annotations

import sys
import threading

import pytest

from lcrag.evaluation.datasets import EvalItem
from lcrag.evaluation.runner import EvalRunner, expand_configs
from lcrag.pipeline.pipeline import Settings
from lcrag.core.types import Answer
from tests.conftest import ScriptedReader

pytestmark = pytest.mark.unit


def items(n: int, repeat: int = 1) -> list[EvalItem]:
    return [EvalItem(id=f"d/q{i}", dataset="d", question=f"What is the code for vault {i}?", answers=[f"K{i}"],
                     context=f"Some text {i}. The code for vault {i} is K{i}. More text. " * repeat) for i in range(n)]


def test_document_words_are_shared_safely_by_many_workers(tmp_path):
    """Eight workers computing the router's term signals over thousands of documents: no KeyError and no
    "dictionary changed size during iteration" (the eviction raced), and what is kept stays bounded."""
    questions = items(2000)
    runner = EvalRunner(questions, expand_configs(["self-route"], ["bm25"], [1], []), tmp_path / "run",
                        concurrency=8)
    answer = Answer("K1", "q", "self-route", "rag", raw_route_answer="K1")
    errors: list[str] = []

    def work(start: int) -> None:
        for item in questions[start::8]:
            try:
                terms = runner._route_terms(item, answer)
                assert terms["question_terms"]["document"] == 1.0, terms
                assert terms["answer_grounding"]["numbers_in_document"] == (1.0 if item.id == "d/q1" else 0.0)
            except Exception as error:  # noqa: BLE001  (every failure is the finding)
                errors.append(repr(error))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between almost every bytecode: a race shows at once
    try:
        for _ in range(10):  # a race shows in most rounds; ten make missing it unlikely
            threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                break
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert len(runner._documents) <= runner._documents.max_bytes


def comparable(rows: list[dict]) -> dict:
    """Rows by (question, configuration), without what is timed."""
    drop = {"seconds", "index_seconds"}
    return {(r["item_id"], r["config"]): {k: v for k, v in r.items() if k not in drop}
            | {"calls": [{k: v for k, v in c.items() if k != "seconds"} for c in r["calls"]]} for r in rows}


def test_eight_workers_write_the_rows_one_worker_writes(tmp_path):
    questions = items(50, repeat=4)
    configs = expand_configs(["lc", "rag", "self-route"], ["bm25"], [1], [])

    def answer(messages):  # declines every third vault, so Self-Route sends some questions to LC
        vault = int(messages[-1]["content"].rsplit("vault ", 1)[-1].split("?")[0])
        return "unanswerable" if vault % 3 == 0 else f"K{vault}"

    def run(out, concurrency):
        runner = EvalRunner(questions, configs, out, Settings(chunking="words:12"), reader=ScriptedReader(answer),
                            concurrency=concurrency, filter_closed_book=True)
        return runner.run()

    one, eight = run(tmp_path / "one", 1), run(tmp_path / "eight", 8)
    assert len(one) == len(eight) == 50 * len(configs)
    assert comparable(one) == comparable(eight)
    assert {r["route"] for r in one if r["strategy"] == "self-route"} == {"rag", "lc"}
