"""Load documents from files (plain text, JSONL, and every format a loader registers: PDF, DOCX, HTML, EPUB,
Markdown) or directories of them.

Each loader registers in :data:`lcrag.core.registry.LOADERS` with the suffixes it reads (meta ``suffixes``); a file
whose suffix no loader claims is read by the ``default`` one (plain text). A new format is one new module in
``lcrag.documents`` (or a plugin) registering its suffixes."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from lcrag.documents.files import DEFAULT_MAX_FILE_BYTES, decode_text, read_regular_file
from lcrag.documents.limits import ParseLimits, TextBudget
from lcrag.core.errors import InputError
from lcrag.core.registry import LOADERS, Part, spoken_list
from lcrag.core.types import Document

log = logging.getLogger(__name__)


def read_text(path: Path, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> str:
    # Regular files only, within the size limit, decoded or refused: a FIFO, a device or random bytes never get in.
    return decode_text(path, read_regular_file(path, max_bytes))


@LOADERS.register("text", help="plain text, one document per file (and any file no loader claims)",
                  default=True, suffixes=(".txt", ".text"), forms=(".txt",))
def load_text_file(path: Path, limits: ParseLimits) -> list[Document]:
    try:
        text = read_text(path, limits.file_bytes)
    except InputError as exc:
        if path.suffix.lower() not in (".txt", ".text", "") and "binary" in str(exc):
            raise InputError(f"{path}: {path.suffix} is not a format lcrag reads (it reads {spoken_list(_forms())}); "
                             "convert it to one of them") from None
        raise
    if not text.strip():
        raise InputError(f"{path} is empty")
    TextBudget(path, limits).add(len(text))
    return [Document(text=text, id=path.stem, title=path.stem, source=str(path))]


@LOADERS.register("jsonl", help="JSON Lines, one document per record: 'text', optional 'id' and 'title'",
                  suffixes=(".jsonl", ".ndjson"), forms=(".jsonl",))
def load_jsonl(path: Path, limits: ParseLimits) -> list[Document]:
    text = read_text(path, limits.file_bytes)
    budget = TextBudget(path, limits)
    docs: list[Document] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
        except RecursionError:  # json recurses per level: a record nested 100,000 deep exhausts the stack
            raise InputError(f"{path}:{lineno}: JSON nested too deeply to read") from None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise InputError(f"{path}:{lineno}: each record needs a string field 'text'")
        if not record["text"].strip():
            raise InputError(f"{path}:{lineno}: 'text' is empty")
        budget.add(len(record["text"]))
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


def _forms() -> list[str]:
    return [f for part in LOADERS.parts() for f in part.meta.get("forms", part.meta.get("suffixes", ()))]


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


def load_documents(path: str | Path, limits: ParseLimits | None = None) -> list[Document]:
    """Every document at ``path``: a file (read by the loader registered for its suffix), or a directory (its
    files some loader reads, e.g. .txt, .md and .jsonl, recursively, sorted by path); each file read within
    ``limits`` (None: the defaults), which the loader is given with it."""
    p = Path(path)
    limits = limits or ParseLimits()
    if not p.exists():
        raise InputError(f"{p} does not exist")
    if p.is_dir():
        return _load_directory(p, limits)
    return list(_loader_for(p).create(p, limits))


def _load_directory(directory: Path, limits: ParseLimits) -> list[Document]:
    """Every readable file's documents; a file that cannot be read (no text layer, encrypted, damaged) is reported
    and skipped, with a count, so the good ones are still answered. Refused only when no file can be read."""
    files = _document_files(directory)
    if not files:
        raise InputError(f"{directory} holds no {spoken_list(_forms())} files")
    docs, failed = load_files(files, limits=limits)
    if failed and not docs:
        raise InputError(f"none of the {len(files)} file(s) in {directory} could be read; the first: {failed[0]}")
    if failed:
        log.warning("skipped %d of %d file(s) in %s that could not be read", len(failed), len(files), directory)
    return docs


def load_files(files: list[Path], progress=None, limits: ParseLimits | None = None) -> tuple[list[Document], list[str]]:
    """The documents of ``files``, and one line for each file that could not be read (skipped, with a warning);
    ``progress(done, total)`` after each file. A file a parser fails on in a way of its own (a damaged file it
    did not foresee) is skipped too, so one file never stops the others."""
    docs: list[Document] = []
    failed: list[str] = []
    for i, f in enumerate(files):
        try:
            docs.extend(load_documents(f, limits))
        except InputError as exc:
            failed.append(str(exc))
            log.warning("skipped %s", exc)
        except Exception as exc:  # noqa: BLE001 - any parser's own failure on one damaged file
            failed.append(f"{f}: could not be read ({type(exc).__name__}: {str(exc)[:200]})")
            log.warning("skipped %s", f, exc_info=True)
        if progress:
            progress(i + 1, len(files))
    return docs, failed


def load_document(path: str | Path, limits: ParseLimits | None = None) -> Document:
    """One document from ``path`` (read within ``limits``; None: the defaults); several files or records are joined
    in order, separated by blank lines."""
    return join_documents(load_documents(path, limits), Path(path))


def join_documents(docs: list[Document], path: Path) -> Document:
    """``docs`` as one document named after ``path`` (each part's title as a heading before its text); the parts
    keep their offsets, so every part's pages and sections are still cited."""
    if len(docs) == 1:
        return docs[0]
    pieces, offsets, at = [], [], 0
    for d in docs:
        head = f"{d.title}\n\n" if d.title else ""
        offsets.append(at + len(head))  # where the part's own text starts in the joined text
        pieces += [head, d.text, "\n\n"]  # (joined once: the texts are copied once, not twice)
        at += len(head) + len(d.text) + 2
    return Document(text="".join(pieces[:-1]), id=path.stem, title=path.stem, source=str(path),
                    parts=tuple(zip(offsets, docs)))
