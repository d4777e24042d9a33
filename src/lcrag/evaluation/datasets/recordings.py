"""The ``recordings`` dataset format: a recorded-answers JSONL (:mod:`lcrag.readers.recordings`, which the replay
reader answers from) as one item per distinct question and document, scored against its gold answer(s)."""

from __future__ import annotations

from pathlib import Path

from lcrag.documents.records import RecordError
from lcrag.evaluation.datasets.items import EvalItem
from lcrag.readers.recordings import FIELDS, recording_groups
from lcrag.core.registry import DATASET_FORMATS


def _document_text(path: Path) -> str:
    """The document read as ``lcrag ask`` reads a text file (the replay reader hashes it the same way)."""
    from lcrag.documents.loaders import read_text
    from lcrag.core.errors import InputError

    try:
        return read_text(path)
    except InputError as exc:
        raise RecordError(f"document {exc}") from None


@DATASET_FORMATS.register("recordings", help="recorded answers JSONL (question, document, mode, prediction, optional "
                          "model, answer/answers): one item per distinct question and document; detected by its fields",
                          records=recording_groups, fields=FIELDS, line_numbers=True)
def _recordings(group: dict, path: Path, n: int) -> list[EvalItem]:
    if group["answers"] is None:
        lines = ", ".join(str(line) for line in group["lines"])
        raise RecordError(f"no gold answer ('answer' or 'answers') on any line of this question and document "
                          f"(lines {lines}): a question is scored against one")
    return [EvalItem(id=str(n), dataset=path.stem, question=group["question"], answers=group["answers"],
                     context=_document_text(Path(group["document"])), task="generic", metric="qa_f1",
                     meta={"document": group["written"], "recorded_lines": group["lines"]})]
