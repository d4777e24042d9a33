"""The replay reader (``replay:SOURCE``) through `lcrag eval` in its own process: a question with no recording is left
out and named (the reader itself, the checks on recordings, the ``recordings`` dataset format and the token-count
cache: tests/unit/test_replay_reader.py)."""

import os
import subprocess
import sys

from replay_recordings import logs, tokenizer_json, write_jsonl  # noqa: F401 - fixtures


def test_an_unrecorded_question_is_skipped_counted_and_named_by_lcrag_eval(logs, tokenizer_json, tmp_path):
    """No model can be asked instead, so the question is left out of the run — never a row scored 0 — and the run
    says how many and which."""
    dataset = write_jsonl(tmp_path / "questions.jsonl", [
        {"id": "q1", "question": "Who founded Beta?", "answers": ["Bob"], "document": "docs/beta.txt"}])
    result = subprocess.run(
        [sys.executable, "-m", "lcrag.cli", "eval", "--dataset", str(dataset), "--llm", f"replay:{logs}",
         "--tokenizer", str(tokenizer_json), "--strategies", "lc", "--out", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "400"})
    assert result.returncode == 0, result.stderr
    assert "skipped 1 (question, strategy) pair(s) the reader holds no answer for" in result.stderr
    assert f"replay: no recording of the question 'Who founded Beta?' in {logs}" in result.stderr
    rows = tmp_path / "run" / "rows.jsonl"
    assert not rows.exists() or not rows.read_text().strip()  # no row, so no silent zero

