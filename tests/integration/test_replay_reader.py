"""The replay reader (``replay:SOURCE``): recorded answers by (question, mode) on their document, through a real
evaluation run; the checks on recordings; the ``recordings`` dataset format; the token-count cache."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lcrag.evaluation.datasets import load_dataset
from lcrag.evaluation.runner import EvalRunner, expand_configs
from lcrag.pipeline.pipeline import Settings
from lcrag.readers.call_context import Asking
from lcrag.readers.base import GenerationParams
from lcrag.readers.replay import Recordings, ReplayReader, TokenizerStandIn
from tests.conftest import WhitespaceTokenizer

FILLER = " ".join(f"Line {i} of the annual notes says nothing of interest." for i in range(40))
DOCS = {
    "docs/alpha.txt": f"The vault code of Alpha is K1. {FILLER} Alpha's founder is Ada.",
    "docs/beta.txt": f"The vault code of Beta is K2. {FILLER} Beta's founder is Bob.",
}
SHARED = "What is the vault code?"  # asked on both documents
RECORDS = [
    {"question": SHARED, "document": "docs/alpha.txt", "mode": "lc", "prediction": "K1 (alpha, lc)", "answer": "K1",
     "model": "big-model"},
    {"question": SHARED, "document": "docs/alpha.txt", "mode": "rag", "prediction": "K1 (alpha, rag)",
     "model": "big-model"},
    {"question": SHARED, "document": "docs/beta.txt", "mode": "lc", "prediction": "K2 (beta, lc)", "answers": ["K2"],
     "model": "big-model"},
    {"question": SHARED, "document": "docs/beta.txt", "mode": "rag", "prediction": "K2 (beta, rag)",
     "model": "big-model"},
    {"question": "Who founded Alpha?", "document": "docs/alpha.txt", "mode": "lc", "prediction": "Ada", "answer": "Ada",
     "model": "big-model"},
    {"question": "Who founded Alpha?", "document": "docs/alpha.txt", "mode": "rag", "prediction": "unanswerable",
     "model": "big-model"},
]


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def logs(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("LCRAG_CACHE_DIR", str(tmp_path / "cache"))
    for name, text in DOCS.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    return write_jsonl(tmp_path / "logs.jsonl", RECORDS)


@pytest.fixture
def tokenizer_json(tmp_path) -> Path:
    """A word-level tokenizer.json (no model needed): every word and punctuation mark is one token."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = sorted({w for text in [*DOCS.values(), *(r["prediction"] for r in RECORDS)] for w in text.split()})
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def replay(source: Path, counts: Path | None = None) -> ReplayReader:
    return ReplayReader(Recordings.load(source), TokenizerStandIn(WhitespaceTokenizer(), "whitespace"), counts)


def run_eval(logs: Path, out: Path, reader) -> list[dict]:
    items = load_dataset(logs).items
    runner = EvalRunner(items, expand_configs(["lc", "self-route"], ["bm25"], [2], []), out,
                        Settings(chunking="words:20"), reader=reader, dataset_path=logs)
    return runner.run()


# -- a real evaluation run ------------------------------------------------------------------------------------------


def test_an_unrecorded_question_is_skipped_counted_and_named_by_lcrag_eval(logs, tokenizer_json, tmp_path):
    """No model can be asked instead, so the question is left out of the run — never a row scored 0 — and the run
    says how many and which."""
    dataset = write_jsonl(tmp_path / "questions.jsonl", [
        {"id": "q1", "question": "Who founded Beta?", "answers": ["Bob"], "document": "docs/beta.txt"}])
    result = subprocess.run(
        [sys.executable, "-m", "lcrag.cli", "eval", "--dataset", str(dataset), "--llm", f"replay:{logs}",
         "--tokenizer", str(tokenizer_json), "--strategies", "lc", "--out", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=300, env={**__import__("os").environ, "COLUMNS": "400"})
    assert result.returncode == 0, result.stderr
    assert "skipped 1 (question, strategy) pair(s) the reader holds no answer for" in result.stderr
    assert f"replay: no recording of the question 'Who founded Beta?' in {logs}" in result.stderr
    rows = tmp_path / "run" / "rows.jsonl"
    assert not rows.exists() or not rows.read_text().strip()  # no row, so no silent zero


# -- matching a call to its recording -------------------------------------------------------------------------------
def answer(reader, question, document, route):
    """An answering call for ``question`` on ``route``, as a strategy makes one: what it is for in its parameters."""
    params = GenerationParams(asking=Asking(question, document, route))
    return reader.complete([{"role": "user", "content": f"{question}"}], params).text


# -- checking recordings --------------------------------------------------------------------------------------------


# -- a LaRA predictions folder --------------------------------------------------------------------------------------
def lara(tmp_path) -> Path:
    """LARA_ROOT/datasets/{32k,128k}/book/ and predictions/m1/, one question asked on both lengths."""
    root = tmp_path / "lara"
    for length, text in (("32k", DOCS["docs/alpha.txt"]), ("128k", DOCS["docs/beta.txt"])):
        (root / "datasets" / length / "book").mkdir(parents=True)
        (root / "datasets" / length / "book" / "Book.txt").write_text(text, encoding="utf-8")
    preds = root / "predictions" / "m1"
    preds.mkdir(parents=True)
    for kind in ("full", "rag"):
        for length in ("32k", "128k"):
            records = [{"type": "novel", "level": "location", "file": "Book.txt", "context_order": 0,
                        "question": SHARED, "prediction": f"{kind} {length}", "ground_truth": "K"},
                       {"file": "Book.txt", "question": "Failed?", "prediction": False, "ground_truth": "x"}]
            if length == "32k":
                records += [{"file": "Gone.txt", "question": "Missing?", "prediction": "y", "ground_truth": "x"}]
            if length == "128k":
                records += [{"file": "Book.txt", "question": "Twice?", "prediction": "one", "ground_truth": "a"},
                            {"file": "Book.txt", "question": "Twice?", "prediction": "two", "ground_truth": "b"}]
            write_jsonl(preds / f"{kind}_preds_other-name_{length}_book_location.jsonl", records)
    return preds


# -- the recordings dataset format ----------------------------------------------------------------------------------


# -- token counts ---------------------------------------------------------------------------------------------------
