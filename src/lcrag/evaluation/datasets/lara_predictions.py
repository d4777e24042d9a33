"""LaRA's recorded answers as the replay reader's recordings: a predictions folder of one model.

The folder is ``ROOT/predictions/MODEL`` holding ``{full,rag}_preds_MODEL_{length}_{type}_{task}.jsonl`` (``full`` is
LC, ``rag`` RAG), one record per question with ``file``, ``question``, ``prediction`` and ``ground_truth``; the
documents are ``ROOT/datasets/{length}/{type}/{file}``. That layout is the dataset's, so it lives here, beside the
questions' (:mod:`lcrag.evaluation.datasets.lara`): the replay reader (:mod:`lcrag.readers.replay`) is handed it
through the ``lara`` dataset format's ``predictions`` (``DATASET_FORMATS``), and knows no folder layout itself."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lcrag.documents.records import RecordError, answer_text, jsonl_records, need_fields, string_field
from lcrag.core.errors import InputError
from lcrag.readers.recordings import Recording, document_path, recorded_prediction

PREDICTION_FILE = re.compile(r"^(full|rag)_preds_(.+)_(\d+k)_([A-Za-z]+)_([A-Za-z]+)\.jsonl$")
PREDICTION_FORM = "{full,rag}_preds_MODEL_LENGTH_TYPE_TASK.jsonl"


@dataclass
class PredictionFolder:
    """One model's recorded answers: its name, its files (what the recordings are) and the recordings, each with
    whether its document is missing (upstream data that cannot be fixed here: counted and skipped, not an error)."""

    model: str
    files: list[Path]
    records: Iterator[tuple[Recording, bool]]


def prediction_folder(directory: Path) -> PredictionFolder:
    """The recordings of a LaRA predictions folder; one that is not one is an :class:`InputError` naming the form."""
    files = sorted(p for p in directory.iterdir() if p.suffix == ".jsonl")
    if not files:
        raise InputError(f"{directory} holds no LaRA prediction files ({PREDICTION_FORM})")
    for f in files:
        if not PREDICTION_FILE.match(f.name):
            raise InputError(f"{f}: not a LaRA prediction file; their names are {PREDICTION_FORM}")
    return PredictionFolder(directory.name, files, _records(directory, files))


def _records(directory: Path, files: list[Path]) -> Iterator[tuple[Recording, bool]]:
    """Each file's records as recordings (fields file, question, prediction, ground_truth), with whether the
    document is missing (the shared copy lacks one book)."""
    datasets = directory.absolute().parent.parent / "datasets"
    exists: dict[Path, bool] = {}
    for f in files:
        kind, _, length, doc_type, _ = PREDICTION_FILE.match(f.name).groups()
        mode = "lc" if kind == "full" else "rag"
        for n, record in jsonl_records(f):
            try:
                if isinstance(record, RecordError):
                    raise record
                if not isinstance(record, dict):
                    raise RecordError("a record must be a JSON object")
                need_fields(record, "file", "question", "prediction")
                question = string_field(record["question"], "question").strip()
                document = document_path(datasets, f"{length}/{doc_type}/{string_field(record['file'], 'file')}")
                missing = not exists.setdefault(document, document.is_file())
                gold = record.get("ground_truth")
                yield Recording(question, document, mode, recorded_prediction(record["prediction"]), f"{f}:{n}",
                                directory.name, (answer_text(gold, "ground_truth"),) if gold is not None else None
                                ), missing
            except RecordError as exc:
                raise InputError(f"{f}:{n}: {exc}") from None
