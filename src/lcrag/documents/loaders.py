"""Load documents from .txt/.md files, directories of them, or JSONL."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from lcrag.errors import InputError
from lcrag.types import Document

log = logging.getLogger(__name__)

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".text"}
JSONL_SUFFIXES = {".jsonl", ".ndjson"}
# A share of NUL bytes this high in the first block means the file is binary, not text.
_BINARY_SNIFF_BYTES = 8192


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None


def _decode(path: Path, data: bytes) -> str:
    if b"\x00" in data[:_BINARY_SNIFF_BYTES]:
        raise InputError(f"{path} looks like a binary file, not text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        bad = text.count("\ufffd")
        log.warning("%s: %d undecodable byte sequence(s) replaced with U+FFFD", path, bad)
        return text


def _load_text_file(path: Path) -> Document:
    text = _decode(path, _read_bytes(path))
    if not text.strip():
        raise InputError(f"{path} is empty")
    return Document(text=text, id=path.stem, title=path.stem, source=str(path))


def _load_jsonl(path: Path) -> list[Document]:
    text = _decode(path, _read_bytes(path))
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


def load_documents(path: str | Path) -> list[Document]:
    """Every document at ``path``: a text file, a JSONL file, or a directory (its .txt, .md and .jsonl files, recursively, sorted by path)."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p} does not exist")
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in TEXT_SUFFIXES | JSONL_SUFFIXES)
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
