import gzip
import json
import os

import pytest

from lcrag.core.errors import DatasetError, InputError
from lcrag.evaluation.datasets import load_dataset
from lcrag.evaluation.metrics import METRICS
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


def test_self_route_variant_of_a_task_appendix_c_does_not_give():
    # Appendix C's own prompts are pinned in test_prompts_selfroute.py; TriviaQA gets the instruction where they put it
    trivia = with_unanswerable(LONGBENCH["triviaqa"])
    assert trivia.count('write "unanswerable"') == 1 and "other words. If the question cannot" in trivia
    assert with_unanswerable(LONGBENCH["qasper"]) == LONGBENCH["qasper"]  # a prompt that already offers it stays


# -- defect 4: unreadable files and badly typed records are one DatasetError naming file:line -------------------------
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"


@pytest.mark.parametrize("name, data, message", [
    ("random.jsonl", bytes(range(0x80, 0x100)) * 40, r"random.jsonl:1: not UTF-8 text \(byte 0x80"),
    ("image.jsonl", PNG, r"image.jsonl:1: not UTF-8 text \(byte 0x89 at column 1; binary data"),
    ("fake.jsonl.gz", b'{"question": "Q?"}\n', r"fake.jsonl.gz: not gzip data"),
    ("torn.jsonl.gz", gzip.compress(b'{"question": "Q?", "answers": ["a"], "context": "c"}\n' * 50)[:-20],
     r"torn.jsonl.gz: damaged gzip data"),
    ("latin.jsonl", (json.dumps({"question": "Q?", "answers": ["a"], "context": "c"}) + "\n"
                     + '{"question": "Caf\u00e9?", "answers": ["a"], "context": "c"}\n').encode("cp1252"),
     r"latin.jsonl:2: not UTF-8 text \(byte 0xe9 at column 18"),
    ("wide.jsonl", (json.dumps({"question": "Q?", "answers": ["a"], "context": "c"}) + "\n").encode("utf-16"),
     r"wide.jsonl:1: UTF-16 text"),
    ("wide_nobom.jsonl", (json.dumps({"question": "Q?", "answers": ["a"], "context": "c"}) + "\n").encode("utf-16-le"),
     r"wide_nobom.jsonl:1: binary data or UTF-16 text"),
])
def test_undecodable_dataset_files_are_refused_with_file_and_line(tmp_path, name, data, message):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(DatasetError, match=message):
        load_dataset(path, skip_bad=True)  # a file that is not UTF-8 JSON is not "a bad record": never skipped


def test_dataset_files_must_be_regular(tmp_path):
    fifo = tmp_path / "questions.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(DatasetError, match="not a regular file"):  # would block forever on open()
        load_dataset(fifo)
    with pytest.raises(DatasetError, match="not a regular file"):
        load_dataset("/dev/zero", fmt="generic")


def test_oversized_dataset_names_the_limit(tmp_path):
    path = write_jsonl(tmp_path / "big.jsonl", [{"question": "Q?", "answers": ["a"], "context": "x" * 4000}] * 300)
    with pytest.raises(DatasetError, match=r"big.jsonl is [0-9.]+ MB, over the 1 MB limit"):
        load_dataset(path, max_bytes=1 << 20)


@pytest.mark.parametrize("record, message", [
    ({"question": 42, "answers": ["a"], "context": "c"}, "'question' must be a string, not a number"),
    ('{"question": NaN, "answers": ["a"], "context": "c"}', r"'question' must be a string, not a number \(nan\)"),
    ({"question": "Q?", "answers": ["a"], "context": 3.5}, "'context' must be a string, not a number"),
    ({"question": "Q?", "answers": [None], "context": "c"}, "'answers' must hold strings, not null"),
    ({"question": "Q?", "answers": {"a": 1}, "context": "c"}, "'answers' must be a list of strings"),
    ({"question": "Q?", "answers": [], "context": "c"}, "'answers' is empty"),
    ({"question": "Q?", "answers": ["a"], "context": "c", "options": "abc"}, None),  # one string = one option
    ({"question": "Q?", "answers": ["a"], "context": "c", "meta": [1]}, "'meta' must be an object"),
    ({"question": "Q?", "answers": ["a"], "context": "c", "id": [1]}, "'id' must be a string or an integer"),
    ('[1, 2]', "a record must be a JSON object, not a list"),
    ('{"question": ' + "1" * 5000 + "}", "invalid JSON"),
])
def test_generic_fields_have_their_types(tmp_path, record, message):
    path = write_jsonl(tmp_path / "mine.jsonl", [{"question": "ok?", "answers": ["a"], "context": "c"}, record])
    if message is None:
        assert len(load_dataset(path).items) == 2
        return
    with pytest.raises(DatasetError, match=f"mine.jsonl:2: {message}"):
        load_dataset(path)
    report = load_dataset(path, skip_bad=True)
    assert (len(report.items), report.skipped) == (1, 1) and report.errors[0].startswith(f"{path}:2: ")


@pytest.mark.parametrize("change, message", [
    ({"input": ["Q?"]}, "'input' must be a string, not a list"),
    ({"context": None}, "'context' must be a string, not null"),
    ({"answers": 7}, "'answers' must be a list of strings"),
    ({"answers": [["nested"]]}, "'answers' must hold strings, not a list"),
    ({"dataset": 5}, "'dataset' must be a string"),
    ({"length": "long"}, "'length' must be an integer"),
    ({"_id": {"x": 1}}, "'_id' must be a string or an integer"),
])
def test_longbench_fields_have_their_types(tmp_path, change, message):
    folder = tmp_path / "longbench"
    folder.mkdir()
    good = {"input": "Q?", "context": "C", "answers": ["a"], "dataset": "hotpotqa", "_id": "x1", "length": 10}
    path = write_jsonl(folder / "hotpotqa.jsonl", [good, {**good, "_id": "x2", **change}])
    with pytest.raises(DatasetError, match=f"hotpotqa.jsonl:2: {message}"):
        load_dataset(path)
    assert load_dataset(path, skip_bad=True).skipped == 1


def test_generic_document_is_read_as_safely_as_a_dataset(tmp_path):
    (tmp_path / "noise.txt").write_bytes(bytes(range(0x80, 0x100)) * 50)
    os.mkfifo(tmp_path / "pipe.txt")
    path = write_jsonl(tmp_path / "mine.jsonl", [{"question": "Q?", "answers": "A", "document": "noise.txt"},
                                                 {"question": "Q?", "answers": "A", "document": "pipe.txt"},
                                                 {"question": "Q?", "answers": "A", "document": "gone.txt"}])
    report = load_dataset(path, skip_bad=True)
    assert report.items == [] and report.skipped == 3
    assert "mine.jsonl:1: document" in report.errors[0] and "noise.txt is not text" in report.errors[0]
    assert "mine.jsonl:2: document" in report.errors[1] and "not a regular file" in report.errors[1]
    assert "gone.txt does not exist" in report.errors[2]
    # decoded as `lcrag ask` decodes a document: Latin-1 text is read correctly, never as replacement characters
    (tmp_path / "latin.txt").write_bytes("The café served crème brûlée every Sunday in the old town.".encode("cp1252"))
    path = write_jsonl(tmp_path / "latin.jsonl", [{"question": "Q?", "answers": "A", "document": "latin.txt"}])
    assert load_dataset(path).items[0].context == "The café served crème brûlée every Sunday in the old town."


# -- defect 16: ∞Bench PassKey as the official data and scorer have it ------------------------------------------------
def test_passkey_takes_the_official_string_label_template_and_length(tmp_path):
    path = write_jsonl(tmp_path / "passkey.jsonl", [
        {"id": 0, "input": "What is the pass key?", "context": "noise The pass key is 07123. Remember it.", "answer": "07123"},
        {"id": 1, "input": "What is the pass key?", "context": "noise", "answer": ["55555"]},
    ])
    items = load_dataset(path).items
    assert [(i.answers, i.metric) for i in items] == [(["07123"], "passkey"), (["55555"], "passkey")]
    prompts, max_tokens = prompts_for(items[0])
    assert max_tokens == 6  # ∞Bench DATA_NAME_TO_MAX_NEW_TOKENS["passkey"]
    official = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. I will "
                "quiz you about the important information there.\n\n{context}\n\n{input}")  # gpt4_templates["passkey"]
    rendered = prompts.messages(prompts.lc, items[0].question, items[0].context)[-1]["content"]
    assert rendered == official.format(context=items[0].context, input=items[0].question)
    score = METRICS["passkey"].score_item
    assert score("The pass key is 07123.", items[0]) == 1.0 and score("It is 7123", items[0]) == 0.0  # strings


@pytest.mark.parametrize("answer, message", [
    (71432, "not a number 71432"),
    ("seven", "not a string 'seven'"),
    ([], "not a list"),
])
def test_passkey_labels_that_could_never_match_are_refused(tmp_path, answer, message):
    path = write_jsonl(tmp_path / "passkey.jsonl", [{"id": 0, "input": "What is the pass key?", "context": "c",
                                                     "answer": answer}])
    with pytest.raises(DatasetError, match=f"passkey.jsonl:1: 'answer' must be the pass key as a string of digits .*{message}"):
        load_dataset(path)


def test_self_route_passkey_variants_use_the_official_template(tmp_path, whitespace_tokenizer):
    from lcrag.documents.synthetic import passkey_records

    path = write_jsonl(tmp_path / "synthetic.jsonl", list(passkey_records(whitespace_tokenizer, [200], [0.5], seed=1)))
    for item in load_dataset(path).items:
        prompts, max_tokens = prompts_for(item)
        assert "Find it and memorize them." in prompts.lc and max_tokens == 6
        assert prompts.lc.endswith("{context}\n\n{question}")


# -- defect 17: all 21 LongBench tasks, official prompt, length, metric; unknown task refused -------------------------
def test_longbench_classification_task_with_its_classes(tmp_path):
    folder = tmp_path / "longbench"
    folder.mkdir()
    record = {"input": "What is a fear of water?", "context": "Example questions", "answers": ["Disease and medicine"],
              "all_classes": ["Disease and medicine", "Animal"], "dataset": "trec", "_id": "t1", "length": 100}
    item = load_dataset(write_jsonl(folder / "trec.jsonl", [record])).items[0]
    assert (item.task, item.metric, item.meta["all_classes"]) == ("trec", "classification_first_line",
                                                                  ["Disease and medicine", "Animal"])
    prompts, max_tokens = prompts_for(item)
    assert max_tokens == 64
    assert prompts.messages(prompts.lc, item.question, item.context)[-1]["content"] == (
        "Please determine the type of the question below. Here are some examples of questions.\n\n"
        "Example questions\nWhat is a fear of water?")
    assert METRICS[item.metric].score_item("Disease and medicine\nAnimal", item) == 1.0  # first line only
    with pytest.raises(DatasetError, match="trec.jsonl:1: 'all_classes' must be a non-empty list"):
        load_dataset(write_jsonl(folder / "trec.jsonl", [{**record, "all_classes": None}]))


@pytest.mark.parametrize("task, metric", [
    ("gov_report", "rouge_l"), ("samsum", "rouge_l_first_line"), ("triviaqa", "qa_f1_first_line"),
    ("vcsum", "rouge_zh"), ("dureader", "rouge_zh"), ("multifieldqa_zh", "qa_f1_zh"), ("lsht", None),
    ("passage_retrieval_en", "retrieval"), ("passage_retrieval_zh", "retrieval_zh"), ("passage_count", "count"),
    ("lcc", "code_sim"), ("repobench-p", "code_sim"),
])
def test_longbench_task_gets_its_official_metric(tmp_path, task, metric):
    folder = tmp_path / "longbench"
    folder.mkdir()
    answer = {"passage_retrieval_en": "Paragraph 4", "passage_retrieval_zh": "段落4"}.get(task, "4")
    record = {"input": "", "context": "C", "answers": [answer], "dataset": task, "all_classes": ["体育", "财经"]}
    item = load_dataset(write_jsonl(folder / f"{task}.jsonl", [record])).items[0]
    assert item.metric == (metric or "classification_first_line") and METRICS[item.metric].variant
    assert prompts_for(item)[0].lc == LONGBENCH[task] and prompts_for(item)[1] is not None


def test_unknown_longbench_task_is_an_error_not_qa_f1(tmp_path):
    folder = tmp_path / "longbench"
    folder.mkdir()
    path = write_jsonl(folder / "mystery.jsonl", [{"input": "Q?", "context": "C", "answers": ["a"]}])
    with pytest.raises(DatasetError, match="mystery.jsonl:1: unknown LongBench task 'mystery'"):
        load_dataset(path)
    path = write_jsonl(folder / "passage_retrieval_en.jsonl", [{"input": "Q?", "context": "C", "answers": ["4"]}])
    with pytest.raises(DatasetError, match="must each name a paragraph"):  # the official scorer would crash on it
        load_dataset(path)


# -- defect 20: ids unique within a run -------------------------------------------------------------------------------
def test_ids_are_qualified_by_file_so_a_directory_never_repeats_one(tmp_path):
    write_jsonl(tmp_path / "longbook_qa_eng.jsonl", [{"id": 0, "input": "Q?", "context": "book", "answer": ["x"]}])
    write_jsonl(tmp_path / "passkey.jsonl", [{"id": 0, "input": "What is the pass key?", "context": "c", "answer": "1"}])
    items = load_dataset(tmp_path, fmt="infinitebench").items
    assert [i.id for i in items] == ["longbook_qa_eng/0", "passkey/0"]


def test_a_repeated_id_is_an_error_naming_both_lines(tmp_path):
    path = write_jsonl(tmp_path / "mine.jsonl", [{"id": "q1", "question": "A?", "answers": ["a"], "context": "c"},
                                                 {"id": "q2", "question": "B?", "answers": ["b"], "context": "c"},
                                                 {"id": "q1", "question": "C?", "answers": ["c"], "context": "c"}])
    with pytest.raises(DatasetError, match=r"mine.jsonl:3: duplicate id 'mine/q1' \(first at .*mine.jsonl:1\)"):
        load_dataset(path)
    report = load_dataset(path, skip_bad=True)
    assert [i.id for i in report.items] == ["mine/q1", "mine/q2"] and report.skipped == 1
    # the same file twice (plain and gzipped) in one directory: the second copy's ids repeat the first's
    with gzip.open(tmp_path / "mine.jsonl.gz", "wt") as f:
        f.write(json.dumps({"id": "q9", "question": "D?", "answers": ["d"], "context": "c"}) + "\n")
    write_jsonl(tmp_path / "mine.jsonl", [{"id": "q9", "question": "D?", "answers": ["d"], "context": "c"}])
    with pytest.raises(DatasetError, match=r"mine.jsonl.gz:1: duplicate id 'mine/q9'"):
        load_dataset(tmp_path)


# -- defect 24: one string is one answer ------------------------------------------------------------------------------
@pytest.mark.parametrize("answers, expected", [
    ("1945", ["1945"]), ("True", ["True"]), ("None", ["None"]), ("[1, 2", ["[1, 2"]), ("{'a': 1}", ["{'a': 1}"]),
    ("['yes', 'Yes.']", ["yes", "Yes."]), ([1945, "MCMXLV"], ["1945", "MCMXLV"]),
])
def test_generic_answers_given_as_one_string(tmp_path, answers, expected):
    path = write_jsonl(tmp_path / "mine.jsonl", [{"question": "When?", "answers": answers, "context": "c"}])
    assert load_dataset(path).items[0].answers == expected


@pytest.mark.parametrize("record, fmt", [
    ({"input": "Q?", "context": "C.", "answers": ["a"], "dataset": "qasper", "_id": "x1"}, "longbench"),
    ({"input": "Doc.", "instructions": ["Q?"], "outputs": ["a"], "evaluation": "f1"}, "leval"),
    ({"_id": "h1", "question": "Q?", "answer": "a", "context": [["T", ["s."]]],
      "supporting_facts": [["T", 0]], "type": "bridge", "level": "easy"}, "hotpotqa"),
    ({"question": "Q?", "answers": ["a"], "context": "C."}, "generic"),
])
def test_a_renamed_benchmark_file_is_recognised_by_its_fields(tmp_path, record, fmt):
    """A user's copy named my_questions.jsonl is read with its real schema, not refused as a generic file."""
    from lcrag.evaluation.datasets import detect_format

    path = tmp_path / "my_questions.jsonl"
    path.write_text(json.dumps(record) + "\n")
    assert detect_format(path) == fmt
    assert len(load_dataset(path).items) == 1
