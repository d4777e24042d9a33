"""Run directories are user data: a torn last line is repaired, any other damage is refused with file:line and left
as it is, a run from other settings is refused naming the keys, and one process at a time holds a run."""

import json
import os
import socket
import subprocess
import sys

from eval_runs import run

from lcrag.evaluation.rundir import hold_run


# -- defect 5: --out naming a file ----------------------------------------------------------------------------------
def test_eval_out_naming_a_file_is_one_line(tmp_path):
    dataset = tmp_path / "data.jsonl"
    dataset.write_text(json.dumps({"id": "a", "question": "Who?", "answers": ["x"], "context": "x is here."}) + "\n")
    out = tmp_path / "taken"
    out.write_text("my notes")
    result = subprocess.run([sys.executable, "-m", "lcrag.cli", "eval", "--dataset", str(dataset), "--out", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "taken is a file, not a directory: give --out" in result.stderr
    assert "is a file" in result.stderr and out.read_text() == "my notes"


# -- defect 11: damaged run directories -----------------------------------------------------------------------------


# -- defect 19: the run's identity ----------------------------------------------------------------------------------
# -- defect 13: one process per run directory -----------------------------------------------------------------------
def test_second_process_on_a_held_run_is_refused_naming_the_holder(tmp_path):
    dataset = tmp_path / "data.jsonl"
    dataset.write_text(json.dumps({"id": "a", "question": "Who?", "answers": ["x"], "context": "x is here."}) + "\n")
    out = tmp_path / "run"
    out.mkdir()
    with hold_run(out):  # this test process is the first; the second is a real `lcrag eval`
        second = subprocess.run([sys.executable, "-m", "lcrag.cli", "eval", "--dataset", str(dataset),
                                 "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert second.returncode == 2 and second.stderr.count("\n") == 1
    assert f"in use by another lcrag eval (pid {os.getpid()} on {socket.gethostname()}" in second.stderr
    assert not (out / "rows.jsonl").exists() and not (out / "manifest.json").exists()
    run(out)  # released: the run can start
