"""Issue 44: a resumed `lcrag eval --router lara --lc-share 0.3` routes as an unbroken run, wherever it was killed.

The run replays recorded answers (`--llm replay:`, no model), so every route is the real router's on lcrag's own
retrieval. Some LC answers are not recorded: a question routed to LC there is counted in the share ledger and gets no
row, so every resume asks it again; once more than the ledger's window of questions had followed it (800, as after
LaRA's 887 32K questions) the resume counted it a second time and every later route could differ. The runs are real
`lcrag eval` processes killed by SIGTERM and SIGKILL after question k, and stopped (SIGSTOP) at random until one is
caught between writing a route to the ledger and writing its row, then killed there; each is resumed and compared
with the unbroken run: every route, and the ledger file itself.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from lcrag.strategies.routing.share_control import WINDOW, question_key
from lcrag.core.types import Document

pytestmark = pytest.mark.slow

DOCUMENTS = 8
PER_DOCUMENT = 125  # 1,000 questions: more than WINDOW (800) follow the first unanswered ones
WORDS = ("river", "stone", "field", "cloud", "lamp", "harbour", "ledger", "window", "market", "garden")
# rows written when killed: more than WINDOW routes after the first unanswered question routed to LC (the 106th)
KILLED_AFTER = (920, 940, 975)
DECLINES = ("The text does not say.", "I cannot find this in the chunks.", "unanswerable")


def write_recordings(root) -> tuple:
    """A recordings JSONL (the dataset and the replayed reader at once) and a word-level tokenizer.json."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    rng = random.Random(44)
    records, texts = [], {}
    for d in range(DOCUMENTS):
        facts = [f"The code for vault {d}-{q} is K{d}{q * 7}." for q in range(PER_DOCUMENT)]
        parts = [" ".join(rng.choice(WORDS) for _ in range(30)) + ". " + fact for fact in facts]
        texts[d] = "\n".join(parts)
        (root / f"doc{d}.txt").write_text(texts[d], encoding="utf-8")
    for d in range(DOCUMENTS):
        for q in range(PER_DOCUMENT):
            question = f"What is the code for vault {d}-{q}?"
            answer = f"K{d}{q * 7}"
            rag = rng.choice(DECLINES) if rng.random() < 0.35 else (answer if rng.random() < 0.7 else "K0")
            lc = None if rng.random() < 0.03 else answer  # not recorded: a question routed to LC gets no row
            for mode, prediction in (("lc", lc), ("rag", rag)):
                records.append({"question": question, "document": f"doc{d}.txt", "mode": mode,
                                "prediction": prediction, "answer": answer, "model": "recorded"})
    logs = root / "logs.jsonl"
    logs.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    vocabulary = sorted({w for text in texts.values() for w in text.split()} | set(" ".join(DECLINES).split()))
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", *vocabulary])}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(root / "tokenizer.json"))
    return logs, root / "tokenizer.json"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root = tmp_path_factory.mktemp("recorded")
    logs, tokenizer = write_recordings(root)
    unbroken = root / "unbroken"
    result = subprocess.run(command(logs, tokenizer, unbroken), capture_output=True, text=True, timeout=600,
                            env=environment(root))
    assert result.returncode == 0, result.stderr
    return logs, tokenizer, unbroken


def environment(root) -> dict:
    return {**os.environ, "LCRAG_CACHE_DIR": str(root / "machine-cache"), "COLUMNS": "400"}


def command(logs, tokenizer, out) -> list[str]:
    return [sys.executable, "-m", "lcrag.cli", "eval", "--dataset", str(logs), "--llm", f"replay:{logs}",
            "--tokenizer", str(tokenizer), "--strategies", "self-route", "--router", "lara", "--lc-share", "0.3",
            "--chunking", "words:40", "-k", "5", "--out", str(out)]


def rows_of(out) -> list[dict]:
    path = out / "rows.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def rows_written(out) -> int:
    path = out / "rows.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def ledger_of(out) -> dict:
    (path,) = (out / "cache" / "routing-shares").glob("*.json")
    return json.loads(path.read_text())


def routes(out) -> dict:
    """Every question's route and routing (without `repeated`: the one in flight at a kill says it was re-asked)."""
    return {r["item_id"]: (r["route"], {k: v for k, v in r["routing"].items() if k != "repeated"})
            for r in rows_of(out)}


def kill_after(proc, out, k: int, how: signal.Signals) -> None:
    """Send `how` once the run has written k rows (it is then somewhere in question k + 1 or a little later)."""
    while rows_written(out) < k:
        assert proc.poll() is None, "the run ended before it could be killed"
        time.sleep(0.002)
    proc.send_signal(how)
    proc.wait(60)


def kill_between_route_and_row(proc, out, k: int, rng: random.Random) -> None:
    """After k rows, stop the run at random moments until it is caught with a route written to the ledger and its
    row not yet written (the ledger counted more questions than there are rows and pinned routes), then SIGKILL."""
    while rows_written(out) < k:
        assert proc.poll() is None
        time.sleep(0.002)
    for _ in range(2000):
        time.sleep(rng.uniform(0, 0.004))
        proc.send_signal(signal.SIGSTOP)
        try:
            ledger = ledger_of(out)
            if ledger["questions"] > rows_written(out) + len(ledger["pinned"]):
                proc.send_signal(signal.SIGKILL)
                proc.wait(60)
                return
        except (ValueError, OSError):  # the ledger not written yet
            pass
        proc.send_signal(signal.SIGCONT)
        assert proc.poll() is None, "the run ended before it was caught between a route and its row"
    pytest.fail("never caught between a route and its row")


def test_the_unbroken_run_counts_each_unanswered_question_once(recorded):
    """The scenario of the issue: questions routed to LC, never answered, more than WINDOW questions before the
    kill points below."""
    from lcrag.evaluation.datasets import load_dataset

    logs, _, unbroken = recorded
    rows, ledger = rows_of(unbroken), ledger_of(unbroken)
    assert ledger["questions"] == len(rows) + len(ledger["pinned"]) == DOCUMENTS * PER_DOCUMENT  # a row or a pin
    position = {f"questions:0.3\n{question_key(i.question, Document(i.context).content_hash)}": n
                for n, i in enumerate(load_dataset(logs).items)}  # every question routed, in the dataset's order
    pinned = sorted(position[key] for key, _, _ in ledger["pinned"])
    assert len(pinned) >= 3 and pinned[0] < KILLED_AFTER[0] - WINDOW


@pytest.mark.parametrize("k, how", [(KILLED_AFTER[0], signal.SIGTERM), (KILLED_AFTER[2], signal.SIGKILL)])
def test_killed_after_question_k_and_resumed_it_routes_as_the_unbroken_run(recorded, tmp_path, k, how):
    logs, tokenizer, unbroken = recorded
    out = tmp_path / "killed"
    proc = subprocess.Popen(command(logs, tokenizer, out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=environment(tmp_path))
    kill_after(proc, out, k, how)
    assert proc.returncode == -how
    assert len(rows_of(out)) < len(rows_of(unbroken))
    resumed = subprocess.run(command(logs, tokenizer, out), capture_output=True, text=True, timeout=600,
                             env=environment(tmp_path))
    assert resumed.returncode == 0, resumed.stderr
    assert routes(out) == routes(unbroken)
    assert ledger_of(out) == ledger_of(unbroken)  # count, threshold's window, realized counts, routes, pins


@pytest.mark.parametrize("k", [KILLED_AFTER[1]])
def test_killed_between_a_route_and_its_row_it_resumes_as_the_unbroken_run(recorded, tmp_path, k):
    logs, tokenizer, unbroken = recorded
    out = tmp_path / "killed"
    proc = subprocess.Popen(command(logs, tokenizer, out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=environment(tmp_path))
    kill_between_route_and_row(proc, out, k, random.Random(k))
    ledger = ledger_of(out)
    assert ledger["questions"] == len(rows_of(out)) + len(ledger["pinned"]) + 1  # one route without its row
    for _ in range(2):  # resumed; then run again once complete (the unanswered questions are asked again)
        resumed = subprocess.run(command(logs, tokenizer, out), capture_output=True, text=True, timeout=600,
                                 env=environment(tmp_path))
        assert resumed.returncode == 0, resumed.stderr
        assert routes(out) == routes(unbroken)
        assert ledger_of(out) == ledger_of(unbroken)
