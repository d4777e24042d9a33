import gzip
import json

import pytest

from lcrag.errors import InputError
from lcrag.evaluation.datasets import load_dataset
from lcrag.evaluation.prompts import LONGBENCH, prompts_for, with_unanswerable


def write_jsonl(path, records):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def test_longbench_parses_literal_answers(tmp_path):
    folder = tmp_path / "longbench"
    folder.mkdir()
    path = write_jsonl(folder / "hotpotqa.jsonl", [
        {"input": "Q1?", "context": "C1", "answers": "['yes', 'Yes.']", "dataset": "hotpotqa", "_id": "a"},
        {"input": "Q2?", "context": "C2", "answers": ["no"], "dataset": "qmsum", "_id": "b"},
    ])
    items = load_dataset(path).items
    assert [i.answers for i in items] == [["yes", "Yes."], ["no"]]
    assert [(i.task, i.metric, i.dataset) for i in items] == [("hotpotqa", "qa_f1", "longbench/hotpotqa"), ("qmsum", "rouge_l", "longbench/qmsum")]


def test_infinitebench_choice_label_and_task_from_name(tmp_path):
    path = write_jsonl(tmp_path / "longbook_choice_eng.jsonl", [
        {"id": 1, "input": "Who?", "context": "book", "answer": ["Bob"], "options": ["Al", "Bob", "Cy", "Di"]}])
    item = load_dataset(path).items[0]
    assert (item.task, item.metric, item.answers) == ("infbench_mc", "infbench_choice", ["Bob", "B"])
    prompts, max_tokens = prompts_for(item)
    assert "A. Al\nB. Bob" in prompts.lc and max_tokens == 40
    assert "unanswerable" in prompts.self_route


def test_leval_one_document_many_questions(tmp_path):
    folder = tmp_path / "leval"
    folder.mkdir()
    path = write_jsonl(folder / "quality.jsonl", [{"input": "DOC", "instructions": "['Q1 (A) x (B) y', 'Q2']",
                                                   "outputs": "['(B) y', 'A']", "evaluation": "exam", "source": "s"}])
    items = load_dataset(path).items
    assert [(i.question, i.answers, i.metric, i.context) for i in items] == [
        ("Q1 (A) x (B) y", ["(B) y"], "choice_acc", "DOC"), ("Q2", ["A"], "choice_acc", "DOC")]


def test_hotpotqa_distractor_gz(tmp_path):
    path = tmp_path / "hotpot_dev_distractor.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({"_id": "x", "question": "Q?", "answer": "A", "type": "bridge",
                            "supporting_facts": [["T1", 0]], "context": [["T1", ["S1. ", "S2."]], ["T2", ["S3."]]]}) + "\n")
    item = load_dataset(path).items[0]
    assert item.context == "Passage 1:\nT1\nS1. S2.\nPassage 2:\nT2\nS3."
    assert item.meta["supporting_titles"] == ["T1"]


def test_generic_with_document_path(tmp_path):
    (tmp_path / "doc.txt").write_text("The document.")
    path = write_jsonl(tmp_path / "mine.jsonl", [{"question": "Q?", "answers": "A", "document": "doc.txt"}])
    item = load_dataset(path).items[0]
    assert (item.context, item.answers) == ("The document.", ["A"])


def test_malformed_records_name_file_and_line_or_are_skipped(tmp_path):
    path = write_jsonl(tmp_path / "mine.jsonl", [
        {"question": "Q?", "answers": ["A"], "context": "C"}, "{broken", {"question": "no answers", "context": "C"},
        {"question": "Q?", "answers": ["A"], "context": "C"}])
    with pytest.raises(InputError, match=r"mine.jsonl:2: invalid JSON"):
        load_dataset(path)
    report = load_dataset(path, skip_bad=True)
    assert len(report.items) == 2 and report.skipped == 2
    assert "mine.jsonl:3: missing field(s) 'answers'" in report.errors[1]


def test_limit_applies_per_file(tmp_path):
    for name in ("a.jsonl", "b.jsonl"):
        write_jsonl(tmp_path / name, [{"question": f"Q{i}", "answers": ["x"], "context": "c"} for i in range(5)])
    assert len(load_dataset(tmp_path, limit=2).items) == 4


def test_self_route_variant_follows_appendix_c():
    hotpot = with_unanswerable(LONGBENCH["hotpotqa"])
    assert hotpot.count('write "unanswerable"') == 2  # in both instruction blocks, as in the paper's Table 5
    assert with_unanswerable(LONGBENCH["qasper"]) == LONGBENCH["qasper"]  # Qasper already offers it
