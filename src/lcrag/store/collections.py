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

import bisect
import filecmp
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import time
import unicodedata
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import regex

from lcrag.core.errors import InputError
from lcrag.core.registry import LOADERS
from lcrag.store.base import FileRecord
from lcrag.core.files import atomic_write_text, ensure_directory, out_of_space

log = logging.getLogger(__name__)

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# Letters, marks and digits of every script stay (a Cyrillic name is not reduced to "_"); anything else, path
# separators and control or bidirectional-override characters included, becomes "_".
_UNSAFE = regex.compile(r"[^\p{L}\p{M}\p{N}_.() -]+")
# Stored names stay well under the file systems' 255-byte limit, with room for a " (NNN)" number.
MAX_NAME_BYTES = 200
TEMPORARY = ".upload-"
# An indexing thread waits this long before its first pass, so that uploads arriving together are indexed together.
GATHER_SECONDS = 0.05
TRASH = ".deleted-"  # a deleted collection, renamed away at once and removed (or, failing that, at the next start)
# Absolute paths left in a message after the collections' own are cut (an index file's, a cache's): the last part
# of each is kept. Not one that is part of a URL ("http://host/a/b").
_PATH = re.compile(r"(?<![\w.~:/])/(?:[^\s'\"/]+/)+([^\s'\"/]*)")
# UTS #39's "moderately restrictive" profile: a name's letters are of one script, or Latin with Han and the scripts
# written with it, or Latin with one script whose letters do not look like Latin's (not Greek or Cyrillic).
_SCRIPTS = {script: regex.compile(rf"\p{{Script={script}}}") for script in
            ("Latin", "Greek", "Cyrillic", "Han", "Hiragana", "Katakana", "Hangul", "Bopomofo")}
_NO_SCRIPT = regex.compile(r"[\p{Script=Common}\p{Script=Inherited}]")
_WRITTEN_TOGETHER = ({"Latin", "Han", "Hiragana", "Katakana"}, {"Latin", "Han", "Bopomofo"}, {"Latin", "Han", "Hangul"})


class NotFound(LookupError):
    """An unknown collection or file (HTTP 404)."""


class EmptyCollection(InputError):
    """A collection with no file (none uploaded yet, or its last one removed): its state is ``empty``, not an error,
    and a question to it is refused (HTTP 400) saying so."""

    def __init__(self, name: str):
        super().__init__(f"collection {name!r} is empty: upload a file to it first")


class TooLarge(ValueError):
    """An upload over the size limit (HTTP 413)."""


class StorageError(RuntimeError):
    """The server's storage failed: its disk or its database (a full one: HTTP 507, :func:`out_of_space`;
    read-only, immutable or otherwise: 500). The message says what could not be done and the reason, never a path
    on the server (a PostgreSQL message may name one: only its kind is said)."""

    def __init__(self, what: str, exc: BaseException):
        self.reason = _reason(exc)
        super().__init__(f"{what}: the server's storage failed ({self.reason})")
        self.full = exc.full if isinstance(exc, StorageError) else out_of_space(exc)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, StorageError):  # said again of what it stopped
        return exc.reason
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    if getattr(exc, "sqlite_errorcode", None) is not None:
        return str(exc)  # SQLite's own words ("database or disk is full"): no path in them
    return "the database is full" if out_of_space(exc) else f"the database failed: {type(exc).__name__}"


def _script(char: str) -> str | None:
    """The script of a letter (None for anything else, or a character every script uses)."""
    if not unicodedata.category(char).startswith("L") or _NO_SCRIPT.match(char):
        return None
    for script, pattern in _SCRIPTS.items():
        if pattern.match(char):
            return script
    return unicodedata.name(char, "unknown").split(" ")[0].title()  # ARABIC LETTER ALEF: Arabic


def mixed_scripts(text: str) -> list[str] | None:
    """The scripts ``text`` mixes where a look-alike could hide (``pаypal`` with a Cyrillic а: Cyrillic, Latin),
    else None."""
    scripts = {s for s in map(_script, text) if s}
    if len(scripts) <= 1 or any(scripts <= together for together in _WRITTEN_TOGETHER):
        return None
    if "Latin" in scripts and len(scripts) == 2 and not scripts & {"Greek", "Cyrillic"}:
        return None
    return sorted(scripts)


def safe_filename(name: str) -> str:
    """The upload's base name, NFC-normalised, with anything but letters, marks and digits (of any script) and
    ``_.() -`` replaced: ``../../etc/passwd`` becomes ``passwd``, ``счёт.txt`` stays ``счёт.txt``. A name that is
    empty or only dots after that, over :data:`MAX_NAME_BYTES` in UTF-8, of a format lcrag does not read, or whose
    letters mix scripts where a look-alike could hide (:func:`mixed_scripts`: ``pаypal.txt`` with a Cyrillic а
    beside ``paypal.txt``) is refused."""
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
    mixed = mixed_scripts(Path(base).stem)
    if mixed:
        raise InputError(f"{ascii(base)[:80]}: a file name's letters must be of one script (this one mixes "
                         f"{' and '.join(mixed)}, as a look-alike of another name would); rename it")
    return base


def _numbered(name: str, number: int) -> str:
    """``name`` as the ``number``-th file of that name: ``report (2).pdf``."""
    path = Path(name)
    return f"{path.stem} ({number}){path.suffix}"


def receive_upload(chunks: Iterable[bytes], directory: Path, prefix: str, wanted: str,
                   max_bytes: int) -> tuple[Path, str, int]:
    """An upload streamed once into a temporary file in ``directory``, hashed as it comes and synced: its path,
    SHA-256 and size. Removed again when it runs over ``max_bytes`` (:class:`TooLarge`) or anything else fails."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=prefix)
    digest, size = hashlib.sha256(), 0
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                size += len(chunk)
                if size > max_bytes:
                    raise TooLarge(f"{wanted} is over the {max_bytes:,}-byte upload limit")
                out.write(chunk)
                digest.update(chunk)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp), digest.hexdigest(), size


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


# How many changes a collection's :class:`Listed` remembers: a reader of its files that is further behind lists them
# again whole (a replica that slept through that many uploads).
LISTED_CHANGES = 1024


@dataclass(frozen=True)
class Listed:
    """A collection's files at one version as a process last listed them: their names, sorted, and each one's
    ``lstat`` (regular files only), with the changes that led there (``log``: from version, to version, the names
    touched). A new version is made from the names a change touched (:meth:`updated`), never by listing the folder
    again, so an upload costs the same in a collection of 100 files or of 5,000; a reader that kept what it made of
    an earlier version asks :meth:`changed` which names to look at again."""

    id: str
    version: int
    names: list[str]
    stats: dict[str, Any]  # each name's lstat (a database's view of the files: each one's FileRecord)
    log: tuple[tuple[int, int, frozenset[str]], ...] = ()
    # The files as GET /v1/collections/NAME shows them (name and bytes), made once per version: polling a collection
    # of 5,000 files for its state does not make 5,000 dicts each time. Shared: never to be changed.
    shown: list[list[dict]] = field(default_factory=list, compare=False, repr=False)

    @classmethod
    def of(cls, collection_id: str, version: int, directory: Path) -> Listed:
        """The folder listed whole (once, or when the changes since are not known): one pass over it."""
        stats = {}
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    if not entry.name.startswith(".") and entry.is_file(follow_symlinks=False):
                        stats[entry.name] = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # removed meanwhile (its collection deleted)
                    pass
        return cls(collection_id, version, sorted(stats), stats)

    def updated(self, version: int, directory: Path, touched: dict[str, bool]) -> Listed:
        """This listing at ``version``: each name ``touched`` (name -> removed) looked at again in ``directory``
        (one that was removed is gone without a look: it may be unlinked just after its change was recorded)."""
        return self.with_values(version, {name: None if removed else _regular_stat(directory / name)
                                          for name, removed in touched.items()})

    def with_values(self, version: int, values: dict[str, Any]) -> Listed:
        """This listing at ``version`` with each name in ``values`` set to its value (None: gone), as a database
        says the files it changed are now."""
        names, stats = list(self.names), dict(self.stats)
        for name, value in values.items():
            if value is None:
                if stats.pop(name, None) is not None:
                    del names[bisect.bisect_left(names, name)]
            else:
                if name not in stats:
                    bisect.insort(names, name)
                stats[name] = value
        log = (*self.log[-(LISTED_CHANGES - 1):], (self.version, version, frozenset(values)))
        return Listed(self.id, version, names, stats, log)

    def changed(self, since: tuple[str, int] | None) -> frozenset[str] | None:
        """The names that may differ from the listing at ``since`` (collection id, version), or None when that is
        not known (another collection, no version, or further back than the log): then everything may."""
        if since is None or since[0] != self.id or since[1] > self.version:
            return None
        names: set[str] = set()
        at = since[1]
        for start, end, touched in self.log:
            if end <= at:
                continue
            if start > at:  # a gap: changes made elsewhere, or forgotten
                return None
            names |= touched  # (a change straddling ``at`` is looked at whole: looking again is harmless)
            at = end
        return frozenset(names) if at == self.version else None

    def files(self, size: Callable[[Any], int]) -> list[dict]:
        """The files by name with their size in bytes (``size`` of each one's value), made once per listing."""
        if not self.shown:
            stats = self.stats
            self.shown.append([{"name": name, "bytes": size(stats[name])} for name in self.names])
        return self.shown[0]

    def items(self) -> list[tuple[str, Any]]:
        stats = self.stats
        return [(name, stats[name]) for name in self.names]

    def items_values(self) -> list[Any]:
        stats = self.stats
        return [stats[name] for name in self.names]


def _regular_stat(path: Path) -> os.stat_result | None:
    """``path``'s lstat when it is a regular file itself, else None."""
    try:
        info = os.lstat(path)
    except (OSError, ValueError):
        return None
    return info if stat.S_ISREG(info.st_mode) else None


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
        self._running: set[str] = set()  # collections an indexing thread is working on
        self._dirty: set[str] = set()  # collections changed since their indexing thread's pass began
        self._place_locks: dict[str, threading.Lock] = {}  # per collection: a file placed and its change recorded
        self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        """Remove the temporary files of uploads cut short by a crash and what is left of deleted collections
        (hidden, so never listed or indexed)."""
        for leftover in self.root.glob(f"*/files/{TEMPORARY}*"):
            leftover.unlink(missing_ok=True)
            log.info("removed %s, an upload cut short", leftover)
        for trash in self.root.glob(f"{TRASH}*"):
            shutil.rmtree(trash, ignore_errors=True)

    def public(self, message: str) -> str:
        """``message`` as a client may read it: a collection's files named by their uploaded names, nothing else
        of this server's paths."""
        root = re.escape(str(self.root))
        message = re.sub(root + r"/[^/\s'\"]+/files/", "", message)
        message = re.sub(root + r"/?", "", message)
        return _PATH.sub(lambda path: path.group(1) or "a directory", message)

    def _dir(self, name: str) -> Path:
        if not NAME.fullmatch(name):
            raise NotFound(f"unknown collection {name[:64]!r}")
        return self.root / name

    def files_dir(self, name: str) -> Path:
        """A collection's folder of files; one that is (or is under) a symbolic link planted in the collections
        directory is not a collection."""
        directory = self._dir(name) / "files"
        if not directory.is_dir() or directory.is_symlink() or directory.parent.is_symlink():
            raise NotFound(f"unknown collection {name!r}")
        return directory

    def file(self, name: str, filename: str) -> Path:
        """The stored file a client names (as listed, in any Unicode normal form: names are stored NFC), else
        :class:`NotFound`; a hidden, nested or over-long name is never looked up on disk (a name over the file
        system's limit would fail there with ENAMETOOLONG), and only a regular file is served, never what a
        symbolic link planted among the files points to."""
        directory = self.files_dir(name)
        filename = unicodedata.normalize("NFC", filename)
        if (filename.startswith(".") or "/" in filename or "\\" in filename or "\0" in filename
                or len(filename.encode("utf-8", "replace")) > MAX_NAME_BYTES + 16):  # 16: room for " (NNN)"
            raise NotFound(f"no file {filename[:40]!r} in {name!r}")
        path = directory / filename
        if not _regular(path):
            raise NotFound(f"no file {filename[:40]!r} in {name!r}")
        return path

    def paths(self, name: str) -> list[Path]:
        """The collection's stored files, sorted: regular files only (no hidden upload in progress, no symbolic
        link), as every reader of a collection should list them."""
        directory = self.files_dir(name)
        return [directory / file_name for file_name in self.listed(name).names]

    def listing(self, name: str) -> list[tuple[str, os.stat_result]]:
        """The collection's stored files as :meth:`paths` lists them, by name, each with its ``lstat``."""
        return self.listed(name).items()

    def listed(self, name: str) -> Listed:
        """The collection's files now (:class:`Listed`); here one pass over the folder (names compared as strings:
        comparing Paths is 40x slower). A store with versions keeps it and brings it up to date from its changes."""
        return Listed.of(self.identity(name), 0, self.files_dir(name))

    def collection_id(self, name: str) -> str:
        """What tells this collection from an earlier one of the same name, whatever its version."""
        return self.identity(name)

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
        try:
            (directory / "files").mkdir(parents=True, exist_ok=True)
            if not (directory / "collection.json").is_file():
                atomic_write_text(directory / "collection.json",
                                  json.dumps({"name": name, "id": uuid.uuid4().hex, "created": time.time()}))
        except OSError as exc:
            raise StorageError(f"collection {name!r} could not be created", exc) from None
        return self.describe(name)

    def names(self) -> list[str]:
        return sorted(p.parent.name for p in self.root.glob("*/files") if NAME.fullmatch(p.parent.name)
                      and p.is_dir() and not p.is_symlink() and not p.parent.is_symlink())

    def files(self, name: str) -> list[dict]:
        return self.listed(name).files(lambda info: info.st_size)

    def describe(self, name: str) -> dict:
        files = self.files(name)
        status = self._status.get(name) or Status(state="ready" if files else "empty", files=len(files),
                                                  done=len(files))
        return {"name": name, "files": files, "status": asdict(status)}

    def delete(self, name: str) -> None:
        """Delete the collection: renamed away in one step (an upload being placed meanwhile finds it gone), then
        removed; what cannot be removed (a read-only or immutable file) is left hidden, removed at the next start."""
        directory = self._dir(name)
        if not directory.is_dir() or directory.is_symlink():
            raise NotFound(f"unknown collection {name!r}")
        trash = self.root / f"{TRASH}{name}-{uuid.uuid4().hex[:12]}"
        try:
            os.rename(directory, trash)
        except FileNotFoundError:
            raise NotFound(f"unknown collection {name!r}") from None
        except OSError as exc:
            raise StorageError(f"collection {name!r} could not be deleted", exc) from None
        self._status.pop(name, None)
        failed: list[str] = []
        try:
            if sys.version_info >= (3, 12):
                shutil.rmtree(trash, onexc=lambda function, path, exc: failed.append(str(exc)))
            else:
                shutil.rmtree(trash, onerror=lambda function, path, info: failed.append(str(info[1])))
        except OSError as exc:
            failed.append(str(exc))
        if failed:
            log.warning("collection %s deleted, but %d of its files could not be removed (%s); they are removed at "
                        "the next start", name, len(failed), failed[0])

    def add_file(self, name: str, filename: str, chunks: Iterator[bytes], max_bytes: int) -> dict:
        """Stream an upload into the collection (:meth:`put_file`) and, when it is a new file, index it with the
        others that arrive meanwhile; its stored name and size. The same file again while the collection is in
        error (its indexing failed, on a full disk say) indexes it again: a retry finishes what failed."""
        record, new = self.put_file(name, filename, chunks, max_bytes)
        if new or self.status(name).state == "error":
            self.reindex(name)
        return {"name": record.name, "bytes": record.size}

    def put_file(self, name: str, filename: str, chunks: Iterator[bytes], max_bytes: int) -> tuple[FileRecord, bool]:
        """Stream an upload into a temporary file in the collection's folder, hashed as it comes, placed when
        complete and within ``max_bytes`` (else removed, :class:`TooLarge`), under its safe name or, when another
        file has it, the next free ``name (N).ext``; the same content under the same name is kept once. The record
        and whether the file is new (a new file is a change: :meth:`_changed`). Whatever step fails (the temporary
        file, the link, the change recorded) leaves nothing placed: :class:`StorageError`."""
        directory = self.files_dir(name)
        wanted = safe_filename(filename)
        tmp = None
        try:
            tmp, digest, size = receive_upload(chunks, directory, TEMPORARY, wanted, max_bytes)
            with self._placing(name):  # placed and recorded as one step: a same-content upload sees both or neither
                stored, new = self._place(tmp, directory, wanted)
                if new:
                    self._record(name, directory / stored)
        except OSError as exc:
            if not directory.is_dir():  # the collection was deleted while the file came in
                raise NotFound(f"collection {name!r} was deleted while {wanted} was being uploaded") from None
            raise StorageError(f"{wanted} could not be stored", exc) from None
        finally:
            if tmp is not None:  # placed under its name (a hard link) or gone with its collection
                tmp.unlink(missing_ok=True)
        return FileRecord(stored, digest, size, time.time()), new

    def _placing(self, name: str) -> threading.Lock:
        with self._lock:
            return self._place_locks.setdefault(name, threading.Lock())

    def _record(self, name: str, placed: Path) -> None:
        """The new file ``placed`` as a change of the collection (:meth:`_changed`); when that fails (a full
        database) the file is taken away again, so that listing, status and answers agree and a retry places it
        anew."""
        try:
            self._changed(name, placed.name)
        except StorageError as exc:
            placed.unlink(missing_ok=True)
            raise StorageError(f"{placed.name} could not be stored", exc) from None

    def remove_file(self, name: str, filename: str) -> None:
        """Remove one file from the collection and index what is left (its segment leaves the collection's index;
        a store that keeps segments drops them when no file holds that content any more). The change is recorded
        first: a full database refuses the removal (507) before anything is removed (a new version with the file
        still there, when its removal then fails, only makes answers be computed again)."""
        path = self.file(name, filename)
        try:
            self._changed(name, path.name, removed=True)
        except StorageError as exc:
            raise StorageError(f"{path.name} could not be removed", exc) from None
        try:
            path.unlink()
        except FileNotFoundError:
            raise NotFound(f"no file {filename[:40]!r} in {name!r}") from None
        except OSError as exc:
            raise StorageError(f"{path.name} could not be removed", exc) from None
        self.reindex(name)

    def _changed(self, name: str, filename: str | None = None, removed: bool = False) -> None:
        """File ``filename`` was added to (or ``removed`` from) the collection: a store with versions counts it,
        and keeps which file changed (:meth:`listed`)."""

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
        """Index the collection's changes in the background: one thread per collection at a time, which runs a
        pass over what has changed (after :data:`GATHER_SECONDS`, so that uploads arriving together are indexed
        together), and another pass while changes came in during the last one; never a thread per upload."""
        if self._index is None:
            return
        files = self._count(name)
        with self._lock:  # started before the lock is let go: a thread another run may join has always started
            self._status[name] = Status(state="indexing", files=files)
            self._dirty.add(name)
            thread = self._threads.get(name)
            if thread is not None and thread.is_alive() and name in self._running:
                return  # the running thread sees the change: it runs another pass
            self._running.add(name)
            thread = threading.Thread(target=self._run_passes, args=(name,), daemon=True,
                                      name=f"lcrag-index-{name}")
            self._threads[name] = thread
            thread.start()

    def _count(self, name: str) -> int:
        try:
            return len(self.listed(name).names)
        except (OSError, NotFound):
            return 0

    def _run_passes(self, name: str) -> None:
        """Index passes until no change came in during the last one."""
        time.sleep(GATHER_SECONDS)
        while True:
            with self._lock:
                self._dirty.discard(name)
                status = self._status.get(name)
            if status is None:  # deleted meanwhile
                break
            self._run_index(name, status)
            with self._lock:
                if name not in self._dirty:
                    self._running.discard(name)
                    return
        with self._lock:
            self._running.discard(name)

    def _run_index(self, name: str, status: Status) -> None:
        def progress(done: int, total: int) -> None:
            status.done, status.files, status.updated = done, total, time.time()

        try:
            skipped = [self.public(line) for line in self._index(name, self.files_dir(name), progress)]
            with self._lock:  # a change during the pass leaves the collection indexing, for the next pass
                if name not in self._dirty:
                    status.skipped, status.state, status.done = skipped, "ready", status.files
        except EmptyCollection:
            status.state, status.files, status.done, status.error, status.skipped = "empty", 0, 0, None, []
        except (InputError, NotFound, StorageError) as exc:  # a StorageError's message names no path
            status.state, status.error = "error", self.public(str(exc))
        except OSError as exc:  # the server's storage (a read-only or full cache): its reason, not its paths
            log.warning("indexing collection %s failed: %s", name, exc)
            status.state = "error"
            status.error = self.public(f"indexing failed: the server's storage failed ({exc.strerror or exc}"
                                       + (f": {Path(exc.filename).name})" if exc.filename else ")"))
        except Exception as exc:  # noqa: BLE001 - whatever failed, the collection must not stay "indexing"
            log.exception("indexing collection %s failed", name)
            status.state, status.error = "error", self.public(f"indexing failed: {type(exc).__name__}: {exc}")
        status.updated = time.time()

    def wait(self, name: str, timeout: float = 600) -> Status:
        with self._lock:
            thread = self._threads.get(name)
        if thread is not None:
            thread.join(timeout)
        return self.status(name)


def _regular(path: Path) -> bool:
    """Whether ``path`` is a regular file itself (a symbolic link is not followed)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except (OSError, ValueError):
        return False
