"""`lcrag route eval` per (run, dataset, length) cell (issue 44): it pooled 32K and 128K into one summary and
frontier, measured "oracle gain recovered" otherwise than benchmarks/results/routing_lara.md, and called an offline
replay "held at run time"."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest
from route_runs import write_run

from lcrag.evaluation.routing.report import MAX_COST, MAX_SHARE, load_questions, policies, summary_table
from lcrag.strategies.routing.learned import Router



def route_eval(*args):
    done = subprocess.run([sys.executable, "-m", "lcrag.cli", "route", "eval", *map(str, args)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def section(out: str, heading: str) -> str:
    """The text from a heading up to the next one."""
    start = out.index(heading)
    end = out.find("\n### ", start + 1)
    return out[start:] if end < 0 else out[start:end]


def summary_rows(text: str) -> dict[str, list[str]]:
    """The summary table's rows in a section (its first table), by router."""
    table = text.split("\n\n")[1]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    return {row[0]: row for row in rows}


def test_each_length_gets_its_own_summary_and_frontier_and_the_pooled_one_says_so(tmp_path):
    run = write_run(tmp_path / "r", n=80, datasets=("lara-32k", "lara-128k"))
    # the 128K questions: LC always better, so the two cells' figures differ from the pooled ones
    rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines()]
    for row in rows:
        if row["dataset"] == "lara-128k":
            row["score"] = 1.0 if row["strategy"] == "lc" else 0.0
            if row["strategy"] == "self-route":
                row["route_score"] = 0.0
    (run / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = route_eval(run, "--router", "lara")
    assert "computed offline from the runs' recorded answers" in out
    questions, _ = load_questions([run])
    for length in ("32k", "128k"):
        text = section(out, f"### {run} · lara · length {length}: 40 questions")
        mine = [q for q in questions if q.dataset == f"lara-{length}"]
        router = Router.load("lara")
        header, body = summary_table(policies(mine, [router.probability(q.x) for q in mine]))
        assert summary_rows(text) == {row[0]: row for row in body}  # the cell's own figures, not the pool's
        assert "| always-LC |" in text  # its frontier
    pooled = section(out, "### All 2 cells pooled (80 questions)")
    assert "the cells above are the figures to read" in pooled
    assert "oracle gain recovered = (quality at the operating point − max(always-LC, always-RAG))" in out
    assert "routing_lara.md" in out


def test_the_landing_table_labels_its_offline_replays_and_shows_the_runs_own_routes(tmp_path):
    run = write_run(tmp_path / "r", n=40, datasets=("lara-32k", "lara-128k"))
    out = route_eval(run, "--router", "lara", "--lc-share", "0.3")
    landing = out[out.index("Where the router lands"):]
    assert "replayed offline" in landing.splitlines()[0]
    for label in ("router, fixed threshold (offline replay)", "router, held at run time (offline replay)",
                  "the run's own routes (recorded)"):
        assert landing.count(f"| {label} |") == 2, label  # one row per cell
    assert f"| {run} | lara | 32k | always-LC |" in landing and f"| {run} | lara | 128k | always-LC |" in landing


def test_one_cell_is_not_reported_twice(tmp_path):
    out = route_eval(write_run(tmp_path / "r", n=30, datasets=("hotpotqa",)), "--router", "lara")
    assert f"### {tmp_path / 'r'} · hotpotqa · length —: 30 questions" in out and "pooled" not in out


def test_the_operating_points_flags_default_to_routing_laras_budget():
    from lcrag.cli.routing import evaluate

    parameters = inspect.signature(evaluate).parameters
    assert (parameters["max_share"].default, parameters["max_cost"].default) == (MAX_SHARE, MAX_COST)
