"""Failure-reason parsing and tables, LC-only/RAG-only analysis, the retriever table, PassKey data and its metric."""

from __future__ import annotations

import json

import pytest

from lcrag.evaluation.analysis import (
    FAILURE_PROMPT,
    classify_failures,
    exclusive_questions,
    failure_table,
    few_shot_block,
    parse_reason,
    question_words,
    routed_to_lc,
    tfidf_words,
)
from lcrag.evaluation.datasets import EvalItem, load_dataset
from lcrag.evaluation.metrics import METRICS
from lcrag.evaluation.report import is_correct, retriever_table
from lcrag.documents.synthetic import PASSKEY_QUESTIONS, passkey_records


def row(item, strategy, em, f1, dataset="d", question="Who wrote it?", retriever="bm25", metric="qa_f1", score=None,
        **extra):
    config = strategy if strategy == "lc" else f"{strategy}|{retriever}|k5"
    return {"item_id": item, "strategy": strategy, "config": config, "retriever": retriever, "em": em, "f1": f1,
            "dataset": dataset, "question": question, "question_type": question.split()[0].lower(),
            "metric": metric, "score": f1 if score is None else score, "prompt_tokens": 100, **extra}


@pytest.mark.parametrize("output, reason", [
    ('{"answerable": false, "answer": null, "reason": "A"}', "multi-step"),
    ('{"reason": "D", "answerable": false}', "implicit"),
    ("Answer: {\"answerable\": true, \"answer\": \"1932\"}", "answerable"),
    ("The reason is C. because it is long", "long and complex"),
    ("I do not know", "unparsed"),
])
def test_parse_reason(output, reason):
    assert parse_reason(output) == reason


def test_failure_prompt_is_the_papers_table_8():
    assert FAILURE_PROMPT.startswith("You are given some text chunks from an article, and a question.")
    assert "E. Others." in FAILURE_PROMPT and FAILURE_PROMPT.endswith("Question: {input}\nAnswer:")
    block = few_shot_block()
    assert block.count("Question:") == 5 and '"reason": "A"' in block and '"answerable": true' in block


def test_classify_failures_writes_as_it_goes_and_resumes(tmp_path, scripted_reader):
    reader = scripted_reader(lambda m: '{"answerable": false, "reason": "B"}')
    items = {f"q{i}": EvalItem(f"q{i}", "qmsum", f"What did the group think {i}?", ["x"], "ctx") for i in range(3)}
    rows = [{"config": "self-route|bm25|k5", "item_id": f"q{i}", "dataset": "qmsum", "strategy": "self-route",
             "route": "lc"} for i in range(3)]
    out = tmp_path / "f.jsonl"
    first = classify_failures(rows[:2], items, lambda r, i: "some chunks", reader, out)
    assert [r["reason"] for r in first] == ["general", "general"] and len(reader.calls) == 2
    prompt = reader.calls[0][0]["content"]
    assert "Text: some chunks\nQuestion: What did the group think 0?\nAnswer:" in prompt
    out.write_text(out.read_text() + '{"key": "cut')  # a line cut by a kill
    all_three = classify_failures(rows, items, lambda r, i: "some chunks", reader, out)
    assert len(reader.calls) == 3 and len(all_three) == 3
    header, body = failure_table(all_three)
    assert header[:3] == ["dataset", "n", "multi-step"] and body[-1][:2] == ["all", 3]
    assert body[-1][header.index("general")] == 3
    assert routed_to_lc(rows + [dict(rows[0], route="rag")]) == rows


def test_exclusive_questions_strict_and_loose():
    rows = [row("a", "lc", True, 1.0), row("a", "rag", False, 0.2),
            row("b", "lc", False, 0.1), row("b", "rag", True, 1.0, question="Where is it?"),
            row("c", "lc", False, 0.1), row("c", "rag", False, 0.5, question="How is it?"),
            row("d", "lc", False, 0.0, metric="choice_acc", score=1.0), row("d", "rag", False, 0.0, metric="choice_acc", score=0.0)]
    strict = exclusive_questions(rows)
    assert [r["item_id"] for r in strict["LC only"]] == ["a", "d"]  # d: a right letter is correct
    assert [r["item_id"] for r in strict["RAG only"]] == ["b"]
    loose = exclusive_questions(rows, loose=True)
    assert [r["item_id"] for r in loose["RAG better"]] == ["b", "c"]
    header, body = question_words(strict)
    assert header == ["question word", "LC only", "RAG only"] and ["where", 0, 1] in body


def test_tfidf_words_rank_each_sides_words():
    sides = {"LC only": [row("a", "rag", 0, 0, dataset="x", question="Which song did the singer record?"),
                         row("b", "rag", 0, 0, dataset="y", question="Which film features the song?")],
             "RAG only": [row("c", "rag", 0, 0, dataset="x", question="Which dataset does the model use?")]}
    header, body = tfidf_words(sides, top=20)
    words = {r[0]: r for r in body}
    assert "song" in words and float(words["song"][1]) > 0 and float(words["song"][2]) == 0
    assert "which" not in words and "the" not in words  # stop words removed
    assert float(words["dataset"][2]) > 0


def test_retriever_table_counts_like_table_5():
    rows = [row("a", "lc", True, 1.0), row("b", "lc", False, 0.1), row("c", "lc", False, 0.3)]
    cost = {"document": "h1", "calls": 4, "prompt_tokens": 1000, "completion_tokens": 200, "seconds": 3.0}
    for retriever, ems, f1s in [("bm25", (False, True, False), (0.0, 1.0, 0.1)),
                                ("raptor", (True, True, False), (1.0, 1.0, 0.6))]:
        for item, em, f1 in zip("abc", ems, f1s):
            extra = {"index_cost": cost, "index_seconds": 2.0} if retriever == "raptor" else {"index_seconds": 0.1}
            rows.append(row(item, "rag", em, f1, retriever=retriever, **extra))
    header, body = retriever_table(rows)
    lines = {b[0]: dict(zip(header, b)) for b in body}
    assert lines["bm25 · k5"]["correct (%)"] == "1 (33.3)" and lines["bm25 · k5"]["RAG only"] == 1
    assert lines["bm25 · k5"]["RAG better"] == 1 and lines["bm25 · k5"]["LC correct"] == 1
    assert lines["raptor · k5"]["correct (%)"] == "2 (66.7)" and lines["raptor · k5"]["RAG better"] == 2
    assert lines["raptor · k5"]["summary calls"] == 4  # one document: counted once, not per question
    assert lines["raptor · k5"]["summary tokens (prompt + completion)"] == "1,000 + 200"


def test_is_correct_uses_the_task_metric_for_choices():
    assert is_correct({"em": False, "metric": "choice_acc", "score": 1.0})
    assert not is_correct({"em": False, "metric": "qa_f1", "score": 0.99})


# -- PassKey -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("prediction, label, expected", [
    ("The first passkey is larger.", "first", 1.0), ("Second.", "second", 1.0),
    ("The second one, not the first", "first", 0.0), ("I cannot tell", "first", 0.0)])
def test_first_second_metric(prediction, label, expected):
    assert METRICS["first_second"].score(prediction, [label]) == expected


def test_passkey_records_load_as_an_eval_dataset(tmp_path, whitespace_tokenizer):
    records = list(passkey_records(whitespace_tokenizer, [200, 400], [0.0, 0.5, 1.0], seed=3))
    assert len(records) == 3 * 2 * 3 and {r["question"] for r in records} == set(PASSKEY_QUESTIONS.values())
    for r in records:
        n = len(whitespace_tokenizer.encode(r["context"]))
        assert abs(n - r["meta"]["length"]) <= 10  # half a noise block
    first = next(r for r in records if r["id"] == "passkey-200-d0")
    assert first["context"].startswith(f"The pass key is {first['answers'][0]}.")
    last = next(r for r in records if r["id"] == "passkey-200-d1")
    assert last["context"].endswith(f"{last['answers'][0]} is the pass key.")
    path = tmp_path / "synthetic_passkey.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    items = load_dataset(path).items
    assert len(items) == 18 and {i.task for i in items} == {"passkey"}
    assert {i.metric for i in items} == {"passkey", "first_second"}
    assert items[0].meta == {"variant": "passkey", "length": 200, "depth": 0.0}


def test_generic_dataset_rejects_an_unknown_metric(tmp_path):
    from lcrag.core.errors import InputError

    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"question": "q", "answers": ["a"], "context": "c", "metric": "bleu"}) + "\n")
    with pytest.raises(InputError, match="q.jsonl:1: unknown metric 'bleu'"):
        load_dataset(path)


def test_run_config_dict_leaves_out_unset_optional_fields():
    from lcrag.evaluation.runner import RunConfig

    # Run directories written before `unit` existed hold exactly this shape; they must still resume.
    assert RunConfig("rag", "bm25", 5).to_dict() == {"strategy": "rag", "retriever": "bm25", "k": 5, "budget": None,
                                                     "id": "rag|bm25|k5"}
    assert RunConfig("longrag", "dense", 1, unit="grouped").to_dict()["unit"] == "grouped"
