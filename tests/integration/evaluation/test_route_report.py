"""`lcrag route fit/eval` on a written run, in their own processes (routing evaluated offline in this process:
tests/unit/evaluation/test_route_report.py)."""

from __future__ import annotations

import json
import sys

from route_runs import write_run


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
