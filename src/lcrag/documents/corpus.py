"""A document collection on disk: streamed in from JSONL, kept in SQLite, read back by position.

Ingestion reads one line at a time and inserts in batches, so memory is bounded by the batch, never by the corpus
(1M passages ingest in a flat ~60 MiB). Documents get a dense position ``idx`` (0..N-1) in file order: retrieval
units, piece embeddings and BM25 hits all refer to documents by that position.
"""

from __future__ import annotations

import codecs
import gzip
import json
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from lcrag.documents.files import check_regular_file
from lcrag.core.errors import InputError

SCHEMA = """
CREATE TABLE docs (idx INTEGER PRIMARY KEY, id TEXT NOT NULL, title TEXT NOT NULL, text TEXT NOT NULL, links TEXT);
"""


@dataclass(frozen=True)
class CorpusDocument:
    idx: int
    id: str
    title: str
    text: str
    links: tuple[str, ...] = ()


@dataclass
class IngestReport:
    documents: int = 0
    skipped: int = 0
    errors: list[str] = field(default_factory=list)  # the first few skipped records, "file:line: why"


def _open(path: Path):
    """The corpus's raw lines; the caller has checked that it is a regular file."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")


_UTF16_32_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)  # the UTF-32 marks begin with these


def _decode_line(source: Path, raw: bytes, lineno: int) -> str:
    """One line as UTF-8, strictly: a corpus is streamed line by line, so there is no whole file to detect an
    encoding from, and a wrong guess would index garbage. Undecodable lines are bad records (``--skip-bad``)."""
    if lineno == 1:
        if raw.startswith(_UTF16_32_BOMS):
            raise InputError(f"{source} is UTF-16 or UTF-32 text; corpora are read as UTF-8: save it as UTF-8")
        raw = raw.removeprefix(codecs.BOM_UTF8)
    if b"\x00" in raw:
        raise ValueError("holds NUL bytes: binary data or UTF-16 text, not UTF-8")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                         f"save the corpus as UTF-8") from None


def _parse(line: str, lineno: int) -> tuple[str, str, str, str | None]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON ({exc.msg})") from None
    if not isinstance(record, dict):
        raise ValueError("expected a JSON object")
    text = record.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ValueError("missing or empty 'text'")
    title = record.get("title", "")
    if not isinstance(title, str):
        raise ValueError("'title' must be a string")
    doc_id = record.get("id", lineno)
    if not isinstance(doc_id, (str, int)):
        raise ValueError("'id' must be a string or an integer")
    links = record.get("links")
    if links is not None:
        if not isinstance(links, list) or not all(isinstance(x, (str, int)) for x in links):
            raise ValueError("'links' must be a list of titles or ids")
        links = json.dumps([str(x) for x in links], ensure_ascii=False)
    return str(doc_id), title, text, links


def _new_database(path: Path) -> sqlite3.Connection:
    """An empty store being written: no journal nor syncs (a failed ingest deletes the file anyway)."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    db.executescript(SCHEMA)
    return db


def _insert(db: sqlite3.Connection, rows: list[tuple], progress: Callable[[int], None] | None) -> None:
    db.executemany("INSERT INTO docs VALUES (?, ?, ?, ?, ?)", rows)
    if progress:
        progress(len(rows))
    rows.clear()


def _records(source: Path, skip_bad: bool, report: IngestReport) -> Iterator[tuple[str, str, str, str | None]]:
    """The corpus's records, one line at a time; a malformed one raises, naming file and line, or with
    ``skip_bad`` is counted in ``report`` (the first 20 with their reason) and left out."""
    with _open(source) as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                yield _parse(_decode_line(source, raw, lineno), lineno)
            except ValueError as exc:
                if not skip_bad:
                    raise InputError(f"{source}:{lineno}: {exc}") from None
                report.skipped += 1
                if len(report.errors) < 20:
                    report.errors.append(f"{source}:{lineno}: {exc}")


class CorpusStore:
    """Read access to an ingested corpus (``corpus.sqlite``)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.exists():
            raise InputError(f"no corpus store at {self.path}")
        # check_same_thread off: the store is read-only after ingestion, and evaluation threads share it.
        self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
        self._len = self._db.execute("SELECT COUNT(*) FROM docs").fetchone()[0]

    @classmethod
    def ingest(
        cls,
        source: str | Path,
        path: str | Path,
        batch: int = 2000,
        skip_bad: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[CorpusStore, IngestReport]:
        """Stream ``source`` (JSONL, optionally .gz; fields ``id``, ``title``, ``text``, optional ``links``) into
        ``path``. A malformed record is an error naming file and line, or is skipped and counted with ``skip_bad``."""
        source, path = Path(source), Path(path)
        if not source.exists():
            raise InputError(f"corpus file not found: {source}")
        # A pipe or a device is refused before it is opened (reading one could block or never end). No size limit:
        # the corpus is streamed, so memory stays bounded by the batch.
        check_regular_file(source, max_bytes=sys.maxsize)
        tmp = path.with_name(path.name + ".partial")
        tmp.unlink(missing_ok=True)
        db = _new_database(tmp)
        report = IngestReport()
        rows: list[tuple] = []
        try:
            for doc_id, title, text, links in _records(source, skip_bad, report):
                rows.append((report.documents, doc_id, title, text, links))
                report.documents += 1
                if len(rows) >= batch:
                    _insert(db, rows, progress)
            if rows:
                _insert(db, rows, progress)
            if report.documents == 0:
                raise InputError(f"{source} holds no documents")
        except InputError:
            db.close()
            tmp.unlink(missing_ok=True)
            raise
        except (OSError, EOFError, UnicodeError) as exc:
            db.close()
            tmp.unlink(missing_ok=True)
            raise InputError(f"cannot read corpus {source}: {exc}") from None
        db.execute("CREATE INDEX docs_title ON docs(title)")
        db.commit()
        db.close()
        os.replace(tmp, path)
        return cls(path), report

    def __len__(self) -> int:
        return self._len

    @staticmethod
    def _doc(row: tuple) -> CorpusDocument:
        idx, doc_id, title, text, links = row
        return CorpusDocument(idx, doc_id, title, text, tuple(json.loads(links)) if links else ())

    def get(self, idx: int) -> CorpusDocument:
        row = self._db.execute("SELECT * FROM docs WHERE idx = ?", (int(idx),)).fetchone()
        if row is None:
            raise IndexError(idx)
        return self._doc(row)

    def get_many(self, idxs: list[int]) -> list[CorpusDocument]:
        """Documents in the order asked for."""
        found: dict[int, CorpusDocument] = {}
        for start in range(0, len(idxs), 500):  # SQLite's bound-parameter limit
            part = [int(i) for i in idxs[start : start + 500]]
            marks = ",".join("?" * len(part))
            for row in self._db.execute(f"SELECT * FROM docs WHERE idx IN ({marks})", part):
                found[row[0]] = self._doc(row)
        return [found[int(i)] for i in idxs]

    def iter(self, start: int = 0, stop: int | None = None, batch: int = 2000) -> Iterator[CorpusDocument]:
        """Documents in position order, fetched ``batch`` at a time."""
        stop = len(self) if stop is None else min(stop, len(self))
        for lo in range(start, stop, batch):
            hi = min(lo + batch, stop)
            for row in self._db.execute("SELECT * FROM docs WHERE idx >= ? AND idx < ? ORDER BY idx", (lo, hi)):
                yield self._doc(row)

    def iter_titles(self) -> Iterator[tuple[int, str]]:
        yield from self._db.execute("SELECT idx, title FROM docs ORDER BY idx")

    def lookup(self, keys: list[str]) -> dict[str, int]:
        """Positions of documents whose title or id is in ``keys`` (links may name either; the first one wins)."""
        out: dict[str, int] = {}
        for start in range(0, len(keys), 400):
            part = keys[start : start + 400]
            marks = ",".join("?" * len(part))
            for idx, doc_id, title in self._db.execute(
                f"SELECT idx, id, title FROM docs WHERE title IN ({marks}) OR id IN ({marks}) ORDER BY idx", part + part
            ):
                for key in (title, doc_id):
                    if key in part:
                        out.setdefault(key, idx)
        return out

    def close(self) -> None:
        self._db.close()
