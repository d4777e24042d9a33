"""Recorded answers for the replay reader (``replay:SOURCE``) on two small documents, and a word-level tokenizer.json
needing no model: shared by the replay-reader tests of the unit tier (in this process) and the integration tier
(through `lcrag eval` in its own process)."""

import json
from pathlib import Path

import pytest

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


