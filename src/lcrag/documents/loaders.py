"""Load documents from .txt/.md files, directories of them, or JSONL.

Each loader registers in :data:`lcrag.registry.LOADERS` with the suffixes it reads (meta ``suffixes``); a file
whose suffix no loader claims is read by the ``default`` one (plain text). A new format is one new module in
``lcrag.documents`` (or a plugin) registering its suffixes."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from lcrag.documents.files import decode_text, read_regular_file
from lcrag.errors import InputError
from lcrag.registry import LOADERS, Part, spoken_list
from lcrag.types import Document

log = logging.getLogger(__name__)


def _read_text(path: Path) -> str:
    # Regular files only, within the size limit, decoded or refused: a FIFO, a device or random bytes never get in.
    return decode_text(path, read_regular_file(path))


@LOADERS.register("text", help="plain text or Markdown, one document per file (and any file no loader claims)",
                  default=True, suffixes=(".txt", ".md", ".markdown", ".text"), forms=(".txt", ".md"))
def load_text_file(path: Path) -> list[Document]:
    text = _read_text(path)
    if not text.strip():
        raise InputError(f"{path} is empty")
    return [Document(text=text, id=path.stem, title=path.stem, source=str(path))]


@LOADERS.register("jsonl", help="JSON Lines, one document per record: 'text', optional 'id' and 'title'",
                  suffixes=(".jsonl", ".ndjson"), forms=(".jsonl",))
def load_jsonl(path: Path) -> list[Document]:
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


def _loader_for(path: Path) -> Part:
    """The loader registered for ``path``'s suffix (case-insensitive), else the default one."""
    parts = LOADERS.parts()
    suffix = path.suffix.lower()
    claimed = [p for p in parts if suffix in p.meta.get("suffixes", ())]
    return (claimed or [p for p in parts if p.meta.get("default")])[0]


def _readable_suffixes() -> set[str]:
    return {suffix for part in LOADERS.parts() for suffix in part.meta.get("suffixes", ())}


def _document_files(directory: Path) -> list[Path]:
    """The directory's files some loader reads (.txt, .md, .jsonl, ...), recursively, sorted; pipes, sockets,
    devices and broken links with those names are skipped with a warning (reading a pipe would block)."""
    suffixes = _readable_suffixes()
    named = sorted(f for f in directory.rglob("*") if f.suffix.lower() in suffixes)
    files = [f for f in named if f.is_file()]  # follows links, True only for regular files
    skipped = [str(f) for f in named if not f.is_file() and not f.is_dir()]
    if skipped:
        log.warning("skipped %d entries that are not regular files (pipes, sockets, devices, broken links): %s",
                    len(skipped), ", ".join(skipped[:5]) + (" ..." if len(skipped) > 5 else ""))
    return files


def load_documents(path: str | Path) -> list[Document]:
    """Every document at ``path``: a file (read by the loader registered for its suffix), or a directory (its
    files some loader reads, e.g. .txt, .md and .jsonl, recursively, sorted by path)."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p} does not exist")
    if p.is_dir():
        files = _document_files(p)
        if not files:
            forms = [f for part in LOADERS.parts() for f in part.meta.get("forms", part.meta.get("suffixes", ()))]
            raise InputError(f"{p} holds no {spoken_list(forms)} files")
        docs: list[Document] = []
        for f in files:
            docs.extend(load_documents(f))
        return docs
    return list(_loader_for(p).create(p))


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
