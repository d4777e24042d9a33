"""A judged sample's bad flags on the command line (``--judge MODEL --judge-sample N``): one-line errors, exit 2,
before the evaluation starts, an unreachable judge among them (the tables and the verdicts with a scripted judge:
tests/unit/evaluation/test_judge_sample.py; a real judge: tests/integration/test_judge_sample_with_reader.py)."""

from __future__ import annotations

import pytest
from cli_runs import run_main
from judge_runs import write_true_false_run


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
