"""The built-in dataset formats: one function per format turns a record into items; each registers in
:data:`lcrag.core.registry.DATASET_FORMATS` with its help, how its records are read (``records``: JSONL unless it says)
and how a path is recognised as it (``detect``). Detection tries the formats in the order they register, so the
order of this file matters: folders (LongBench, L-Eval) before file names (∞Bench tasks)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lcrag.documents.files import decode_text, read_regular_file
from lcrag.core.errors import InputError
from lcrag.documents.records import (
    RecordError,
    answer_text,
    class_list,
    file_stem,
    json_list_records,
    kind_of,
    need_fields,
    optional_string,
    python_list,
    record_id,
    string_field,
    string_list,
)
from lcrag.evaluation.datasets.items import EvalItem
from lcrag.core.registry import DATASET_FORMATS

# LongBench v1's 21 tasks and the metric each is scored with (official eval.py ``dataset2metric``; trec, triviaqa,
# samsum and lsht score only the prediction's first line, as eval.py does, hence their own metric names).
LONGBENCH_TASKS = {
    "narrativeqa": "qa_f1", "qasper": "qa_f1", "multifieldqa_en": "qa_f1", "multifieldqa_zh": "qa_f1_zh",
    "hotpotqa": "qa_f1", "2wikimqa": "qa_f1", "musique": "qa_f1", "dureader": "rouge_zh",
    "gov_report": "rouge_l", "qmsum": "rouge_l", "multi_news": "rouge_l", "vcsum": "rouge_zh",
    "trec": "classification_first_line", "triviaqa": "qa_f1_first_line", "samsum": "rouge_l_first_line",
    "lsht": "classification_first_line", "passage_retrieval_en": "retrieval", "passage_count": "count",
    "passage_retrieval_zh": "retrieval_zh", "lcc": "code_sim", "repobench-p": "code_sim",
}
# The retrieval tasks' gold answers name the paragraph; their scorers take the number from it.
_GOLD_PARAGRAPH = {"retrieval": r"Paragraph (\d+)", "retrieval_zh": r"段落(\d+)"}
INFINITEBENCH_TASKS = {
    "longbook_qa_eng": ("infbench_qa", "infbench_qa_f1"),
    "longbook_choice_eng": ("infbench_mc", "infbench_choice"),
    "passkey": ("passkey", "passkey"),
}
OPTION_LETTERS = "ABCD"


# -- one function per format: record -> items (ids local to the file; the loader qualifies them) ----------------------
# Each registers in DATASET_FORMATS with its help, how its records are read (``records``, JSONL by default) and how
# a path is recognised as it (``detect``); detection tries them in the order they are registered here.
def _in_folder(*names: str) -> Callable[[Path], bool]:
    return lambda path: any(part.lower() in names for part in path.parts)


def _longbench_task(record: dict, path: Path) -> str:
    name = record.get("dataset")
    if name is None:  # LongBench-E files are named "<task>_e.jsonl"
        name = file_stem(path).removesuffix("_e")
    name = string_field(name, "dataset")
    if name not in LONGBENCH_TASKS:
        raise RecordError(f"unknown LongBench task {name!r}; LongBench v1 has {', '.join(LONGBENCH_TASKS)}")
    return name


@DATASET_FORMATS.register("longbench", help="LongBench v1 JSONL (its 21 tasks); detected in a longbench folder or by "
                          "its fields", detect=_in_folder("longbench"), fields=("input", "context", "answers", "dataset"))
def _longbench(record: dict, path: Path, n: int) -> list[EvalItem]:
    need_fields(record, "input", "context", "answers")
    task = _longbench_task(record, path)
    metric = LONGBENCH_TASKS[task]
    length = record.get("length")
    if length is not None and (isinstance(length, bool) or not isinstance(length, int)):
        raise RecordError(f"'length' must be an integer, not {kind_of(length)}")
    answers = string_list(record["answers"], "answers")
    gold_form = _GOLD_PARAGRAPH.get(metric)
    if gold_form and not all(re.search(gold_form, a) for a in answers):
        raise RecordError(f"'answers' of {task} must each name a paragraph ({gold_form!r}), as its scorer reads them")
    return [EvalItem(
        id=record_id(record, "_id", n), dataset=f"longbench/{task}", question=string_field(record["input"], "input"),
        answers=answers, context=string_field(record["context"], "context"), task=task,
        metric=metric, meta={"length": length, "all_classes": class_list(record, required=metric.startswith("classification"))},
    )]


@DATASET_FORMATS.register("leval", help="L-Eval JSONL, one document and its instructions per line; detected in an "
                          "leval or l-eval folder or by its fields", detect=_in_folder("leval", "l-eval"),
                          fields=("input", "instructions", "outputs"))
def _leval(record: dict, path: Path, n: int) -> list[EvalItem]:
    need_fields(record, "input", "instructions", "outputs")
    document = string_field(record["input"], "input")
    questions = string_list(record["instructions"], "instructions")
    outputs = string_list(record["outputs"], "outputs")
    if len(questions) != len(outputs):
        raise RecordError(f"{len(questions)} instructions but {len(outputs)} outputs")
    exam = record.get("evaluation") == "exam"
    items = []
    for i, (q, gold) in enumerate(zip(questions, outputs)):
        metric = "qa_f1"
        if exam:
            # Multiple-choice exams answer with letters ("C", "(B) ...", "ABD"); true/false ones with a word.
            letters = gold.strip().lstrip("(")
            metric = "choice_acc" if letters[:1] and letters[:1] in OPTION_LETTERS else "contains"
            if metric == "choice_acc" and len(gold.strip()) > 1 and set(gold.strip()) <= set(OPTION_LETTERS):
                metric = "choice_set"  # Coursera: several correct options, e.g. "ABD"
            if metric == "contains":
                gold = gold.split("[")[0].strip()  # sci_fi: "True [fact: False]" -> "True" (the in-story answer)
        items.append(EvalItem(id=f"{n}-{i}", dataset=f"leval/{path.stem}", question=q, answers=[gold],
                              context=document, task="leval", metric=metric,
                              meta={"document": n, "source": record.get("source"), "evaluation": record.get("evaluation")}))
    return items


def _passkey_label(answer: Any) -> list[str]:
    """∞Bench PassKey's label: the key as a string (the official data), or a list whose first string is the key
    (its scorer takes ``label[0]``); it must be digits, or no prediction could ever match it."""
    label = answer[0] if isinstance(answer, list) and answer else answer
    if not isinstance(label, str) or not re.fullmatch("[0-9]+", label):
        raise RecordError(f"'answer' must be the pass key as a string of digits (as in ∞Bench's data), not {kind_of(label)}"
                          + (f" {label!r}" if isinstance(label, str | int) else ""))
    return [label]


def _choice_label(answer: Any, options: list[str]) -> list[str]:
    """∞Bench En.MC's label ``[answer text, letter]``, built as its ``get_answer`` does."""
    if len(options) != len(OPTION_LETTERS):
        raise RecordError(f"'options' must hold {len(OPTION_LETTERS)} options, not {len(options)}")
    if isinstance(answer, str):
        answer = [answer]
    if isinstance(answer, list) and len(answer) == 2 and answer[1] in list(OPTION_LETTERS):
        return [string_field(answer[0], "answer"), answer[1]]
    if not (isinstance(answer, list) and len(answer) == 1):
        raise RecordError(f"'answer' must be one option's text, or [text, letter], not {kind_of(answer)}")
    text = string_field(answer[0], "answer")
    if text not in options:
        raise RecordError("the answer is not among the options")
    return [text, OPTION_LETTERS[options.index(text)]]


@DATASET_FORMATS.register("infinitebench", help="InfiniteBench JSONL (longbook_qa_eng, longbook_choice_eng, passkey); "
                          "detected by those file names or an infinitebench folder",
                          detect=lambda path: path.name.lower().startswith(tuple(INFINITEBENCH_TASKS))
                          or _in_folder("infinitebench")(path))
def _infinitebench(record: dict, path: Path, n: int) -> list[EvalItem]:
    need_fields(record, "input", "context", "answer")
    task_name = next((t for t in INFINITEBENCH_TASKS if path.name.startswith(t)), None)
    if task_name is None:
        raise RecordError(f"file name must start with one of {', '.join(INFINITEBENCH_TASKS)}")
    task, metric = INFINITEBENCH_TASKS[task_name]
    options = string_list(record.get("options") or [], "options", allow_empty=True)
    if task == "passkey":
        answers = _passkey_label(record["answer"])
    elif task == "infbench_mc":
        answers = _choice_label(record["answer"], options)
    else:
        answers = string_list(record["answer"], "answer")
    return [EvalItem(id=record_id(record, "id", n), dataset=f"infinitebench/{task_name}",
                     question=string_field(record["input"], "input"), answers=answers,
                     context=string_field(record["context"], "context"), task=task, metric=metric, options=options)]


def _hotpot_passages(paragraphs: Any) -> tuple[str, list[str]]:
    """HotpotQA's ``context`` ([[title, [sentences]]]) as LongBench lays passages out, and the titles."""
    if not isinstance(paragraphs, list) or not all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], list)
        and all(isinstance(s, str) for s in p[1]) for p in paragraphs
    ):
        raise RecordError("'context' must be a list of [title, [sentences]]")
    text = "\n".join(f"Passage {i + 1}:\n{title}\n{''.join(sents)}" for i, (title, sents) in enumerate(paragraphs))
    return text, [title for title, _ in paragraphs]


@DATASET_FORMATS.register("hotpotqa", help="HotpotQA distractor or open JSONL (.gz read too); detected by a hotpot* name "
                          "or by its fields", detect=lambda path: path.name.lower().startswith("hotpot"),
                          fields=("question", "answer", "context", "supporting_facts"))
def _hotpotqa(record: dict, path: Path, n: int) -> list[EvalItem]:
    if "context" in record:
        need_fields(record, "question", "answer", "_id")
        context, _ = _hotpot_passages(record["context"])
        facts = record.get("supporting_facts") or []
        if not isinstance(facts, list) or not all(isinstance(f, list) and f and isinstance(f[0], str) for f in facts):
            raise RecordError("'supporting_facts' must be a list of [title, sentence index]")
        return [EvalItem(id=record_id(record, "_id", n), dataset="hotpotqa/distractor",
                         question=string_field(record["question"], "question"), answers=[string_field(record["answer"], "answer")],
                         context=context, task="hotpotqa",
                         meta={"type": record.get("type"), "level": record.get("level"),
                               "supporting_titles": sorted({f[0] for f in facts})})]
    need_fields(record, "question", "answers")
    return [EvalItem(id=record_id(record, "id", n), dataset="hotpotqa/open", question=string_field(record["question"], "question"),
                     answers=string_list(record["answers"], "answers"), context=None, task="hotpotqa", metric="em")]


@DATASET_FORMATS.register("nq", help="NQ-open JSONL (corpus-backed); detected by an nq-open* name",
                          detect=lambda path: path.name.lower().startswith("nq-open"))
def _nq(record: dict, path: Path, n: int) -> list[EvalItem]:
    need_fields(record, "question", "answer")
    return [EvalItem(id=str(n), dataset="nq-open", question=string_field(record["question"], "question"),
                     answers=string_list(record["answer"], "answer"), context=None, task="nq", metric="em")]


def _musique_paragraphs(value: Any) -> list[dict]:
    paragraphs = python_list(value) if isinstance(value, str) else value
    if not isinstance(paragraphs, list) or not all(
        isinstance(p, dict) and isinstance(p.get("title"), str) and isinstance(p.get("paragraph_text"), str)
        for p in paragraphs
    ):
        raise RecordError("'paragraphs' must be a list of objects with string 'title' and 'paragraph_text'")
    return paragraphs


@DATASET_FORMATS.register("musique", help="MuSiQue JSON list; detected by a name holding musique",
                          records=json_list_records, detect=lambda path: "musique" in path.name.lower())
def _musique(record: dict, path: Path, n: int) -> list[EvalItem]:
    need_fields(record, "question", "answer", "paragraphs")
    paragraphs = _musique_paragraphs(record["paragraphs"])
    context = "\n".join(f"Passage {i + 1}:\n{p['title']}\n{p['paragraph_text']}" for i, p in enumerate(paragraphs))
    aliases = string_list(record.get("answer_aliases") or [], "answer_aliases", allow_empty=True)
    return [EvalItem(id=record_id(record, "id", n), dataset="musique", question=string_field(record["question"], "question"),
                     answers=[answer_text(record["answer"], "answer"), *aliases], context=context, task="musique",
                     meta={"answerable": record.get("answerable"),
                           "supporting_titles": sorted({p["title"] for p in paragraphs if p.get("is_supporting")})})]


def _document_text(path: Path) -> str:
    """A generic record's ``document``, read as ``lcrag ask`` reads a document: a regular file within the size limit,
    decoded correctly (UTF-8/16, or clean Windows-1252) or refused."""
    try:
        return decode_text(path, read_regular_file(path))
    except InputError as exc:
        raise RecordError(f"document {exc}") from None


@DATASET_FORMATS.register("generic", help="JSONL with question, answers and context or document (the default)",
                          default=True)
def _generic(record: dict, path: Path, n: int) -> list[EvalItem]:
    from lcrag.evaluation.metrics import METRICS

    need_fields(record, "question", "answers")
    metric = optional_string(record, "metric", "qa_f1")
    if metric not in METRICS:
        raise RecordError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    if "context" in record:
        context = string_field(record["context"], "context")
    elif "document" in record:
        context = _document_text(path.parent / string_field(record["document"], "document"))
    else:
        raise RecordError("needs 'context' (text) or 'document' (a path)")
    meta = record.get("meta") or {}
    if not isinstance(meta, dict):
        raise RecordError(f"'meta' must be an object, not {kind_of(meta)}")
    if METRICS[metric].needs_classes:
        meta = {**meta, "all_classes": class_list(meta, required=True)}
    return [EvalItem(id=record_id(record, "id", n), dataset=optional_string(record, "dataset", path.stem),
                     question=string_field(record["question"], "question"), answers=string_list(record["answers"], "answers"),
                     context=context, task=optional_string(record, "task", "generic"), metric=metric,
                     options=string_list(record.get("options") or [], "options", allow_empty=True), meta=dict(meta))]
