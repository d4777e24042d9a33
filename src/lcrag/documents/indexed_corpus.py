"""A corpus index (a directory written by ``lcrag corpus build``) standing where a document stands, so every
strategy can answer over it. Kept light: recognising one must not import the retrieval side
(:mod:`lcrag.retrieval.corpus.source` reads its units)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import ClassVar

from lcrag.core.errors import InputError
from lcrag.core.registry import PartSpec
from lcrag.core.types import CORPUS, IndexParts, LongRead, SourceIndex


def is_corpus_index(path: str | Path) -> bool:
    """Whether ``path`` is a directory written by ``lcrag corpus build`` (its meta.json and corpus.sqlite)."""
    path = Path(path)
    return path.is_dir() and (path / "meta.json").is_file() and (path / "corpus.sqlite").is_file()


@dataclass(frozen=True)
class CorpusSource:
    """A corpus index standing where a document stands (a :class:`~lcrag.core.types.QuestionSource` of kind "corpus").
    It has no text: the corpus is read unit by unit, by the strategies that declare they read a corpus. Its
    ``content_hash`` is the corpus content's (sha256 of the source, and the piece size), so caches key on it."""

    kind: ClassVar[str] = CORPUS
    text: ClassVar[None] = None  # no one text: its units carry their own
    id: str
    source: str
    directory: str
    unit: str | None = None  # the units to retrieve; None: the smallest built (passage, then document, then grouped)
    title: str = ""

    @classmethod
    def open(cls, path: str | Path, unit: str | None = None) -> CorpusSource:
        path = Path(path)
        if not is_corpus_index(path):
            raise InputError(f"{path} is not a corpus index (no meta.json and corpus.sqlite); build one with "
                             "`lcrag corpus build`")
        return cls(id=path.name, source=str(path), directory=str(path.resolve()), unit=unit)

    def open_index(self, parts: IndexParts) -> SourceIndex:
        """Its units (of its own kind, else the question's, else the smallest built), opened once."""
        if parts.chosen_chunking is not None:
            raise InputError(f"--chunking does not apply to a corpus index: {self.source}'s units were made by "
                             "`lcrag corpus build`")
        return parts.unit_index(self.directory, self.unit or parts.unit)

    def long_read(self, index: Callable[[], SourceIndex], retriever: PartSpec) -> LongRead | None:
        """A whole corpus fits no window: LC reads the units ``retriever`` ranks best, whole, while they fit."""
        return lambda question, tokenizer, limit: index().read_best(question, retriever, tokenizer, limit)

    @cached_property
    def content_hash(self) -> str:
        try:
            meta = json.loads((Path(self.directory) / "meta.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise InputError(f"{self.directory}/meta.json cannot be read: {error}") from None
        if not isinstance(meta, dict) or "source_sha256" not in meta:
            raise InputError(f"{self.directory} is not finished building; resume it with `lcrag corpus build`")
        return f"corpus:{meta['source_sha256']}:{meta.get('piece_words')}:{self.unit or ''}"
