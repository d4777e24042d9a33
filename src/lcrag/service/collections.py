"""Collections: named folders of uploaded documents under the cache directory, indexed in the background.

A collection is ``ROOT/<name>/files/`` plus ``ROOT/<name>/collection.json``; it survives restarts. Uploads are
streamed to a temporary file in the same folder and renamed into place only when complete (a crash mid-upload leaves
no half file), names are reduced to a safe base name (no path traversal), and a size limit is enforced while
streaming. Indexing runs in a background thread per collection and reports progress."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lcrag.errors import InputError
from lcrag.registry import LOADERS
from lcrag.storage import atomic_write_text

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.() -]+")


class NotFound(LookupError):
    """An unknown collection or file (HTTP 404)."""


class TooLarge(ValueError):
    """An upload over the size limit (HTTP 413)."""


def safe_filename(name: str) -> str:
    """The upload's base name with anything but letters, digits and ``_.() -`` replaced: ``../../etc/passwd`` becomes
    ``passwd``; a name that is empty or only dots after that is refused."""
    base = _UNSAFE.sub("_", Path(name.replace("\\", "/")).name).strip(" .")
    if not base:
        raise InputError(f"unusable file name {name!r}")
    suffixes = {s for part in LOADERS.parts() for s in part.meta.get("suffixes", ())}
    if Path(base).suffix.lower() not in suffixes:
        raise InputError(f"{base}: not a format lcrag reads ({', '.join(sorted(suffixes))})")
    return base


@dataclass
class Status:
    """A collection's indexing state: ``empty``, ``indexing`` (``done`` of ``files``), ``ready`` or ``error``."""

    state: str = "empty"
    files: int = 0
    done: int = 0
    error: str | None = None
    skipped: list[str] = field(default_factory=list)
    updated: float = field(default_factory=time.time)


class Collections:
    """Every collection under ``root``; ``index`` is called in a background thread when a collection changes."""

    def __init__(self, root: Path, index: Callable[[str, Path, Callable[[int, int], None]], list[str]] | None = None):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._index = index
        self._status: dict[str, Status] = {}
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}

    def _dir(self, name: str) -> Path:
        if not NAME.match(name):
            raise NotFound(f"unknown collection {name!r}")
        return self.root / name

    def files_dir(self, name: str) -> Path:
        directory = self._dir(name) / "files"
        if not directory.is_dir():
            raise NotFound(f"unknown collection {name!r}")
        return directory

    def create(self, name: str) -> dict:
        if not NAME.match(name):
            raise InputError(f"collection names are 1-64 letters, digits, '_', '.' or '-' (starting with a letter or "
                             f"digit), not {name!r}")
        directory = self.root / name
        (directory / "files").mkdir(parents=True, exist_ok=True)
        atomic_write_text(directory / "collection.json", json.dumps({"name": name, "created": time.time()}))
        return self.describe(name)

    def names(self) -> list[str]:
        return sorted(p.parent.name for p in self.root.glob("*/files") if p.is_dir() and NAME.match(p.parent.name))

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
        """Stream an upload into the collection: a temporary file renamed into place when complete and within
        ``max_bytes`` (else removed, :class:`TooLarge`)."""
        directory = self.files_dir(name)
        target = directory / safe_filename(filename)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".upload-")
        size = 0
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in chunks:
                    size += len(chunk)
                    if size > max_bytes:
                        raise TooLarge(f"{target.name} is over the {max_bytes:,}-byte upload limit")
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self.reindex(name)
        return {"name": target.name, "bytes": size}

    def status(self, name: str) -> Status:
        self.files_dir(name)
        return self._status.get(name) or Status(**self.describe(name)["status"])

    def reindex(self, name: str) -> None:
        """Index the collection in a background thread (a change while it runs starts another run after it)."""
        if self._index is None:
            return
        files = len(self.files(name))
        with self._lock:
            self._status[name] = Status(state="indexing", files=files)
            previous = self._threads.get(name)
            thread = threading.Thread(target=self._run_index, args=(name, previous), daemon=True)
            self._threads[name] = thread
        thread.start()

    def _run_index(self, name: str, previous: threading.Thread | None) -> None:
        if previous is not None:
            previous.join()
        status = self._status[name]

        def progress(done: int, total: int) -> None:
            status.done, status.files, status.updated = done, total, time.time()

        try:
            status.skipped = self._index(name, self.files_dir(name), progress)
            status.state, status.done = "ready", status.files
        except (InputError, NotFound) as exc:
            status.state, status.error = "error", str(exc)
        status.updated = time.time()

    def wait(self, name: str, timeout: float = 600) -> Status:
        thread = self._threads.get(name)
        if thread is not None:
            thread.join(timeout)
        return self.status(name)
