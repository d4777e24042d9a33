"""LaRA's locked test set: which (reader, document) pairs may be fitted on, and which are only ever scored.

Issue 44: three of the ten shared readers (the most different answer styles) and 30% of LaRA's documents were set
aside before any further fitting (``benchmarks/lock_lara_split.py`` chose them; the choice ships as
``calibration/lara_locked_split.json``). A (reader, document) pair is

- ``"train"``: a training reader on a training document — the only rows any fit, model selection or calibration
  may read;
- ``"test"``: a test reader on a test document — scored once per shipped router, never fitted on;
- ``None``: neither (a test reader on a training document, a training reader on a test document, or a reader or
  document the split does not know): left out of both, so that the test part holds neither the test readers'
  styles nor the test documents' questions anywhere in training.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from types import MappingProxyType
from typing import Literal, Mapping, Protocol, TypeVar

from lcrag.core.errors import InputError
from lcrag.evaluation.routing.report import fit_router
from lcrag.strategies.routing.learned import Router

Part = Literal["train", "test"]
FORMAT = "lcrag-locked-split"


class Answered(Protocol):
    """A reader's answer to a question in a run directory named after the reader (route_report's ``Question``)."""

    run: str
    item_id: str


A = TypeVar("A", bound=Answered)


def reader_of(answer: Answered) -> str:
    """The reader of an answer: its run directory's name, as benchmarks/run_eval_lara.sh names them."""
    return Path(answer.run).name


@dataclass(frozen=True)
class LockedSplit:
    """The locked split; :meth:`part` answers for a (reader, document), :meth:`part_of_item` for a question."""

    name: str
    test_readers: frozenset[str]
    train_readers: frozenset[str]
    test_documents: frozenset[str]
    train_documents: frozenset[str]
    document_of: Mapping[str, str]  # question id (``32k_book_location/17``) -> document (``32k/book/X.txt``)

    def part(self, reader: str, document: str) -> Part | None:
        """Which part the pair is in: "train", "test", or None (neither)."""
        if reader in self.train_readers and document in self.train_documents:
            return "train"
        if reader in self.test_readers and document in self.test_documents:
            return "test"
        return None

    def part_of_item(self, reader: str, item_id: str) -> Part | None:
        """The part of ``reader``'s answer to the question ``item_id`` (None for a question the split does not
        know)."""
        document = self.document_of.get(item_id)
        return None if document is None else self.part(reader, document)

    def part_of_answer(self, answer: Answered) -> Part | None:
        return self.part_of_item(reader_of(answer), answer.item_id)

    def partition(self, answers: list[A]) -> tuple[list[A], list[A], list[A]]:
        """The answers on the training part, on the test part, and on neither (each in the order given)."""
        parts: dict[Part | None, list[A]] = {"train": [], "test": [], None: []}
        for answer in answers:
            parts[self.part_of_answer(answer)].append(answer)
        return parts["train"], parts["test"], parts[None]

    def training_only(self, answers: list[A]) -> list[A]:
        """``answers`` when every one is on the training part; an InputError naming the first that is not."""
        outside = [a for a in answers if self.part_of_answer(a) != "train"]
        if outside:
            first = outside[0]
            raise InputError(f"{len(outside)} of {len(answers)} answers are outside the training part of the "
                             f"locked split {self.name!r} (the first: {reader_of(first)} on {first.item_id}, "
                             f"{self.part_of_answer(first) or 'in neither part'}): fit on the training part only")
        return answers

    @classmethod
    def from_dict(cls, data: dict) -> LockedSplit:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InputError(f"not a locked split (its 'format' is not {FORMAT!r})")
        try:
            test, train = data["test_documents"], data["train_documents"]
            split = cls(str(data["name"]), frozenset(data["test_readers"]), frozenset(data["train_readers"]),
                        frozenset(test), frozenset(train),
                        MappingProxyType({i: d for part in (test, train) for d, items in part.items() for i in items}))
        except (KeyError, TypeError, AttributeError) as exc:
            raise InputError(f"locked split {data.get('name')!r} is malformed: {exc}") from None
        overlap = (split.test_readers & split.train_readers) | (split.test_documents & split.train_documents)
        if overlap:
            raise InputError(f"locked split {split.name!r} puts {sorted(overlap)[0]!r} in both parts")
        return split

    @classmethod
    def load(cls, path: str | Path | None = None) -> LockedSplit:
        """The split in ``path``, or the shipped LaRA split."""
        try:
            text = (Path(path).read_text(encoding="utf-8") if path is not None else
                    files("lcrag.evaluation").joinpath("calibration", "lara_locked_split.json").read_text("utf-8"))
            return cls.from_dict(json.loads(text))
        except OSError as exc:
            raise InputError(f"cannot read the locked split {path}: {exc.strerror}") from None
        except ValueError as exc:
            raise InputError(f"locked split {path or 'lara'} is not JSON: {exc}") from None


def fit_training_router(answers: list, split: LockedSplit, model: str = "trees") -> Router:
    """:func:`lcrag.evaluation.routing.report.fit_router` on ``answers``, refusing any answer outside the split's
    training part: what every fit and calibration of a LaRA router goes through."""
    return fit_router(split.training_only(answers), model)
