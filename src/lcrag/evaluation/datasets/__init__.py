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
- ``lara``: LaRA's folder layout (a root, its ``datasets/query`` folder or one ``{length}_{type}_{task}.jsonl``), read
  by its own ``load`` (see :mod:`lcrag.evaluation.datasets.lara`): questions, their documents, and a split rebuilt
  from predictions.

Files are read strictly: regular files within the size limit, UTF-8 (a ``.gz`` must be gzip), every field of the
expected type. Anything else is a :class:`DatasetError` naming ``file:line``. Item ids are qualified by the file
(``longbook_qa_eng/0``), so the files of one directory never share an id; a repeated id is an error.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from lcrag.core.errors import DatasetError
from lcrag.evaluation.datasets.formats import INFINITEBENCH_TASKS, LONGBENCH_TASKS, OPTION_LETTERS
from lcrag.documents.files import DEFAULT_MAX_FILE_BYTES
from lcrag.documents.records import (
    RecordError,
    file_stem,
    jsonl_records,
    kind_of,
)
from lcrag.evaluation.datasets.items import EvalItem, LoadReport
from lcrag.core.registry import DATASET_FORMATS

__all__ = [
    "INFINITEBENCH_TASKS",
    "LONGBENCH_TASKS",
    "OPTION_LETTERS",
    "EvalItem",
    "LoadReport",
    "RecordError",
    "detect_format",
    "file_hash",
    "file_stem",
    "load_dataset",
]


def detect_format(path: Path) -> str:
    """The first registered format whose ``detect`` recognises ``path`` (its folders or name), else the first whose
    ``fields`` the file's first record has (a LongBench file renamed ``my_questions.jsonl`` is still LongBench), else
    the default."""
    parts = DATASET_FORMATS.parts()
    detected = ([p for p in parts if p.meta.get("detect", _never)(path)]
                or [p for p in parts if p.meta.get("fields") and set(p.meta["fields"]) <= _first_record_keys(path)]
                or [p for p in parts if p.meta.get("default")])
    return detected[0].name


def _first_record_keys(path: Path) -> set[str]:
    """The keys of the file's first JSONL record; empty when it has none or it is not an object (the format's own
    reading then reports what is wrong, with its line)."""
    for _, record in jsonl_records(path):
        return set(record) if isinstance(record, dict) else set()
    return set()


def _never(path: Path) -> bool:
    return False


def load_dataset(path: str | Path, fmt: str | None = None, skip_bad: bool = False, limit: int | None = None,
                 max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> LoadReport:
    """Items of one file, or of every ``.jsonl``/``.json``/``.gz`` file in a directory (sorted).

    ``limit`` keeps the first N questions of each file; ``max_bytes``: the largest question file read (``lcrag
    --max-file-mb``; a .gz file's uncompressed text too). A malformed record raises ``DatasetError`` naming file and
    line, or, with ``skip_bad``, is skipped and counted. Ids are ``<file>/<id>`` and unique across the files.
    """
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path} does not exist")
    if fmt is not None and fmt not in DATASET_FORMATS:
        raise DatasetError(f"unknown dataset format {fmt!r}; choose one of {', '.join(DATASET_FORMATS.names())}")
    own = _own_loader(path, fmt)
    if own is not None:
        return own(path, skip_bad=skip_bad, limit=limit)
    if not path.is_dir():
        return _load_file(path, fmt, skip_bad, limit, {}, max_bytes)
    files = sorted(p for p in path.iterdir() if p.suffix in (".jsonl", ".json", ".gz"))
    if not files:
        raise DatasetError(f"{path} holds no .jsonl, .json or .gz files")
    report, seen = LoadReport([]), {}
    for f in files:
        part = _load_file(f, fmt, skip_bad, limit, seen, max_bytes)
        report.items += part.items
        report.skipped += part.skipped
        report.errors += part.errors
    return report


def _own_loader(path: Path, fmt: str | None) -> Callable[..., LoadReport] | None:
    """The ``load`` of a format that reads its own layout (LaRA: questions, documents and predictions in folders),
    when ``fmt`` names it or, with no ``fmt``, its ``detect`` recognises ``path``."""
    if fmt is not None:
        return DATASET_FORMATS.get(fmt).meta.get("load")
    return next((p.meta["load"] for p in DATASET_FORMATS.parts() if p.meta.get("load") and p.meta.get("detect", _never)(path)),
                None)


def _load_file(path: Path, fmt: str | None, skip_bad: bool, limit: int | None, seen: dict[str, str],
               max_bytes: int) -> LoadReport:
    """One file's items (the file within ``max_bytes``); ``seen`` maps every id loaded so far in this run to where
    it came from."""
    part = DATASET_FORMATS.get(fmt or detect_format(path))
    reader, convert = part.meta.get("records", jsonl_records), part.factory  # records: JSONL unless the format says
    report = LoadReport([])
    for n, record in reader(path, max_bytes):
        # ``line_numbers``: a format whose own reader numbers its records by their lines
        where = f"{path}:{n}" if reader is jsonl_records or part.meta.get("line_numbers") else f"{path} record {n}"
        try:
            if isinstance(record, RecordError):
                raise record
            if not isinstance(record, dict):
                raise RecordError(f"a record must be a JSON object, not {kind_of(record)}")
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
