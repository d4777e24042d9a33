"""Quality from a judged sample (``--judge MODEL --judge-sample N``): the per-configuration and per-policy tables,
the verdicts cached, the report's section, and bad input as one-line errors. A scripted judge stands in for the
model here; tests/integration/test_judge_sample_with_reader.py runs a real one."""

from __future__ import annotations

import json
import random

import pytest
from judge_runs import QUESTION, proxy, write_true_false_run

from lcrag.core.errors import InputError
from lcrag.evaluation.judge import Judge
from lcrag.evaluation.judge_sample import (
    COLUMNS, MAIN_POLICIES, config_table, judge_run, open_judge, policy_table, route_judged,
)
from lcrag.evaluation.report import write_report
from lcrag.evaluation.routing.report import load_questions, policies
from lcrag.readers import CachedReader, CompletionCache
from tests.unit.evaluation.test_judge import ScriptedJudge
from tests.unit.evaluation.test_report import row


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


def eval_rows(n=60, seed=1):
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        for strategy, right in (("lc", 0.7), ("rag", 0.4)):
            answer = "True" if rng.random() < right else "False"
            rows.append(row(f"q{i}", strategy, proxy(answer, rng), 100) | {
                "question": QUESTION.format(i=i), "prediction": answer, "answers": ["True"]})
    return rows


def test_each_configuration_judged_on_a_sample(judge):
    header, body, unjudged = config_table(eval_rows(), judge, size=20)
    assert header[0] == "configuration" and [r[0] for r in body] == ["lc", "rag|bm25|k5"] and not unjudged
    for r in body:
        assert cell(r, "N") == "60" and cell(r, "judged") == "20"
        ppi, classical = interval(cell(r, "PPI++ [95% CI]")), interval(cell(r, "judged only [95% CI]"))
        assert 0 <= ppi[1] <= ppi[0] <= ppi[2] <= 1
        assert ppi[2] - ppi[1] < 0.8 * (classical[2] - classical[1])  # the proxy tracks the judge
        assert float(cell(r, "PPI / judged-only interval")) < 0.8
    # the same questions are drawn for both configurations (paired); one verdict per distinct (question, answer)
    calls = judge.reader.inner.calls
    assert 20 < calls <= 40 and judge.reader.misses == calls and judge.reader.hits == 40 - calls
    config_table(eval_rows(), judge, size=20)
    assert judge.reader.inner.calls == calls  # the same draw again: every verdict from the cache


def test_an_answer_without_a_verdict_is_named_and_counts_by_its_proxy(judge):
    rows = eval_rows(n=10)
    rows[0]["prediction"] = "Maybe"
    _, body, unjudged = config_table(rows, judge, size=None)  # no sample size: every answer judged
    assert len(unjudged) == 1 and "lc item q0" in unjudged[0] and "I cannot tell" in unjudged[0]
    assert cell(body[0], "judged") == "9" and cell(body[1], "judged") == "10"
    assert cell(body[1], "PPI++ [95% CI]") == cell(body[1], "judged only [95% CI]")  # all judged: PPI is classical


def test_the_runs_report_keeps_the_judged_section(tmp_path, judge):
    run = tmp_path / "run"
    run.mkdir()
    (run / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in eval_rows()))
    section = judge_run(run, judge, size=12, seed=5)
    assert section.startswith("## Quality with a judge (`scripted`)") and "12 sampled answers per configuration (seed 5)" in section
    assert section in (run / "report" / "report.md").read_text()
    assert section in write_report(run).read_text()  # `lcrag report` later keeps it
    (run / "judged.json").write_text("{")
    with pytest.raises(Exception, match="judged.json: not the table"):
        write_report(run)


def test_each_run_and_main_policy_judged_on_a_sample(tmp_path, judge):
    runs = [write_true_false_run(tmp_path / name, seed=s) for s, name in enumerate(("reader-a", "reader-b"))]
    questions, _ = load_questions(runs)
    points = policies(questions, [q.decline or 0.0 for q in questions])  # any scores give learned-router points
    header, body, unjudged = policy_table(questions, points, judge, size=15, seed=2)
    assert header[:3] == ["run", "router", "setting"] and not unjudged
    assert [(r[0], r[1], r[2]) for r in body] == [(str(run), *p) for run in runs for p in MAIN_POLICIES]
    for r in body:
        assert cell(r, "N") == "40" and cell(r, "judged") == "15"
        ppi = interval(cell(r, "PPI++ [95% CI]"))
        assert ppi[1] <= ppi[0] <= ppi[2] and float(cell(r, "PPI / judged-only interval")) < 0.9
    first = [q for q in questions if q.run == str(runs[0])]
    assert float(cell(body[1], "proxy only")) == pytest.approx(sum(q.lc_score for q in first) / 40, abs=5e-4)
    # two runs, 15 questions each, both answers: 60 verdicts (one call per distinct question and answer)
    assert judge.reader.misses + judge.reader.hits == 60 and judge.reader.misses == judge.reader.inner.calls
    again = Judge(CachedReader(judge.reader.inner, CompletionCache(tmp_path / "judge.sqlite")))  # a second run
    text = route_judged(questions, points, again, size=15, seed=2)
    assert "0 judge call(s), 60 verdict(s) from its cache" in text


def test_a_judge_that_takes_several_requests_at_once_gives_the_same_table(tmp_path, judge):
    runs = [write_true_false_run(tmp_path / name, seed=s) for s, name in enumerate(("reader-a", "reader-b"))]
    questions, _ = load_questions(runs)
    points = policies(questions, [q.decline or 0.0 for q in questions])
    one_at_a_time = policy_table(questions, points, judge, size=15, seed=2)
    threaded = ScriptedJudge({"True": "True", "False": "False"})
    threaded.max_concurrency = 4  # what an OpenAI-compatible reader declares
    several = Judge(CachedReader(threaded, CompletionCache(tmp_path / "other.sqlite")))
    assert policy_table(questions, points, several, size=15, seed=2) == one_at_a_time
    assert config_table(eval_rows(), several, size=20) == config_table(eval_rows(), judge, size=20)


def test_bad_judge_flags_are_refused_before_anything_runs():
    with pytest.raises(InputError, match="--judge-sample needs --judge MODEL"):
        open_judge(None, 10)
    with pytest.raises(InputError, match="--judge-sample must be at least 2"):
        open_judge("gpt-4o", 1)
    assert open_judge(None) is None


def test_a_run_draws_the_same_questions_wherever_it_is_kept(tmp_path, judge):
    tables = []
    for parent in ("here", "elsewhere/deeper"):
        run = write_true_false_run(tmp_path / parent / "reader-a", seed=3)
        questions, _ = load_questions([run])
        points = policies(questions, [q.decline or 0.0 for q in questions])
        _, body, _ = policy_table(questions, points, judge, size=12, seed=4)
        tables.append([r[1:] for r in body])
    assert tables[0] == tables[1]
    other = write_true_false_run(tmp_path / "there" / "reader-b", seed=3)  # the same rows under another name
    questions, _ = load_questions([other])
    _, body, _ = policy_table(questions, policies(questions, [q.decline or 0.0 for q in questions]), judge, 12, seed=4)
    assert [r[1:] for r in body] != tables[0]  # another run is another draw
