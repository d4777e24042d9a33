"""Kill `lcrag eval` at fixed moments, run it again: no finished LLM call repeated, no row lost or doubled, same
scores.

The reader is a deterministic OpenAI-compatible stub on loopback (tests/reader_servers.py) that records the requests
it serves, so the test sees every real call; the runner, cache, CLI and HTTP client are the real ones. The kill
moment is deterministic: the stub holds the N-th completion request unanswered, and the process is killed while it
waits on it (optionally with a torn row appended, as a kill in the middle of a write leaves one).
"""

import json
import random
import signal
import subprocess
import sys

import pytest

from reader_servers import Stub, closest_line


@pytest.fixture
def dataset(tmp_path):
    rng = random.Random(5)
    path = tmp_path / "data.jsonl"
    with path.open("w") as f:
        for i in range(8):
            filler = " ".join(rng.choice(["river", "stone", "field", "cloud", "lamp"]) for _ in range(40))
            context = f"{filler}.\nThe code for vault {i} is K{i}{i * 7}.\n{filler}."
            f.write(json.dumps({"id": f"q{i}", "question": f"What is the code for vault {i}?", "answers": [f"K{i}{i * 7}"],
                                "context": context}) + "\n")
    return path


def run_eval(dataset, out, url, wait=True):
    cmd = [sys.executable, "-m", "lcrag.cli", "eval", "--dataset", str(dataset), "--out", str(out),
           "--strategies", "lc,rag,self-route,op-rag", "-k", "1,2", "--chunking", "words:20",
           "--llm", f"openai:stub@{url}/v1"]
    if wait:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def scores(out):
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    return rows, {(r["item_id"], r["config"]): (r["prediction"], r["score"]) for r in rows}


@pytest.mark.parametrize("kill_at_call, torn_write", [(1, False), (9, True), (23, False), (23, True)])
def test_kill_and_resume(tmp_path, dataset, kill_at_call, torn_write):
    stub = Stub(answer=closest_line)
    url = stub.url.removesuffix("/v1")
    try:
        clean = run_eval(dataset, tmp_path / "clean", url)
        assert clean.returncode == 0, clean.stderr
        clean_calls = len(stub.chats)
        clean_rows, clean_scores = scores(tmp_path / "clean")

        stub.chats.clear()
        stub.hold_at = kill_at_call
        proc = run_eval(dataset, tmp_path / "killed", url, wait=False)
        assert stub.holding.wait(120), "the run never reached the call to kill it at"
        proc.send_signal(signal.SIGKILL)  # killed while waiting on call `kill_at_call`
        proc.wait()
        rows_file = tmp_path / "killed" / "rows.jsonl"
        done_before = rows_file.read_text().count("\n") if rows_file.exists() else 0
        assert done_before < len(clean_rows), "the run finished before it could be killed"
        if torn_write:  # what a kill in the middle of writing the next row leaves
            next_row = (tmp_path / "clean" / "rows.jsonl").read_text().splitlines()[done_before]
            with rows_file.open("a") as f:
                f.write(next_row[: len(next_row) // 2])

        resumed = run_eval(dataset, tmp_path / "killed", url)
        assert resumed.returncode == 0, resumed.stderr
        assert ("torn last line" in resumed.stderr) == torn_write
    finally:
        stub.release.set()
        stub.kill()

    resumed_rows, resumed_scores = scores(tmp_path / "killed")
    # no row lost or written twice
    assert len(resumed_rows) == len(clean_rows) == 8 * 7
    assert len(resumed_scores) == len(resumed_rows)
    # No finished LLM call repeated: the runner's log of completions it received has no key twice. The server may
    # have seen one request more than a clean run: the one in flight when the process was killed, never answered.
    log = (tmp_path / "killed" / "llm_calls.log").read_text().split()
    assert len(log) == len(set(log)) <= clean_calls
    assert len(set(stub.chats)) == clean_calls
    assert len(stub.chats) == clean_calls + 1  # the held request, asked again on resume
    # identical final scores
    assert resumed_scores == clean_scores


def routed(out):
    rows, _ = scores(out)
    return {r["item_id"]: (r["route"], r["routing"]) for r in rows if r["strategy"] == "self-route"}


def test_a_resumed_run_routes_and_counts_as_an_unbroken_one(tmp_path, dataset):
    """`--router lara --lc-share`: the question in flight at the kill was routed and counted in the run's ledger;
    asked again on resume it keeps its route and is not counted twice, so every later question sees the same
    realized share and threshold as in an unbroken run."""
    stub = Stub(answer=closest_line)
    url = stub.url.removesuffix("/v1")
    extra = ["--strategies", "self-route", "-k", "1", "--router", "lara", "--lc-share", "0.5"]

    def run(out, wait=True):
        cmd = [sys.executable, "-m", "lcrag.cli", "eval", "--dataset", str(dataset), "--out", str(out), *extra,
               "--chunking", "words:20", "--llm", f"openai:stub@{url}/v1"]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300) if wait else \
            subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    try:
        assert run(tmp_path / "clean").returncode == 0
        clean = routed(tmp_path / "clean")
        first_lc = sorted(clean).index(next(q for q in sorted(clean) if clean[q][0] == "lc"))
        # kill while the first question routed to LC waits on its LC call (RAG calls before it: one per question)
        stub.chats.clear()
        stub.hold_at = first_lc + 2
        proc = run(tmp_path / "killed", wait=False)
        assert stub.holding.wait(120), "the run never reached its LC call"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        resumed = run(tmp_path / "killed")
        assert resumed.returncode == 0, resumed.stderr
    finally:
        stub.release.set()
        stub.kill()
    again = routed(tmp_path / "killed")
    in_flight = sorted(clean)[first_lc]
    assert again[in_flight][1].pop("repeated") is True  # routed before the kill: its first route, uncounted
    assert again == clean and [r["questions"] for _, r in (clean[q] for q in sorted(clean))] == list(range(1, 9))


def test_second_eval_on_a_running_run_is_refused_naming_the_first(tmp_path, dataset):
    stub = Stub(answer=closest_line, hold_at=3)
    url = stub.url.removesuffix("/v1")
    out = tmp_path / "run"
    try:
        first = run_eval(dataset, out, url, wait=False)
        assert stub.holding.wait(120), "the first run never started"
        second = run_eval(dataset, out, url)  # while the first waits on its third call
        stub.release.set()
        assert first.wait(300) == 0, first.stderr.read()
    finally:
        stub.release.set()
        stub.kill()
    assert second.returncode == 2 and second.stderr.count("\n") == 1
    assert f"is in use by another lcrag eval (pid {first.pid} on " in second.stderr
    rows, keyed = scores(out)
    assert len(rows) == len(keyed) == 8 * 7  # no duplicate row
    assert len(stub.chats) == len(set(stub.chats))  # no repeated LLM call


def test_closed_book_filter_marks_and_drops(tmp_path, dataset):
    with dataset.open("a") as f:
        f.write(json.dumps({"id": "easy", "question": "Repeat the word banana", "answers": ["banana"],
                            "context": "Nothing relevant here."}) + "\n")
    stub = Stub(answer=closest_line)
    url = stub.url.removesuffix("/v1")
    try:
        base = [sys.executable, "-m", "lcrag.cli", "eval", "--dataset", str(dataset), "--strategies", "rag",
                "--llm", f"openai:stub@{url}/v1", "--chunking", "words:20"]
        marked = subprocess.run([*base, "--out", str(tmp_path / "mark"), "--filter-closed-book"], capture_output=True, text=True)
        dropped = subprocess.run([*base, "--out", str(tmp_path / "drop"), "--drop-closed-book"], capture_output=True, text=True)
    finally:
        stub.kill()
    assert marked.returncode == 0 and dropped.returncode == 0, marked.stderr + dropped.stderr
    rows, _ = scores(tmp_path / "mark")
    rag = {r["item_id"]: r for r in rows if r["strategy"] == "rag"}
    assert rag["data/easy"]["closed_book_correct"] is True and rag["data/q0"]["closed_book_correct"] is False  # ids: <file>/<id>
    assert any(r["strategy"] == "closed-book" for r in rows)
    dropped_rows, _ = scores(tmp_path / "drop")
    assert "data/easy" not in {r["item_id"] for r in dropped_rows if r["strategy"] == "rag"}
    assert len([r for r in dropped_rows if r["strategy"] == "rag"]) == 8


def test_concurrent_run_and_extension_with_a_larger_limit(tmp_path, dataset):
    stub = Stub(answer=closest_line)
    url = stub.url.removesuffix("/v1")
    base = [sys.executable, "-m", "lcrag.cli", "eval", "--dataset", str(dataset), "--out", str(tmp_path / "run"),
            "--strategies", "lc,rag", "--llm", f"openai:stub@{url}/v1", "--chunking", "words:20", "--concurrency", "4"]
    try:
        first = subprocess.run([*base, "--limit", "3"], capture_output=True, text=True)
        calls_first = len(stub.chats)
        second = subprocess.run([*base, "--limit", "8"], capture_output=True, text=True)
        other = subprocess.run([*base, "--limit", "8", "--strategies", "lc"], capture_output=True, text=True)
    finally:
        stub.kill()
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    rows, keyed = scores(tmp_path / "run")
    assert len(rows) == len(keyed) == 8 * 2
    assert calls_first == 3 * 2 and len(stub.chats) == 8 * 2  # the extension asked only the new questions
    assert other.returncode == 2 and "holds a different run (configs differ)" in other.stderr
