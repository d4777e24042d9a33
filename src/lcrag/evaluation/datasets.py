"""Dataset loaders with explicit schemas: every benchmark becomes a list of ``EvalItem``.

Formats (one record per line unless noted):
- ``longbench``: LongBench v1 JSONL — ``input``, ``context``, ``answers`` (list, or its Python-literal string),
  ``dataset`` (one of the 21 tasks; else the file name), ``_id``, ``all_classes`` (trec, lsht), optional ``length``;
- ``infinitebench``: InfiniteBench JSONL — ``id``, ``context``, ``input``, ``answer`` (list or str; PassKey's is the
  key as a string, as in the official data), ``options``; the task (``longbook_qa_eng``, ``longbook_choice_eng``,
  ``passkey``) comes from the file name;
- ``leval``: L-Eval JSONL, one document per line — ``input`` (document), ``instructions`` and ``outputs`` (lists,
  or their Python-literal strings), ``evaluation``, ``source``;
- ``hotpotqa``: HotpotQA distractor (``context`` = [[title, [sentences]]], ``supporting_facts``), or the open view
  (``id``, ``question``, ``answers``: no context, corpus-backed); ``.gz`` read transparently;
- ``nq``: NQ-open (``question``, ``answer`` list; corpus-backed);
- ``musique``: MuSiQue JSON list (``paragraphs``, ``question``, ``answer``, ``answer_aliases``);
- ``generic``: JSONL with ``question``, ``answers`` (a list, or one string: ``"1945"`` is one answer), and ``context``
  (text) or ``document`` (a path, relative to the JSONL file); optional ``id``, ``dataset``, ``options`` (list),
  ``metric``, ``task``, ``meta``.

Files are read strictly: regular files within the size limit, UTF-8 (a ``.gz`` must be gzip), every field of the
expected type. Anything else is a :class:`DatasetError` naming ``file:line``. Item ids are qualified by the file
(``longbook_qa_eng/0``), so the files of one directory never share an id; a repeated id is an error.
"""

from __future__ import annotations

import ast
import codecs
import gzip
import hashlib
import io
import json
import math
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lcrag.documents.files import decode_text, max_file_bytes, read_regular_file
from lcrag.errors import DatasetError, InputError

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
_SNIFF_BYTES = 8192  # a NUL byte this early means binary data or UTF-16, not UTF-8 JSON


@dataclass
class EvalItem:
    id: str  # unique within a run: "<file>/<id in the file>"
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
    """One bad record; the loader adds ``file:line`` and stops, or skips it with ``skip_bad``."""


# -- reading files: regular, size-limited, gzip checked, strict UTF-8 -------------------------------------------------
def _json_text(source: str | Path, data: bytes) -> str:
    """A dataset file's bytes as UTF-8 (JSON's encoding; a BOM allowed). Binary data, UTF-16 and legacy encodings
    are refused naming the line of the first bad byte: decoding "with replacement" would silently change questions
    and answers, and a guessed code page could misread them."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise DatasetError(f"{source}:1: UTF-16 text; save it as UTF-8")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise DatasetError(f"{source}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at column {column}; "
                           f"binary data, or Latin-1/cp1252 text?); save it as UTF-8") from None
    nul = text.find("\x00", 0, _SNIFF_BYTES)  # valid UTF-8, yet ASCII stored as UTF-16 without a BOM looks like this
    if nul != -1:
        line = text.count("\n", 0, nul) + 1
        raise DatasetError(f"{source}:{line}: binary data or UTF-16 text (a NUL byte), not UTF-8 text")
    return text


def _gunzip(path: Path, data: bytes) -> bytes:
    if not data.startswith(b"\x1f\x8b"):
        raise DatasetError(f"{path}: not gzip data, though its name ends in .gz")
    limit = max_file_bytes()
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            out = f.read(limit + 1)  # bounded: a small .gz can expand enormously
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise DatasetError(f"{path}: damaged gzip data ({exc})") from None
    if len(out) > limit:
        raise DatasetError(f"{path}: over {limit / 2**20:.0f} MB uncompressed (raise the limit with LCRAG_MAX_FILE_MB)")
    return out


def _read_bytes(path: Path) -> bytes:
    try:
        return read_regular_file(path)  # FIFOs, devices and oversized files are refused without blocking
    except InputError as exc:
        raise DatasetError(str(exc)) from None


def _file_text(path: Path) -> str:
    data = _read_bytes(path)
    return _json_text(path, _gunzip(path, data) if path.suffix == ".gz" else data)


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:  # JSONDecodeError, and over-long integers
        raise RecordError(f"invalid JSON ({getattr(exc, 'msg', exc)})") from None
    except RecursionError:
        raise RecordError("invalid JSON (nested too deeply)") from None


def _jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    # split on "\n" only: JSON strings may hold U+2028 and other characters str.splitlines() would break on
    for lineno, line in enumerate(_file_text(path).split("\n"), start=1):
        if line.strip():
            try:
                yield lineno, _parse_json(line)
            except RecordError as exc:
                yield lineno, exc


def _json_list(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        data = json.loads(_file_text(path))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:
        raise DatasetError(f"{path}: invalid JSON ({exc})") from None
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of records")
    yield from enumerate(data, start=1)


# -- fields: the type each format promises, or a RecordError saying what came instead --------------------------------
def _kind(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f"a number ({value})"  # NaN/Infinity: Python's json accepts them, pandas writes them
    names = {bool: "a boolean", type(None): "null", int: "a number", float: "a number", str: "a string",
             list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


def _need(record: dict, *names: str) -> None:
    missing = [n for n in names if n not in record]
    if missing:
        raise RecordError(f"missing field(s) {', '.join(repr(m) for m in missing)}")


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise RecordError(f"{name!r} must be a string, not {_kind(value)}")
    return value


def _optional_text(record: dict, name: str, default: str) -> str:
    value = record.get(name)
    return default if value is None else _text(value, name)


def _answer_text(value: Any, name: str) -> str:
    """A gold answer: a string, or a finite number written as one (``1945``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return str(value)
    raise RecordError(f"{name!r} must hold strings, not {_kind(value)}")


def _literal_list(value: Any, name: str, allow_empty: bool = False) -> list[str]:
    """A list of strings, given as a list, as one string (one answer: ``"1945"``, ``"True"``), or as a string holding
    a Python list literal (LongBench and L-Eval dumps: ``"['yes', 'Yes.']"``)."""
    if isinstance(value, str):
        parsed = _python_list(value)
        value = parsed if parsed is not None else [value]
    if not isinstance(value, list):
        raise RecordError(f"{name!r} must be a list of strings (or one string), not {_kind(value)}")
    if not value and not allow_empty:
        raise RecordError(f"{name!r} is empty")
    return [_answer_text(v, name) for v in value]


def _python_list(text: str) -> list | None:
    if not text.lstrip().startswith("["):
        return None
    try:
        parsed = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return parsed if isinstance(parsed, list) else None


def _record_id(record: dict, name: str, default: int) -> str:
    value = record.get(name, default)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise RecordError(f"{name!r} must be a string or an integer, not {_kind(value)}")
    return str(value)


def _classes(record: dict, required: bool) -> list[str] | None:
    value = record.get("all_classes")
    if value is None and not required:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(c, str) for c in value):
        raise RecordError(f"'all_classes' must be a non-empty list of strings (the task is scored by class), "
                          f"not {_kind(value)}")
    return value


# -- one function per format: record -> items (ids local to the file; the loader qualifies them) ----------------------
def _longbench_task(record: dict, path: Path) -> str:
    name = record.get("dataset")
    if name is None:  # LongBench-E files are named "<task>_e.jsonl"
        name = file_stem(path).removesuffix("_e")
    name = _text(name, "dataset")
    if name not in LONGBENCH_TASKS:
        raise RecordError(f"unknown LongBench task {name!r}; LongBench v1 has {', '.join(LONGBENCH_TASKS)}")
    return name


def _longbench(record: dict, path: Path, n: int) -> list[EvalItem]:
    _need(record, "input", "context", "answers")
    task = _longbench_task(record, path)
    metric = LONGBENCH_TASKS[task]
    length = record.get("length")
    if length is not None and (isinstance(length, bool) or not isinstance(length, int)):
        raise RecordError(f"'length' must be an integer, not {_kind(length)}")
    answers = _literal_list(record["answers"], "answers")
    gold_form = _GOLD_PARAGRAPH.get(metric)
    if gold_form and not all(re.search(gold_form, a) for a in answers):
        raise RecordError(f"'answers' of {task} must each name a paragraph ({gold_form!r}), as its scorer reads them")
    return [EvalItem(
        id=_record_id(record, "_id", n), dataset=f"longbench/{task}", question=_text(record["input"], "input"),
        answers=answers, context=_text(record["context"], "context"), task=task,
        metric=metric, meta={"length": length, "all_classes": _classes(record, required=metric.startswith("classification"))},
    )]


def _passkey_label(answer: Any) -> list[str]:
    """∞Bench PassKey's label: the key as a string (the official data), or a list whose first string is the key
    (its scorer takes ``label[0]``); it must be digits, or no prediction could ever match it."""
    label = answer[0] if isinstance(answer, list) and answer else answer
    if not isinstance(label, str) or not re.fullmatch("[0-9]+", label):
        raise RecordError(f"'answer' must be the pass key as a string of digits (as in ∞Bench's data), not {_kind(label)}"
                          + (f" {label!r}" if isinstance(label, str | int) else ""))
    return [label]


def _choice_label(answer: Any, options: list[str]) -> list[str]:
    """∞Bench En.MC's label ``[answer text, letter]``, built as its ``get_answer`` does."""
    if len(options) != len(OPTION_LETTERS):
        raise RecordError(f"'options' must hold {len(OPTION_LETTERS)} options, not {len(options)}")
    if isinstance(answer, str):
        answer = [answer]
    if isinstance(answer, list) and len(answer) == 2 and answer[1] in list(OPTION_LETTERS):
        return [_text(answer[0], "answer"), answer[1]]
    if not (isinstance(answer, list) and len(answer) == 1):
        raise RecordError(f"'answer' must be one option's text, or [text, letter], not {_kind(answer)}")
    text = _text(answer[0], "answer")
    if text not in options:
        raise RecordError("the answer is not among the options")
    return [text, OPTION_LETTERS[options.index(text)]]


def _infinitebench(record: dict, path: Path, n: int) -> list[EvalItem]:
    _need(record, "input", "context", "answer")
    task_name = next((t for t in INFINITEBENCH_TASKS if path.name.startswith(t)), None)
    if task_name is None:
        raise RecordError(f"file name must start with one of {', '.join(INFINITEBENCH_TASKS)}")
    task, metric = INFINITEBENCH_TASKS[task_name]
    options = _literal_list(record.get("options") or [], "options", allow_empty=True)
    if task == "passkey":
        answers = _passkey_label(record["answer"])
    elif task == "infbench_mc":
        answers = _choice_label(record["answer"], options)
    else:
        answers = _literal_list(record["answer"], "answer")
    return [EvalItem(id=_record_id(record, "id", n), dataset=f"infinitebench/{task_name}",
                     question=_text(record["input"], "input"), answers=answers,
                     context=_text(record["context"], "context"), task=task, metric=metric, options=options)]


def _leval(record: dict, path: Path, n: int) -> list[EvalItem]:
    _need(record, "input", "instructions", "outputs")
    document = _text(record["input"], "input")
    questions = _literal_list(record["instructions"], "instructions")
    outputs = _literal_list(record["outputs"], "outputs")
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


def _hotpot_passages(paragraphs: Any) -> tuple[str, list[str]]:
    """HotpotQA's ``context`` ([[title, [sentences]]]) as LongBench lays passages out, and the titles."""
    if not isinstance(paragraphs, list) or not all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], list)
        and all(isinstance(s, str) for s in p[1]) for p in paragraphs
    ):
        raise RecordError("'context' must be a list of [title, [sentences]]")
    text = "\n".join(f"Passage {i + 1}:\n{title}\n{''.join(sents)}" for i, (title, sents) in enumerate(paragraphs))
    return text, [title for title, _ in paragraphs]


def _hotpotqa(record: dict, path: Path, n: int) -> list[EvalItem]:
    if "context" in record:
        _need(record, "question", "answer", "_id")
        context, _ = _hotpot_passages(record["context"])
        facts = record.get("supporting_facts") or []
        if not isinstance(facts, list) or not all(isinstance(f, list) and f and isinstance(f[0], str) for f in facts):
            raise RecordError("'supporting_facts' must be a list of [title, sentence index]")
        return [EvalItem(id=_record_id(record, "_id", n), dataset="hotpotqa/distractor",
                         question=_text(record["question"], "question"), answers=[_text(record["answer"], "answer")],
                         context=context, task="hotpotqa",
                         meta={"type": record.get("type"), "level": record.get("level"),
                               "supporting_titles": sorted({f[0] for f in facts})})]
    _need(record, "question", "answers")
    return [EvalItem(id=_record_id(record, "id", n), dataset="hotpotqa/open", question=_text(record["question"], "question"),
                     answers=_literal_list(record["answers"], "answers"), context=None, task="hotpotqa", metric="em")]


def _nq(record: dict, path: Path, n: int) -> list[EvalItem]:
    _need(record, "question", "answer")
    return [EvalItem(id=str(n), dataset="nq-open", question=_text(record["question"], "question"),
                     answers=_literal_list(record["answer"], "answer"), context=None, task="nq", metric="em")]


def _musique_paragraphs(value: Any) -> list[dict]:
    paragraphs = _python_list(value) if isinstance(value, str) else value
    if not isinstance(paragraphs, list) or not all(
        isinstance(p, dict) and isinstance(p.get("title"), str) and isinstance(p.get("paragraph_text"), str)
        for p in paragraphs
    ):
        raise RecordError("'paragraphs' must be a list of objects with string 'title' and 'paragraph_text'")
    return paragraphs


def _musique(record: dict, path: Path, n: int) -> list[EvalItem]:
    _need(record, "question", "answer", "paragraphs")
    paragraphs = _musique_paragraphs(record["paragraphs"])
    context = "\n".join(f"Passage {i + 1}:\n{p['title']}\n{p['paragraph_text']}" for i, p in enumerate(paragraphs))
    aliases = _literal_list(record.get("answer_aliases") or [], "answer_aliases", allow_empty=True)
    return [EvalItem(id=_record_id(record, "id", n), dataset="musique", question=_text(record["question"], "question"),
                     answers=[_answer_text(record["answer"], "answer"), *aliases], context=context, task="musique",
                     meta={"answerable": record.get("answerable"),
                           "supporting_titles": sorted({p["title"] for p in paragraphs if p.get("is_supporting")})})]


def _document_text(path: Path) -> str:
    """A generic record's ``document``, read as ``lcrag ask`` reads a document: a regular file within the size limit,
    decoded correctly (UTF-8/16, or clean Windows-1252) or refused."""
    try:
        return decode_text(path, read_regular_file(path))
    except InputError as exc:
        raise RecordError(f"document {exc}") from None


def _generic(record: dict, path: Path, n: int) -> list[EvalItem]:
    from lcrag.evaluation.metrics import METRICS

    _need(record, "question", "answers")
    metric = _optional_text(record, "metric", "qa_f1")
    if metric not in METRICS:
        raise RecordError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    if "context" in record:
        context = _text(record["context"], "context")
    elif "document" in record:
        context = _document_text(path.parent / _text(record["document"], "document"))
    else:
        raise RecordError("needs 'context' (text) or 'document' (a path)")
    meta = record.get("meta") or {}
    if not isinstance(meta, dict):
        raise RecordError(f"'meta' must be an object, not {_kind(meta)}")
    if METRICS[metric].needs_classes:
        meta = {**meta, "all_classes": _classes(meta, required=True)}
    return [EvalItem(id=_record_id(record, "id", n), dataset=_optional_text(record, "dataset", path.stem),
                     question=_text(record["question"], "question"), answers=_literal_list(record["answers"], "answers"),
                     context=context, task=_optional_text(record, "task", "generic"), metric=metric,
                     options=_literal_list(record.get("options") or [], "options", allow_empty=True), meta=dict(meta))]


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


def file_stem(path: Path) -> str:
    """The name that qualifies a file's ids: its name without ``.gz`` and ``.jsonl``/``.json``."""
    name = path.name.removesuffix(".gz")
    for suffix in (".jsonl", ".json"):
        name = name.removesuffix(suffix)
    return name


def load_dataset(path: str | Path, fmt: str | None = None, skip_bad: bool = False, limit: int | None = None) -> LoadReport:
    """Items of one file, or of every ``.jsonl``/``.json``/``.gz`` file in a directory (sorted).

    ``limit`` keeps the first N questions of each file. A malformed record raises ``DatasetError`` naming file and
    line, or, with ``skip_bad``, is skipped and counted. Ids are ``<file>/<id>`` and unique across the files.
    """
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path} does not exist")
    if fmt is not None and fmt not in FORMATS:
        raise DatasetError(f"unknown dataset format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if not path.is_dir():
        return _load_file(path, fmt, skip_bad, limit, {})
    files = sorted(p for p in path.iterdir() if p.suffix in (".jsonl", ".json", ".gz"))
    if not files:
        raise DatasetError(f"{path} holds no .jsonl, .json or .gz files")
    report, seen = LoadReport([]), {}
    for f in files:
        part = _load_file(f, fmt, skip_bad, limit, seen)
        report.items += part.items
        report.skipped += part.skipped
        report.errors += part.errors
    return report


def _load_file(path: Path, fmt: str | None, skip_bad: bool, limit: int | None, seen: dict[str, str]) -> LoadReport:
    """One file's items; ``seen`` maps every id loaded so far in this run to where it came from."""
    reader, convert = FORMATS[fmt or detect_format(path)]
    report = LoadReport([])
    for n, record in reader(path):
        where = f"{path}:{n}" if reader is _jsonl else f"{path} record {n}"
        try:
            if isinstance(record, RecordError):
                raise record
            if not isinstance(record, dict):
                raise RecordError(f"a record must be a JSON object, not {_kind(record)}")
            items = _qualified(_convert(convert, record, path, n), path, where, seen)
        except RecordError as exc:
            if not skip_bad:
                raise DatasetError(f"{where}: {exc}") from None
            report.skipped += 1
            report.errors.append(f"{where}: {exc}")
            continue
        report.items += items
        if limit and len(report.items) >= limit:
            report.items = report.items[:limit]
            break
    return report


def _convert(convert: Callable[[dict, Path, int], list[EvalItem]], record: dict, path: Path, n: int) -> list[EvalItem]:
    try:
        return convert(record, path, n)
    except RecordError:
        raise
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
        # the converters check every field they read; this only keeps a shape they missed to one line
        raise RecordError(f"malformed record ({type(exc).__name__}: {exc})") from None


def _qualified(items: list[EvalItem], path: Path, where: str, seen: dict[str, str]) -> list[EvalItem]:
    """``items`` with ids qualified by their file (two files' ``0`` differ), refusing an id seen before: rows are
    keyed by id, so a repeat would make the report keep one answer and resume skip the other."""
    for item in items:
        item.id = f"{file_stem(path)}/{item.id}"
        if item.id in seen:
            raise RecordError(f"duplicate id {item.id!r} (first at {seen[item.id]})")
    seen.update((item.id, where) for item in items)
    return items


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
