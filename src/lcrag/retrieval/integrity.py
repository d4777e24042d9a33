"""Integrity and build safety of a derived-index directory (a document's chunks, BM25 index, embeddings, tables).

Each *artifact* (a named group of files or directories in the index directory) is recorded in ``manifest.json``
with every file's size and CRC-32, written atomically and only after the artifact itself is complete. Before an
artifact is used its files are checked against the manifest; one that is missing from it, damaged or unreadable is
set aside (:func:`lcrag.core.files.set_aside`, one warning line) and rebuilt. Builds run under an inter-process file
lock beside the directory and write into temporary files that are renamed into place, so processes that share a
cache build each artifact once, and a process that waited reuses what the first one built.

Why CRC-32 over every byte, not a sampled hash: damage such as rows of an embedding matrix zeroed in place keeps
the file's size and shape, so every byte must be read; zlib's CRC-32 does that at several GB/s (about 4x blake2b
here), which keeps the check a few percent of a warm query (see ``benchmarks/results/hardening.md``). It guards
against accidents (truncation, torn or zeroed writes, edits), not against someone forging a matching file.
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from lcrag.core.files import atomic_write_text, file_lock, set_aside

log = logging.getLogger("lcrag")

T = TypeVar("T")
MANIFEST = "manifest.json"
_BLOCK = 1 << 20
# Lock files tantivy creates and touches while an index is open: not part of the index's content.
_NOT_CONTENT = (".tantivy-meta.lock", ".tantivy-writer.lock")


class ArtifactDamaged(Exception):
    """Internal: an artifact's files fail their check or cannot be parsed; it is set aside and rebuilt, never shown."""


def file_checksum(path: Path) -> str:
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            crc = zlib.crc32(block, crc)
    return f"{crc:08x}"


def _content_files(root: Path, names: Iterable[str]) -> list[Path]:
    files: list[Path] = []
    for name in names:
        path = root / name
        if path.is_dir():
            files.extend(p for p in sorted(path.rglob("*")) if p.is_file() and p.name not in _NOT_CONTENT)
        elif path.exists():
            files.append(path)
    return files


class ArtifactStore:
    """The artifacts of one index directory, each checked before use and built once under a lock."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        # Beside the directory, not in it: a damaged directory can be set aside without moving the lock.
        self.lock_path = self.dir.with_name(self.dir.name + ".lock")
        self._parsed: tuple[tuple[int, int, int], dict] | None = None  # the manifest last read, by its stat


    # -- the manifest -----------------------------------------------------------------------------------------
    def _entries(self) -> dict[str, dict[str, list]]:
        path = self.dir / MANIFEST
        try:
            stat = path.stat()
        except FileNotFoundError:
            if self.dir.is_dir() and any(self.dir.iterdir()):  # files that nothing vouches for: a build killed
                raise ArtifactDamaged(f"{MANIFEST} is missing") from None  # before its record, or an old index
            return {}
        key = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if self._parsed is None or self._parsed[0] != key:  # parsed once for the several parts a question opens
            self._parsed = key, self._parse(path)
        return self._parsed[1]

    @staticmethod
    def _parse(path: Path) -> dict[str, dict[str, list]]:
        try:
            entries = json.loads(path.read_text(encoding="utf-8"))["artifacts"]
            if isinstance(entries, dict):
                return entries
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            pass
        raise ArtifactDamaged(f"{MANIFEST} is not a valid manifest")

    def _record(self, artifact: str, names: list[str]) -> None:
        """Add ``artifact``'s current files to the manifest (the caller holds the lock)."""
        entries = dict(self._entries()) if (self.dir / MANIFEST).exists() else {}
        entries[artifact] = {p.relative_to(self.dir).as_posix(): [p.stat().st_size, file_checksum(p)]
                             for p in _content_files(self.dir, names)}
        atomic_write_text(self.dir / MANIFEST, json.dumps({"version": 1, "artifacts": entries}, sort_keys=True))

    # -- checking ---------------------------------------------------------------------------------------------
    def problem(self, artifact: str, names: list[str]) -> str | None:
        """Why ``artifact`` cannot be used as it is on disk ("absent" when it was never built), or None."""
        entry = self._entries().get(artifact)
        if entry is None:
            return "not in the manifest" if _content_files(self.dir, names) else "absent"
        if not entry:
            return "empty manifest entry"
        for relative, (size, checksum) in entry.items():
            path = self.dir / relative
            try:
                actual = path.stat().st_size
            except OSError:
                return f"{relative} is missing"
            if actual != size:
                return f"{relative} has {actual} bytes, not {size}"
            if file_checksum(path) != checksum:
                return f"{relative} fails its checksum"
        return None

    def _try_load(self, artifact: str, names: list[str], load: Callable[[], T]) -> tuple[T | None, str | None]:
        try:
            reason = self.problem(artifact, names)
            return (load(), None) if reason is None else (None, reason)
        except ArtifactDamaged as damage:
            return None, str(damage)

    # -- opening and building ---------------------------------------------------------------------------------
    def open(self, artifact: str, names: list[str], load: Callable[[], T], build: Callable[[], None]) -> T:
        """``load()`` of a verified artifact; else, under the lock, set the damage aside, ``build()`` and load.

        ``build`` must leave complete files only (temporary files renamed into place); ``load`` raises
        :class:`ArtifactDamaged` for content it cannot use.
        """
        value, reason = self._try_load(artifact, names, load)
        if reason is None:
            return value  # type: ignore[return-value]
        with file_lock(self.lock_path):
            value, reason = self._try_load(artifact, names, load)  # another process may have built it meanwhile
            if reason is None:
                return value  # type: ignore[return-value]
            self._set_aside(artifact, names, reason)
            build()
            self._record(artifact, names)
        return load()

    def update(self, artifact: str, names: list[str], write: Callable[[], None]) -> None:
        """Rewrite an artifact in place (``write`` replaces its files atomically) and record it, under the lock."""
        with file_lock(self.lock_path):
            write()
            self._record(artifact, names)

    def _set_aside(self, artifact: str, names: list[str], reason: str) -> None:
        """Move the damage out of the way with one warning line (the caller holds the lock, then rebuilds)."""
        if reason == "absent":
            return  # never built: nothing to set aside (a build replaces any empty folder it left)
        if reason.startswith(MANIFEST):
            # Nothing in the directory can be trusted: set all of it aside; every part is rebuilt when next used.
            set_aside(self.dir, reason)
            self.dir.mkdir(parents=True, exist_ok=True)
        elif not set_aside(self.dir / names[0], reason):  # the artifact's main file or folder; builds overwrite
            log.warning("%s in %s: %s; rebuilt", artifact, self.dir, reason)  # the rest (e.g. an info file)
