"""LaRA's locked test set (issue 44): the shipped split's parts, the refusal to fit on anything but the training
part, and benchmarks/route_lara.py fitting on the training part alone and scoring the test part only when asked."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from lcrag.core.errors import InputError
from lcrag.evaluation.locked_split import LockedSplit

pytestmark = pytest.mark.unit

BENCHMARKS = Path(__file__).parents[3] / "benchmarks"
SPLIT = LockedSplit.load()
def test_the_shipped_split_keeps_readers_and_documents_apart():
    assert SPLIT.test_readers == {"gpt-4o-mini", "llama-3.1-8b", "mistral-nemo"}
    assert len(SPLIT.train_readers) == 7 and not SPLIT.test_readers & SPLIT.train_readers
    assert not SPLIT.test_documents & SPLIT.train_documents
    cells = Counter((item.split("/")[0], doc in SPLIT.test_documents) for item, doc in SPLIT.document_of.items())
    for cell in {c for c, _ in cells}:  # every (length, type, task) keeps questions on both sides
        assert cells[(cell, True)] and cells[(cell, False)], cell
    test_doc, train_doc = sorted(SPLIT.test_documents)[0], sorted(SPLIT.train_documents)[0]
    assert SPLIT.part("mistral-nemo", test_doc) == "test" and SPLIT.part("gpt-4o", train_doc) == "train"
    assert SPLIT.part("mistral-nemo", train_doc) is None and SPLIT.part("gpt-4o", test_doc) is None
    assert SPLIT.part("some-new-reader", train_doc) is None and SPLIT.part_of_item("gpt-4o", "nowhere/1") is None


def test_a_malformed_split_is_one_line(tmp_path):
    path = tmp_path / "split.json"
    for text, message in (("{", "not JSON"), ('{"format": "x"}', "not a locked split"),
                          ('{"format": "lcrag-locked-split", "name": "s"}', "malformed")):
        path.write_text(text)
        with pytest.raises(InputError, match=message):
            LockedSplit.load(path)
    data = {"format": "lcrag-locked-split", "name": "s", "test_readers": ["a"], "train_readers": ["a"],
            "test_documents": {}, "train_documents": {}}
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match="in both parts"):
        LockedSplit.load(path)


def test_the_document_rule_takes_the_same_share_of_every_stratum_and_is_stable(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from lock_lara_split import pick_documents, pick_readers

    docs = {f"{length}/{kind}/d{i}": [] for length, kind, n in (("32k", "book", 15), ("128k", "paper", 31))
            for i in range(n)}
    chosen = pick_documents(docs)
    assert sum(d.startswith("32k/book/") for d in chosen) == 5 and sum(d.startswith("128k/paper/") for d in chosen) == 9
    more = dict(docs, **{f"32k/financial/d{i}": [] for i in range(30)})  # another stratum leaves these alone
    assert set(chosen) <= set(pick_documents(more))
    styles = {r: [i + 1.0] * 8 for i, r in enumerate(["a", "b", "c", "gpt-4o", "gpt-4o-0806"])}
    styles["gpt-4o-0806"] = [100] * 8  # far from every other style, but its twin would stay in training
    readers, _ = pick_readers(styles)
    assert "gpt-4o-0806" not in readers or "gpt-4o" in readers


def route_lara(monkeypatch, *args) -> int:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import route_lara as script

    script.TARGETS.clear()
    monkeypatch.setattr(sys, "argv", ["route_lara.py", *map(str, args)])
    return script.main()


def test_route_lara_refuses_a_bad_split_in_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "split.json").write_text("{")
    assert route_lara(monkeypatch, tmp_path, "--out", tmp_path / "o.md", "--split", tmp_path / "split.json") == 2
    assert capsys.readouterr().err.strip().startswith("route_lara.py: locked split")
