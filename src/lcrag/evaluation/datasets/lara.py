"""LaRA (Li et al., "LaRA: Benchmarking Retrieval-Augmented Generation and Long-Context LLMs", ICML 2025) as a dataset.

Layout (the upstream repository's, and ``shared/data/lara``)::

    ROOT/datasets/{32k,128k}/{book,financial,paper}/FILE          the documents
    ROOT/datasets/query/{length}_{type}_{task}.jsonl               the questions
    ROOT/predictions/MODEL/{full,rag}_preds_MODEL_{length}_{type}_{task}.jsonl   recorded answers

``--dataset`` may name ROOT, ROOT/datasets, the query folder, or one query file. A question record has ``type``,
``level`` (the task: location, reasoning, comp, hallu), ``length``, ``file``, ``context_order`` (the part of the
document, or ``"full"``; ``comp_parts`` for comp), ``question`` and ``answer``; length, type and task are the file name's (a record's ``type`` is LaRA's finer
label — ``novel_fake``, ``novelette`` — kept as ``meta["record_type"]``). The document is
``datasets/{length}/{type}/{file}`` read as LaRA reads it (UTF-8, universal newlines), once per file: every question
of a document shares one ``str``. Some 32k_book_location records also carry a ``context`` (an excerpt, not the
document upstream prompts with); it is ignored.

A split whose query file is absent (upstream lacks 128k_book_location.jsonl) is rebuilt from the first
``predictions/*/full_preds_*_{split}.jsonl`` (question, file, context_order, ground_truth → answer; every model's file
holds the same questions in the same order), said in a warning. Ids are ``{split}/{line}`` (``32k_book_location/17``,
the line in the query or prediction file). Questions about a document that is not in the dataset (the shared copy
lacks ``128k/book/Philosopher’s Stone.txt``) are skipped and counted in one warning; a question asked twice of one
document in one split is kept twice, counted in one warning and marked ``meta["duplicate_of"]``.

Items: ``dataset`` ``lara-{length}``, ``task`` ``lara_{type}`` (the prompt set: LaRA's own templates, see
:mod:`lcrag.evaluation.prompts_lara`), ``metric`` ``lara`` (``lara_hallu`` for hallu questions), ``meta`` with
``type``, ``task``/``level``, ``length``, ``file`` and ``document`` (the path relative to ``datasets/``, e.g.
``32k/book/A Christmas Carol.txt``, by which recorded answers are matched).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lcrag.documents.files import read_regular_file
from lcrag.core.errors import DatasetError, InputError
from lcrag.documents.records import (
    RecordError,
    jsonl_records,
    kind_of,
    need_fields,
    string_field,
)
from lcrag.evaluation.datasets.items import EvalItem, LoadReport
from lcrag.evaluation.datasets.lara_predictions import prediction_folder
from lcrag.core.registry import DATASET_FORMATS

log = logging.getLogger(__name__)

LENGTHS = ("32k", "128k")
TYPES = ("book", "financial", "paper")
TASKS = ("location", "reasoning", "comp", "hallu")
SPLITS = tuple(f"{length}_{kind}_{task}" for length in LENGTHS for kind in TYPES for task in TASKS)
_SPLIT = re.compile(r"^(32k|128k)_(book|financial|paper)_(location|reasoning|comp|hallu)$")


class MissingDocument(RecordError):
    """A question about a document the dataset does not hold: skipped and counted, never fatal."""

    def __init__(self, document: str, datasets: Path):
        super().__init__(f"document {document} is not in {datasets}")
        self.document = document


def split_of(path: Path) -> tuple[str, str, str] | None:
    """(length, type, task) of a query file name (``32k_book_location.jsonl``), else None."""
    m = _SPLIT.match(path.name.removesuffix(".jsonl")) if path.name.endswith(".jsonl") else None
    return (m.group(1), m.group(2), m.group(3)) if m else None


def _query_folder(path: Path) -> Path | None:
    """The query folder of a LaRA root, of its datasets folder, or the folder itself."""
    for candidate in (path / "datasets" / "query", path / "query", path):
        if candidate.is_dir() and any(split_of(f) for f in candidate.iterdir()):
            return candidate
    return None


def detect(path: Path) -> bool:
    try:
        return split_of(path) is not None if not path.is_dir() else _query_folder(path) is not None
    except OSError:
        return False


def _read_document(path: Path) -> str:
    """A document as LaRA's ``open(path, encoding="utf-8").read()`` gives it: UTF-8 (a BOM kept as U+FEFF),
    universal newlines."""
    try:
        data = read_regular_file(path)
    except InputError as exc:
        raise RecordError(f"document {exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(f"document {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                          f"{exc.start})") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _document(datasets: Path, length: str, kind: str, name: str, documents: dict[str, str]) -> tuple[str, str]:
    """(relative path, text) of a record's ``file``; ``documents`` caches texts by relative path."""
    if not name or Path(name).name != name or name in (".", ".."):
        raise RecordError(f"'file' must be a file name in {length}/{kind}/, not {name!r}")
    relative = f"{length}/{kind}/{name}"
    if relative not in documents:
        path = datasets / length / kind / name
        if not path.exists():
            raise MissingDocument(relative, datasets)
        documents[relative] = _read_document(path)
    return relative, documents[relative]


def _place(record: dict, task: str) -> dict[str, Any]:
    """Where in the document the answer is: ``context_order`` (an index), or ``comp_parts`` for comp questions."""
    if task == "comp":
        need_fields(record, "comp_parts")
        parts = record["comp_parts"]
        if not isinstance(parts, list) or not parts or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
            raise RecordError(f"'comp_parts' must be a non-empty list of integers, not {kind_of(parts)}")
        return {"comp_parts": parts}
    need_fields(record, "context_order")
    order = record["context_order"]
    if order != "full" and (isinstance(order, bool) or not isinstance(order, int)):  # "full": the whole document
        raise RecordError(f"'context_order' must be an integer or \"full\", not {kind_of(order)}"
                          + (f" {order!r}" if isinstance(order, str) else ""))
    return {"context_order": order}


def lara_items(record: dict, path: Path, n: int, documents: dict[str, str] | None = None,
               split: tuple[str, str, str] | None = None, answer_field: str = "answer") -> list[EvalItem]:
    """One question record of a query file (or, with ``answer_field="ground_truth"``, of a prediction file standing
    in for its split) as an item. ``documents`` caches the texts across records."""
    length, kind, task = split or split_of(path) or (None, None, None)
    if length is None:
        raise RecordError(f"{path.name} is not a LaRA query file name ({{length}}_{{type}}_{{task}}.jsonl)")
    need_fields(record, "question", answer_field, "file")
    for name, expected in (("length", length), ("level", task)):
        if name in record and record[name] != expected:
            raise RecordError(f"{name!r} is {record[name]!r}, but the file holds {length} {kind} {task} questions")
    place = _place(record, task)
    question = string_field(record["question"], "question")
    answer = string_field(record[answer_field], answer_field)
    if not question.strip() or not answer.strip():
        raise RecordError(f"empty {'question' if not question.strip() else answer_field!r}")
    datasets = path.parent.parent if split is None else path.parents[2] / "datasets"
    relative, text = _document(datasets, length, kind, string_field(record["file"], "file"),
                               {} if documents is None else documents)
    record_type = record.get("type")
    return [EvalItem(
        id=str(n), dataset=f"lara-{length}", question=question, answers=[answer], context=text,
        task=f"lara_{kind}", metric="lara_hallu" if task == "hallu" else "lara",
        meta={"type": kind, "task": task, "level": task, "length": length, "file": record["file"],
              "document": relative, **place,
              **({"record_type": record_type} if isinstance(record_type, str) else {})},
    )]


def _stand_in(root: Path, split: str) -> Path | None:
    """The first model's LC predictions of ``split``: the questions of a split whose query file is absent."""
    found = sorted(root.glob(f"predictions/*/full_preds_*_{split}.jsonl"))
    return found[0] if found else None


def _sources(path: Path) -> dict[str, tuple[Path, tuple[str, ...] | None]]:
    """Each split's file: its query file, or a model's predictions standing in for an absent one."""
    if not path.is_dir():
        if split_of(path) is None:
            raise DatasetError(f"{path} is not a LaRA query file name ({{length}}_{{type}}_{{task}}.jsonl)")
        return {path.name.removesuffix(".jsonl"): (path, None)}
    queries = _query_folder(path)
    if queries is None:
        raise DatasetError(f"{path} holds no LaRA query files ({{length}}_{{type}}_{{task}}.jsonl in datasets/query)")
    files = sorted(f for f in queries.iterdir() if f.suffix == ".jsonl")
    strange = [f.name for f in files if not split_of(f)]
    if strange:
        raise DatasetError(f"{queries}: {strange[0]} is not a LaRA query file name ({{length}}_{{type}}_{{task}}.jsonl)")
    sources = {f.name.removesuffix(".jsonl"): (f, None) for f in files}
    for split in SPLITS:  # a split upstream publishes only in its prediction files
        if split not in sources and (stand_in := _stand_in(queries.parent.parent, split)) is not None:
            sources[split] = (stand_in, tuple(split.split("_")))
            log.warning("LaRA: %s.jsonl is not in %s; its questions are rebuilt from %s (question, file, "
                        "context_order, ground_truth)", split, queries, stand_in)
    missing = [s for s in SPLITS if s not in sources]
    if missing:
        log.warning("LaRA: no questions for %s (neither a query file nor predictions)", ", ".join(missing))
    return sources


@dataclass
class _Loading:
    """What loading the splits gathers: documents read once, questions asked before, what was left out."""

    skip_bad: bool
    report: LoadReport = field(default_factory=lambda: LoadReport([]))
    documents: dict[str, str] = field(default_factory=dict)
    absent: Counter = field(default_factory=Counter)
    first_asked: dict[tuple[str, str, str], str] = field(default_factory=dict)
    duplicates: list[str] = field(default_factory=list)

    def split(self, split: str, file: Path, stand_in_for: tuple[str, ...] | None, limit: int | None) -> None:
        kept = 0
        for n, record in jsonl_records(file):
            items = self._items(record, file, n, stand_in_for)
            for item in items:
                item.id = f"{split}/{item.id}"
                if stand_in_for:
                    item.meta["rebuilt_from"] = str(file)
                self._note_duplicate(item, split)
            self.report.items += items
            kept += len(items)
            if limit and kept >= limit:
                break

    def _items(self, record, file: Path, n: int, stand_in_for) -> list[EvalItem]:
        try:
            if isinstance(record, RecordError):
                raise record
            if not isinstance(record, dict):
                raise RecordError(f"a record must be a JSON object, not {kind_of(record)}")
            return lara_items(record, file, n, self.documents, stand_in_for,
                              "ground_truth" if stand_in_for else "answer")
        except MissingDocument as exc:
            self.absent[exc.document] += 1
        except RecordError as exc:
            if not self.skip_bad:
                raise DatasetError(f"{file}:{n}: {exc}") from None
            self.report.skipped += 1
            self.report.errors.append(f"{file}:{n}: {exc}")
        return []

    def _note_duplicate(self, item: EvalItem, split: str) -> None:
        key = (split, item.meta["document"], item.question)
        if key in self.first_asked:
            item.meta["duplicate_of"] = self.first_asked[key]
            self.duplicates.append(f"{item.id} = {self.first_asked[key]}")
        else:
            self.first_asked[key] = item.id

    def warn(self) -> None:
        if self.absent:
            log.warning("LaRA: skipped %d question(s) about documents not in the dataset: %s",
                        sum(self.absent.values()),
                        ", ".join(f"{doc} ({count})" for doc, count in sorted(self.absent.items())))
        if self.duplicates:
            log.warning("LaRA: %d question(s) asked again of the same document in the same split, kept both: %s",
                        len(self.duplicates), "; ".join(self.duplicates))


def load_lara(path: str | Path, skip_bad: bool = False, limit: int | None = None) -> LoadReport:
    """Every question of a LaRA root, datasets folder, query folder or query file (see the module docstring)."""
    sources = _sources(Path(path))
    loading = _Loading(skip_bad)
    for split in sorted(sources, key=lambda s: SPLITS.index(s) if s in SPLITS else len(SPLITS)):
        loading.split(split, *sources[split], limit)
    loading.warn()
    return loading.report


DATASET_FORMATS.register(
    "lara", help="LaRA (ICML 2025): a LaRA folder, its datasets/query folder or one {length}_{type}_{task}.jsonl; "
    "documents read from datasets/{length}/{type}/", detect=detect, load=load_lara,
    predictions=prediction_folder,  # a predictions/MODEL folder as the replay reader's recordings
)(lara_items)
