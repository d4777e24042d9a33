"""Recorded answers (a reader's production logs): what the replay reader answers from, and (registered by
:mod:`lcrag.evaluation.datasets.recordings`) a dataset, the ``recordings`` format.

A recordings JSONL holds one recorded answer per line: ``question``, ``document`` (a path, relative to the JSONL file,
or absolute), ``mode`` (``lc``: the whole document was in the prompt; ``rag``: retrieved chunks), ``prediction``
(the recorded answer; null or empty when the call failed), optional ``model`` (the recorded reader) and ``answer``
or ``answers`` (gold). The replay reader (``--llm replay:FILE``, :mod:`lcrag.readers.replay`) answers from it; this
format makes the same file the dataset: one item per distinct (question, document), with its gold answer(s), so

    lcrag eval --dataset logs.jsonl --llm replay:logs.jsonl --strategies lc,self-route --out runs/logs

scores the recorded LC and RAG answers with lcrag's own retrieval on the same documents. The records are checked as
the replay reader checks them (a missing field, a bad mode, a missing document: ``file:line``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lcrag.documents.files import DEFAULT_MAX_FILE_BYTES
from lcrag.documents.records import (
    RecordError,
    jsonl_records,
    kind_of,
    need_fields,
    string_field,
    string_list,
)

MODES = ("lc", "rag")
FIELDS = ("question", "document", "mode", "prediction")


@dataclass(frozen=True)
class Recording:
    """One recorded answer. ``prediction`` None: the record has none (null, false or empty: the call failed)."""

    question: str
    document: Path  # absolute, normalised (symbolic links kept: a suffix of it names the document)
    mode: str
    prediction: str | None
    where: str  # file:line
    model: str | None = None
    answers: tuple[str, ...] | None = None  # the gold answers, when recorded


def document_path(base: Path, written: str) -> Path:
    """``written`` (absolute, or relative to ``base``) as an absolute, normalised path."""
    return Path(os.path.normpath(base.absolute() / Path(written).expanduser()))


def recorded_prediction(value: Any) -> str | None:
    """A record's prediction, or None when it has none (null, false, empty: an upstream call that failed)."""
    if value is None or value is False or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str):
        raise RecordError(f"'prediction' must be a string (or null when the call failed), not {kind_of(value)}")
    return value


def gold_answers(record: dict) -> tuple[str, ...] | None:
    """The record's ``answers`` (a list or one string) or ``answer``; None when it has neither."""
    for name in ("answers", "answer"):
        if record.get(name) is not None:
            return tuple(string_list(record[name], name))
    return None


def parse_recording(record: Any, path: Path, n: int, documents: dict[Path, bool] | None = None) -> Recording:
    """Line ``n`` of the recordings file ``path``, checked (a :class:`RecordError` saying what is wrong).
    ``documents`` remembers which document paths exist, so a file of many records per document stats each once."""
    if not isinstance(record, dict):
        raise RecordError(f"a record must be a JSON object, not {kind_of(record)}")
    need_fields(record, *FIELDS)
    question = string_field(record["question"], "question").strip()
    if not question:
        raise RecordError("'question' is empty")
    mode = record["mode"]
    if mode not in MODES:
        raise RecordError(f"'mode' must be 'lc' or 'rag', not {mode!r}")
    document = document_path(path.parent, string_field(record["document"], "document"))
    exists = documents.get(document) if documents is not None else None
    if exists is None:
        exists = document.is_file()
        if documents is not None:
            documents[document] = exists
    if not exists:
        raise RecordError(f"document {document} does not exist (paths are relative to {path.parent})")
    model = record.get("model")
    if model is not None:
        model = string_field(model, "model")
    return Recording(question, document, mode, recorded_prediction(record["prediction"]), f"{path}:{n}", model,
                     gold_answers(record))


def recording_groups(path: Path, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> Iterator[tuple[int, Any]]:
    """The recordings file as one record per distinct (question, document), numbered by its first line: question,
    document, the gold answers (None when no line has any) and the lines it was recorded on. A bad line is yielded
    as its :class:`RecordError` (the loader stops, or skips it with ``--skip-bad``)."""
    groups: dict[tuple[str, Path], dict] = {}
    documents: dict[Path, bool] = {}
    for n, record in jsonl_records(path, max_bytes):
        if isinstance(record, RecordError):
            yield n, record
            continue
        try:
            recording = parse_recording(record, path, n, documents)
        except RecordError as exc:
            yield n, exc
            continue
        group = groups.setdefault((recording.question, recording.document), {
            "question": recording.question, "document": str(recording.document), "written": record["document"],
            "line": n, "lines": [], "answers": None, "answers_line": None})
        group["lines"].append(n)
        if recording.answers is not None:
            if group["answers"] is None:
                group["answers"], group["answers_line"] = list(recording.answers), n
            elif list(recording.answers) != group["answers"]:
                yield n, RecordError(f"gold answers differ from those of line {group['answers_line']} for the same "
                                     "question and document")
    for group in groups.values():
        yield group["line"], group
