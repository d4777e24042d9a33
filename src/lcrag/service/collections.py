"""Collections: named folders of uploaded documents under the cache directory, indexed in the background.

A collection is ``ROOT/<name>/files/`` plus ``ROOT/<name>/collection.json``; it survives restarts. Its identity is
its name and the ``id`` written when it was created: a collection deleted and created again under the same name is
another collection, and nothing cached for the first is used for the second (:meth:`Collections.identity`).

Uploads are streamed to a temporary file (``.upload-*``) in the same folder and placed only when complete (a crash
mid-upload leaves no half file; a kill -9 leaves a temporary file, removed when the service starts again). Names
keep their letters in any script (NFC-normalised) and lose anything else (no path traversal); a name taken by
another file is never overwritten: the upload is stored as ``name (2).ext`` (the next free number), unless it is the
very same content, which is kept once. A size limit is enforced while streaming. Indexing runs in a background
thread per collection and reports progress; any failure sets the collection's state to ``error`` with a message
that names files by their uploaded names, never by a path on the server."""

from __future__ import annotations

import filecmp
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import unicodedata
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import regex

from lcrag.errors import InputError
from lcrag.registry import LOADERS
from lcrag.storage import atomic_write_text, ensure_directory

log = logging.getLogger(__name__)

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# Letters, marks and digits of every script stay (a Cyrillic name is not reduced to "_"); anything else, path
# separators and control or bidirectional-override characters included, becomes "_".
_UNSAFE = regex.compile(r"[^\p{L}\p{M}\p{N}_.() -]+")
# Stored names stay well under the file systems' 255-byte limit, with room for a " (NNN)" number.
MAX_NAME_BYTES = 200
TEMPORARY = ".upload-"


class NotFound(LookupError):
    """An unknown collection or file (HTTP 404)."""


class TooLarge(ValueError):
    """An upload over the size limit (HTTP 413)."""


def safe_filename(name: str) -> str:
    """The upload's base name, NFC-normalised, with anything but letters, marks and digits (of any script) and
    ``_.() -`` replaced: ``../../etc/passwd`` becomes ``passwd``, ``счёт.txt`` stays ``счёт.txt``. A name that is
    empty or only dots after that, over :data:`MAX_NAME_BYTES` in UTF-8, or of a format lcrag does not read is
    refused."""
    normal = unicodedata.normalize("NFC", name.replace("\\", "/"))
    base = _UNSAFE.sub("_", Path(normal).name).strip(" .")
    if not base:
        raise InputError(f"unusable file name {name[:40]!r}")
    if len(base.encode("utf-8")) > MAX_NAME_BYTES:
        raise InputError(f"file names are at most {MAX_NAME_BYTES} bytes in UTF-8; this one has "
                         f"{len(base.encode('utf-8'))} ({base[:40]!r}...)")
    suffixes = {s for part in LOADERS.parts() for s in part.meta.get("suffixes", ())}
    if Path(base).suffix.lower() not in suffixes:
        raise InputError(f"{base}: not a format lcrag reads ({', '.join(sorted(suffixes))})")
    return base


def _numbered(name: str, number: int) -> str:
    """``name`` as the ``number``-th file of that name: ``report (2).pdf``."""
    path = Path(name)
    return f"{path.stem} ({number}){path.suffix}"


@dataclass
class Status:
    """A collection's indexing state: ``empty``, ``indexing`` (``done`` of ``files``), ``ready`` or ``error``;
    ``skipped``: one line per file that could not be read (a collection with some readable files is ready)."""

    state: str = "empty"
    files: int = 0
    done: int = 0
    error: str | None = None
    skipped: list[str] = field(default_factory=list)
    updated: float = field(default_factory=time.time)


class Collections:
    """Every collection under ``root``; ``index`` is called in a background thread when a collection changes.

    One service owns ``root``: temporary files of uploads that a crash cut short are removed when it starts."""

    def __init__(self, root: Path, index: Callable[[str, Path, Callable[[int, int], None]], list[str]] | None = None):
        # Absolute, so every path a message may quote starts with it and :meth:`public` can cut it.
        self.root = ensure_directory(Path(root).absolute(), "the collections directory", InputError)
        self._index = index
        self._status: dict[str, Status] = {}
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
        self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        """Remove the temporary files of uploads cut short by a crash (hidden, so never listed or indexed)."""
        for leftover in self.root.glob(f"*/files/{TEMPORARY}*"):
            leftover.unlink(missing_ok=True)
            log.info("removed %s, an upload cut short", leftover)

    def public(self, message: str) -> str:
        """``message`` as a client may read it: a collection's files named by their uploaded names, nothing else
        of this server's paths."""
        root = re.escape(str(self.root))
        message = re.sub(root + r"/[^/\s'\"]+/files/", "", message)
        return re.sub(root + r"/?", "", message)

    def _dir(self, name: str) -> Path:
        if not NAME.fullmatch(name):
            raise NotFound(f"unknown collection {name[:64]!r}")
        return self.root / name

    def files_dir(self, name: str) -> Path:
        directory = self._dir(name) / "files"
        if not directory.is_dir():
            raise NotFound(f"unknown collection {name!r}")
        return directory

    def file(self, name: str, filename: str) -> Path:
        """The stored file a client names (as listed), else :class:`NotFound`; a hidden, nested or over-long name
        is never looked up on disk (a name over the file system's limit would fail there with ENAMETOOLONG)."""
        directory = self.files_dir(name)
        if (filename.startswith(".") or "/" in filename or "\\" in filename
                or len(filename.encode("utf-8", "replace")) > MAX_NAME_BYTES + 16):  # 16: room for " (NNN)"
            raise NotFound(f"no file {filename[:40]!r} in {name!r}")
        path = directory / filename
        if not path.is_file():
            raise NotFound(f"no file {filename[:40]!r} in {name!r}")
        return path

    def identity(self, name: str) -> str:
        """What tells this collection from an earlier one of the same name: the id written when it was created
        (collections from before ids: the directory's inode and change time)."""
        directory = self.files_dir(name).parent
        try:
            made = json.loads((directory / "collection.json").read_text(encoding="utf-8"))
            return str(made.get("id") or made["created"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            stat = directory.stat()
            return f"{stat.st_ino}:{stat.st_ctime_ns}"

    def create(self, name: str) -> dict:
        """Create the collection (creating one that exists changes nothing)."""
        if not NAME.fullmatch(name):
            raise InputError(f"collection names are 1-64 letters, digits, '_', '.' or '-' (starting with a letter or "
                             f"digit), not {name[:64]!r}")
        directory = self.root / name
        (directory / "files").mkdir(parents=True, exist_ok=True)
        if not (directory / "collection.json").is_file():
            atomic_write_text(directory / "collection.json",
                              json.dumps({"name": name, "id": uuid.uuid4().hex, "created": time.time()}))
        return self.describe(name)

    def names(self) -> list[str]:
        return sorted(p.parent.name for p in self.root.glob("*/files") if p.is_dir() and NAME.fullmatch(p.parent.name))

    def files(self, name: str) -> list[dict]:
        return [{"name": f.name, "bytes": f.stat().st_size} for f in sorted(self.files_dir(name).iterdir())
                if f.is_file() and not f.name.startswith(".")]

    def describe(self, name: str) -> dict:
        files = self.files(name)
        status = self._status.get(name) or Status(state="ready" if files else "empty", files=len(files),
                                                  done=len(files))
        return {"name": name, "files": files, "status": asdict(status)}

    def delete(self, name: str) -> None:
        directory = self._dir(name)
        if not directory.is_dir():
            raise NotFound(f"unknown collection {name!r}")
        shutil.rmtree(directory)
        self._status.pop(name, None)

    def add_file(self, name: str, filename: str, chunks: Iterator[bytes], max_bytes: int) -> dict:
        """Stream an upload into the collection: a temporary file placed when complete and within ``max_bytes``
        (else removed, :class:`TooLarge`), under its safe name or, when another file has it, the next free
        ``name (N).ext``; the same content under the same name is kept once."""
        directory = self.files_dir(name)
        wanted = safe_filename(filename)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=TEMPORARY)
        size = 0
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in chunks:
                    size += len(chunk)
                    if size > max_bytes:
                        raise TooLarge(f"{wanted} is over the {max_bytes:,}-byte upload limit")
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            stored, new = self._place(Path(tmp), directory, wanted)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        if new:
            self.reindex(name)
        return {"name": stored, "bytes": size}

    @staticmethod
    def _place(tmp: Path, directory: Path, wanted: str) -> tuple[str, bool]:
        """The name ``tmp`` is stored under, and whether it is a new file. A hard link never replaces an existing
        file, so two uploads of one name at once both keep their content."""
        for number in range(1, 1000):
            name = wanted if number == 1 else _numbered(wanted, number)
            target = directory / name
            try:
                os.link(tmp, target)
                return name, True
            except FileExistsError:
                if target.is_file() and filecmp.cmp(tmp, target, shallow=False):
                    return name, False
        raise InputError(f"{wanted}: 999 files of that name are already in the collection")

    def status(self, name: str) -> Status:
        self.files_dir(name)
        return self._status.get(name) or Status(**self.describe(name)["status"])

    def reindex(self, name: str) -> None:
        """Index the collection in a background thread (a change while it runs starts another run after it)."""
        if self._index is None:
            return
        files = len(self.files(name))
        with self._lock:
            status = self._status[name] = Status(state="indexing", files=files)
            previous = self._threads.get(name)
            thread = threading.Thread(target=self._run_index, args=(name, status, previous), daemon=True)
            self._threads[name] = thread
        thread.start()

    def _run_index(self, name: str, status: Status, previous: threading.Thread | None) -> None:
        if previous is not None:
            previous.join()

        def progress(done: int, total: int) -> None:
            status.done, status.files, status.updated = done, total, time.time()

        try:
            status.skipped = [self.public(line) for line in self._index(name, self.files_dir(name), progress)]
            status.state, status.done = "ready", status.files
        except (InputError, NotFound) as exc:
            status.state, status.error = "error", self.public(str(exc))
        except Exception as exc:  # noqa: BLE001 - whatever failed, the collection must not stay "indexing"
            log.exception("indexing collection %s failed", name)
            status.state, status.error = "error", self.public(f"indexing failed: {type(exc).__name__}: {exc}")
        status.updated = time.time()

    def wait(self, name: str, timeout: float = 600) -> Status:
        thread = self._threads.get(name)
        if thread is not None:
            thread.join(timeout)
        return self.status(name)
