"""What a dataset loads into: one question with its gold answers (and its document, unless a corpus holds it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
