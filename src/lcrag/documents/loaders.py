"""Load documents from .txt/.md files, directories of them, or JSONL."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from lcrag.documents.files import decode_text, read_regular_file
from lcrag.errors import InputError
from lcrag.types import Document

log = logging.getLogger(__name__)

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".text"}
JSONL_SUFFIXES = {".jsonl", ".ndjson"}


def _read_text(path: Path) -> str:
    # Regular files only, within the size limit, decoded or refused: a FIFO, a device or random bytes never get in.
    return decode_text(path, read_regular_file(path))


def _load_text_file(path: Path) -> Document:
    text = _read_text(path)
    if not text.strip():
        raise InputError(f"{path} is empty")
    return Document(text=text, id=path.stem, title=path.stem, source=str(path))


def _load_jsonl(path: Path) -> list[Document]:
    text = _read_text(path)
    docs: list[Document] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise InputError(f"{path}:{lineno}: each record needs a string field 'text'")
        if not record["text"].strip():
            raise InputError(f"{path}:{lineno}: 'text' is empty")
        docs.append(
            Document(
                text=record["text"],
                id=str(record.get("id", f"{path.stem}-{lineno}")),
                title=str(record.get("title", "")),
                source=f"{path}:{lineno}",
            )
        )
    if not docs:
        raise InputError(f"{path} holds no records")
    return docs


def _document_files(directory: Path) -> list[Path]:
    """The directory's .txt, .md and .jsonl regular files, recursively, sorted; pipes, sockets, devices and broken
    links with those names are skipped with a warning (reading a pipe would block)."""
    named = sorted(f for f in directory.rglob("*") if f.suffix.lower() in TEXT_SUFFIXES | JSONL_SUFFIXES)
    files = [f for f in named if f.is_file()]  # follows links, True only for regular files
    skipped = [str(f) for f in named if not f.is_file() and not f.is_dir()]
    if skipped:
        log.warning("skipped %d entries that are not regular files (pipes, sockets, devices, broken links): %s",
                    len(skipped), ", ".join(skipped[:5]) + (" ..." if len(skipped) > 5 else ""))
    return files


def load_documents(path: str | Path) -> list[Document]:
    """Every document at ``path``: a text file, a JSONL file, or a directory (its .txt, .md and .jsonl files, recursively, sorted by path)."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p} does not exist")
    if p.is_dir():
        files = _document_files(p)
        if not files:
            raise InputError(f"{p} holds no .txt, .md or .jsonl files")
        docs: list[Document] = []
        for f in files:
            docs.extend(load_documents(f))
        return docs
    if p.suffix.lower() in JSONL_SUFFIXES:
        return _load_jsonl(p)
    return [_load_text_file(p)]


def load_document(path: str | Path) -> Document:
    """One document from ``path``; several files or records are joined in order, separated by blank lines."""
    docs = load_documents(path)
    if len(docs) == 1:
        return docs[0]
    pieces, offsets, at = [], [], 0
    for d in docs:
        head = f"{d.title}\n\n" if d.title else ""
        offsets.append(at + len(head))  # where the part's own text starts in the joined text
        pieces.append(head + d.text)
        at += len(head) + len(d.text) + 2
    return Document(text="\n\n".join(pieces), id=Path(path).stem, title=Path(path).stem, source=str(path),
                    parts=tuple(zip(offsets, docs)))
