"""``--judge MODEL --judge-sample N`` with a real local reader as the judge: the bundled SmolLM2-135M behind the
embedded reader's own llama.cpp server on loopback, reached as ``openai:smollm2@URL`` exactly as a remote
OpenAI-compatible judge is. A 135M model is a poor judge (it often answers neither True nor False); these tests check
the mechanics, not its verdicts: N answers judged per reader, estimates in [0, 1] inside their intervals, PPI's
interval narrower than the judged answers' alone where the proxy tracks the judge, the verdicts cached (a second run
asks the judge nothing), and a judge that cannot be reached as a one-line error."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from judge_runs import QUESTION, write_true_false_run

pytestmark = pytest.mark.slow  # about 90 s: a few hundred judge calls and a small evaluation on two shared cores
SAMPLE = 12


@pytest.fixture(scope="module")
def judge_spec(reader):
    return f"openai:smollm2@{reader.base_url}"  # asking for the URL starts the embedded server


def lcrag(*args, cache):
    env = {**os.environ, "LCRAG_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-m", "lcrag.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=900, env=env)


def table_after(text: str, heading: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table after the line starting with ``heading``, keyed by its header."""
    lines = text[text.index(heading):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return [dict(zip(rows[0], r)) for r in rows[2:]]


def interval(text: str) -> tuple[float, float, float]:
    estimate, rest = text.split(" [")
    low, high = rest.rstrip("]").split(", ")
    return float(estimate), float(low), float(high)


def check_estimates(rows: list[dict[str, str]]) -> None:
    for r in rows:
        assert 2 <= int(r["judged"]) <= SAMPLE, r  # a few sampled answers may get no True/False verdict
        for column in ("PPI++ [95% CI]", "judged only [95% CI]"):
            estimate, low, high = interval(r[column])
            assert 0.0 <= low <= estimate <= high <= 1.0, r


def test_route_eval_with_a_local_judge(tmp_path, judge_spec):
    runs = [write_true_false_run(tmp_path / name, n=30, seed=s) for s, name in enumerate(("reader-a", "reader-b"))]
    args = ("route", "eval", *runs, "--judge", judge_spec, "--judge-sample", SAMPLE)
    first = lcrag(*args, cache=tmp_path / "cache")
    assert first.returncode == 0, first.stderr
    rows = table_after(first.stdout, "Quality judged on a sample")
    assert [(r["run"], r["router"]) for r in rows][:2] == [(str(runs[0]), "always-RAG"), (str(runs[0]), "always-LC")]
    assert len(rows) == 2 * 5 and all(r["N"] == "30" for r in rows)
    check_estimates(rows)
    # The small judge does track a bare "True"/"False" answer, and so does the proxy: PPI++ puts weight on the proxy
    # (λ > 0) and its interval is the narrower, on every row where it does.
    tuned = [r for r in rows if float(r["λ"]) > 0]
    assert tuned and all(float(r["PPI / judged-only interval"]) < 1.0 for r in tuned)
    assert f"{SAMPLE} sampled questions (LC and RAG answers) per run" in first.stdout
    again = lcrag(*args, cache=tmp_path / "cache")
    assert again.returncode == 0, again.stderr
    assert "0 judge call(s)" in again.stdout  # every verdict from the cache
    assert table_after(again.stdout, "Quality judged on a sample") == rows


def test_eval_with_a_local_judge(tmp_path, judge_spec):
    dataset = tmp_path / "doors.jsonl"
    dataset.write_text("".join(json.dumps({
        "id": f"q{i}", "question": QUESTION.format(i=i), "answers": ["True"],
        "context": f"Chapter {i}. The corridor is long and quiet. The door in chapter {i} is open. The lamp is off."})
        + "\n" for i in range(8)))
    run = tmp_path / "run"
    args = ("eval", "--dataset", dataset, "--out", run, "--strategies", "lc,rag", "--chunking", "words:12", "-k", "1",
            "--llm", judge_spec, "--judge", judge_spec, "--judge-sample", 4)
    first = lcrag(*args, cache=tmp_path / "cache")
    assert first.returncode == 0, first.stderr
    rows = table_after(first.stdout, "## Quality with a judge (`smollm2`)")
    assert [r["configuration"] for r in rows] == ["lc", r"rag\|bm25\|k1"] and all(r["N"] == "8" for r in rows)
    for r in rows:
        assert int(r["judged"]) <= 4
        if int(r["judged"]) >= 2:
            check_estimates([r | {"judged": "2"}])
    report = (run / "report" / "report.md").read_text()
    assert "## Quality with a judge (`smollm2`)" in report and (run / "judged.json").is_file()
    again = lcrag(*args, cache=tmp_path / "cache")
    assert again.returncode == 0, again.stderr
    assert "0 judge call(s)" in again.stdout and table_after(again.stdout, "## Quality with a judge") == rows


def test_a_judge_that_cannot_be_reached_is_one_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    run = write_true_false_run(tmp_path / "run", n=12)
    out = lcrag("route", "eval", run, "--judge", f"openai:judge@http://127.0.0.1:{port}", "--judge-sample", 4,
                cache=tmp_path / "cache")
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0, out.stderr
    assert "the judge could not be asked" in out.stderr and str(port) in out.stderr  # asked before the table
