"""Dataset loaders with explicit schemas: every benchmark becomes a list of ``EvalItem``.

Formats (one record per line unless noted):
- ``longbench``: LongBench v1 JSONL — ``input``, ``context``, ``answers`` (list, or its Python-literal string),
  ``dataset``, ``_id``, optional ``all_classes``, ``length``;
- ``infinitebench``: InfiniteBench JSONL — ``id``, ``context``, ``input``, ``answer`` (list or str), ``options``;
  the task (``longbook_qa_eng``, ``longbook_choice_eng``, ``passkey``) comes from the file name;
- ``leval``: L-Eval JSONL, one document per line — ``input`` (document), ``instructions`` and ``outputs`` (lists,
  or their Python-literal strings), ``evaluation``, ``source``;
- ``hotpotqa``: HotpotQA distractor (``context`` = [[title, [sentences]]], ``supporting_facts``), or the open view
  (``id``, ``question``, ``answers``: no context, corpus-backed); ``.gz`` read transparently;
- ``nq``: NQ-open (``question``, ``answer`` list; corpus-backed);
- ``musique``: MuSiQue JSON list (``paragraphs``, ``question``, ``answer``, ``answer_aliases``);
- ``generic``: JSONL with ``question``, ``answers`` (list or str), and ``context`` (text) or ``document`` (a path,
  relative to the JSONL file); optional ``id``, ``dataset``, ``options`` (list), ``metric``, ``task``, ``meta``.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lcrag.errors import InputError

LONGBENCH_METRIC = {"qmsum": "rouge_l", "gov_report": "rouge_l", "multi_news": "rouge_l", "samsum": "rouge_l"}
INFINITEBENCH_TASKS = {
    "longbook_qa_eng": ("infbench_qa", "infbench_qa_f1"),
    "longbook_choice_eng": ("infbench_mc", "infbench_choice"),
    "passkey": ("passkey", "passkey"),
}
OPTION_LETTERS = "ABCD"


@dataclass
class EvalItem:
    id: str
    dataset: str
    question: str
    answers: list[str]
    context: str | None  # None: corpus-backed (open-domain) question
    task: str = "generic"  # selects the prompt template
    metric: str = "qa_f1"
    options: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoadReport:
    items: list[EvalItem]
    skipped: int = 0
    errors: list[str] = field(default_factory=list)


class RecordError(ValueError):
    pass


def _literal_list(value: Any, name: str) -> list:
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            value = [value]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise RecordError(f"'{name}' must be a list")
    return value


def _need(record: dict, *names: str) -> None:
    missing = [n for n in names if n not in record]
    if missing:
        raise RecordError(f"missing field(s) {', '.join(repr(m) for m in missing)}")


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")


def _jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    with _open_text(path) as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                try:
                    yield lineno, json.loads(line)
                except json.JSONDecodeError as exc:
                    yield lineno, RecordError(f"invalid JSON ({exc.msg})")


def _json_list(path: Path) -> Iterator[tuple[int, Any]]:
    with _open_text(path) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON list of records")
    yield from enumerate(data, start=1)


# -- one function per format: record -> items ------------------------------------------------------------------------
def _longbench(record: dict, path: Path, n: int) -> list[EvalItem]:
    _need(record, "input", "context", "answers")
    name = record.get("dataset") or path.stem
    return [EvalItem(
        id=str(record.get("_id", f"{name}-{n}")), dataset=f"longbench/{name}", question=record["input"],
        answers=[str(a) for a in _literal_list(record["answers"], "answers")], context=record["context"], task=name,
        metric=LONGBENCH_METRIC.get(name, "qa_f1"),
        meta={"length": record.get("length"), "all_classes": record.get("all_classes")},
    )]


def _infinitebench(record: dict, path: Path, n: int) -> list[EvalItem]:
    _need(record, "input", "context", "answer")
    task_name = next((t for t in INFINITEBENCH_TASKS if path.name.startswith(t)), None)
    if task_name is None:
        raise RecordError(f"file name must start with one of {', '.join(INFINITEBENCH_TASKS)}")
    task, metric = INFINITEBENCH_TASKS[task_name]
    answers = [str(a) for a in _literal_list(record["answer"], "answer")]
    options = [str(o) for o in record.get("options") or []]
    if task == "infbench_mc":
        if answers[0] not in options:
            raise RecordError("the answer is not among the options")
        answers = [answers[0], OPTION_LETTERS[options.index(answers[0])]]  # InfiniteBench's label: [text, letter]
    return [EvalItem(id=str(record.get("id", n)), dataset=f"infinitebench/{task_name}", question=record["input"],
                     answers=answers, context=record["context"], task=task, metric=metric, options=options)]


def _leval(record: dict, path: Path, n: int) -> list[EvalItem]:
    _need(record, "input", "instructions", "outputs")
    questions = _literal_list(record["instructions"], "instructions")
    outputs = _literal_list(record["outputs"], "outputs")
    if len(questions) != len(outputs):
        raise RecordError(f"{len(questions)} instructions but {len(outputs)} outputs")
    exam = record.get("evaluation") == "exam"
    items = []
    for i, (q, a) in enumerate(zip(questions, outputs)):
        gold = str(a)
        metric = "qa_f1"
        if exam:
            # Multiple-choice exams answer with letters ("C", "(B) ...", "ABD"); true/false ones with a word.
            letters = gold.strip().lstrip("(")
            metric = "choice_acc" if letters[:1] and letters[:1] in OPTION_LETTERS else "contains"
            if metric == "choice_acc" and len(gold.strip()) > 1 and set(gold.strip()) <= set(OPTION_LETTERS):
                metric = "choice_set"  # Coursera: several correct options, e.g. "ABD"
            if metric == "contains":
                gold = gold.split("[")[0].strip()  # sci_fi: "True [fact: False]" -> "True" (the in-story answer)
        items.append(EvalItem(id=f"{path.stem}-{n}-{i}", dataset=f"leval/{path.stem}", question=str(q), answers=[gold],
                              context=record["input"], task="leval", metric=metric,
                              meta={"document": n, "source": record.get("source"), "evaluation": record.get("evaluation")}))
    return items


def _hotpotqa(record: dict, path: Path, n: int) -> list[EvalItem]:
    if "context" in record:
        _need(record, "question", "answer", "_id")
        paragraphs = record["context"]
        context = "\n".join(f"Passage {i + 1}:\n{title}\n{''.join(sents)}" for i, (title, sents) in enumerate(paragraphs))
        return [EvalItem(id=record["_id"], dataset="hotpotqa/distractor", question=record["question"],
                         answers=[record["answer"]], context=context, task="hotpotqa",
                         meta={"type": record.get("type"), "level": record.get("level"),
                               "supporting_titles": sorted({t for t, _ in record.get("supporting_facts", [])})})]
    _need(record, "question", "answers")
    return [EvalItem(id=str(record.get("id", n)), dataset="hotpotqa/open", question=record["question"],
                     answers=[str(a) for a in record["answers"]], context=None, task="hotpotqa", metric="em")]


def _nq(record: dict, path: Path, n: int) -> list[EvalItem]:
    _need(record, "question", "answer")
    return [EvalItem(id=f"nq-{n}", dataset="nq-open", question=record["question"],
                     answers=[str(a) for a in _literal_list(record["answer"], "answer")], context=None, task="nq", metric="em")]


def _musique(record: dict, path: Path, n: int) -> list[EvalItem]:
    _need(record, "question", "answer", "paragraphs")
    paragraphs = _literal_list(record["paragraphs"], "paragraphs")
    context = "\n".join(f"Passage {i + 1}:\n{p['title']}\n{p['paragraph_text']}" for i, p in enumerate(paragraphs))
    aliases = _literal_list(record.get("answer_aliases") or [], "answer_aliases")
    return [EvalItem(id=str(record.get("id", n)), dataset="musique", question=record["question"],
                     answers=[str(record["answer"]), *map(str, aliases)], context=context, task="musique",
                     meta={"answerable": record.get("answerable"),
                           "supporting_titles": sorted({p["title"] for p in paragraphs if p.get("is_supporting")})})]


def _generic(record: dict, path: Path, n: int) -> list[EvalItem]:
    from lcrag.evaluation.metrics import METRICS

    _need(record, "question", "answers")
    if record.get("metric", "qa_f1") not in METRICS:
        raise RecordError(f"unknown metric {record['metric']!r}; choose one of {', '.join(METRICS)}")
    if "context" in record:
        context = record["context"]
    elif "document" in record:
        doc_path = (path.parent / record["document"]).resolve()
        try:
            context = doc_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            raise RecordError(f"cannot read document {doc_path}") from None
    else:
        raise RecordError("needs 'context' (text) or 'document' (a path)")
    return [EvalItem(id=str(record.get("id", f"{path.stem}-{n}")), dataset=record.get("dataset", path.stem),
                     question=record["question"], answers=[str(a) for a in _literal_list(record["answers"], "answers")],
                     context=context, task=record.get("task", "generic"), metric=record.get("metric", "qa_f1"),
                     options=[str(o) for o in record.get("options") or []], meta=dict(record.get("meta") or {}))]


FORMATS: dict[str, tuple[Callable[[Path], Iterator[tuple[int, Any]]], Callable[[dict, Path, int], list[EvalItem]]]] = {
    "longbench": (_jsonl, _longbench),
    "infinitebench": (_jsonl, _infinitebench),
    "leval": (_jsonl, _leval),
    "hotpotqa": (_jsonl, _hotpotqa),
    "nq": (_jsonl, _nq),
    "musique": (_json_list, _musique),
    "generic": (_jsonl, _generic),
}


def detect_format(path: Path) -> str:
    parts = {p.lower() for p in path.parts}
    name = path.name.lower()
    if "longbench" in parts:
        return "longbench"
    if "leval" in parts or "l-eval" in parts:
        return "leval"
    if any(name.startswith(t) for t in INFINITEBENCH_TASKS) or "infinitebench" in parts:
        return "infinitebench"
    if name.startswith("hotpot"):
        return "hotpotqa"
    if name.startswith("nq-open"):
        return "nq"
    if "musique" in name:
        return "musique"
    return "generic"


def load_dataset(path: str | Path, fmt: str | None = None, skip_bad: bool = False, limit: int | None = None) -> LoadReport:
    """Items of one file, or of every ``.jsonl``/``.json``/``.gz`` file in a directory (sorted).

    ``limit`` keeps the first N questions of each file. A malformed record raises ``InputError`` naming file and
    line, or, with ``skip_bad``, is skipped and counted.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path} does not exist")
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".jsonl", ".json", ".gz"))
        if not files:
            raise InputError(f"{path} holds no .jsonl, .json or .gz files")
        report = LoadReport([])
        for f in files:
            part = load_dataset(f, fmt, skip_bad, limit)
            report.items += part.items
            report.skipped += part.skipped
            report.errors += part.errors
        return report
    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise InputError(f"unknown dataset format {fmt!r}; choose one of {', '.join(FORMATS)}")
    reader, convert = FORMATS[fmt]
    report = LoadReport([])
    for n, record in reader(path):
        try:
            if isinstance(record, RecordError):
                raise record
            if not isinstance(record, dict):
                raise RecordError("a record must be a JSON object")
            report.items += convert(record, path, n)
        except (RecordError, KeyError, TypeError, ValueError) as exc:
            where = f"{path}:{n}" if reader is _jsonl else f"{path} record {n}"
            message = f"{where}: {exc}"
            if not skip_bad:
                raise InputError(message) from None
            report.skipped += 1
            report.errors.append(message)
        if limit and len(report.items) >= limit:
            report.items = report.items[:limit]
            break
    return report


def file_hash(path: str | Path) -> str:
    """sha256 of a dataset file, or of a directory's files in order (for the run manifest)."""
    path = Path(path)
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()
