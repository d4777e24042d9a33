"""Safe writes of derived files: atomic replacement, inter-process locks, and setting damaged files aside.

Every cache writer goes through these, so the guarantees are the same everywhere: a reader never sees a half-written
file, two processes building the same thing build it once, and a damaged derived file is moved out of the way
(kept for inspection, never deleted silently) and rebuilt.
"""

from __future__ import annotations

import errno
import logging
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger("lcrag")

SQLITE_FULL = 13  # SQLite's result code for "database or disk is full"
DISK_FULL = "53100"  # PostgreSQL's SQLSTATE disk_full (class 53, insufficient resources)


def out_of_space(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk or the database is full: ENOSPC or EDQUOT from the system, SQLITE_FULL from
    SQLite, disk_full (53100) from PostgreSQL. Read from the error's attributes: no database module is imported."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == SQLITE_FULL  # an extended code's low byte is its primary code
    return getattr(exc, "sqlstate", None) == DISK_FULL


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory, fsync'ed, then renamed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Not mkstemp: its files are mode 0600; a cache shared by users in a group should get the umask's mode.
    tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


@contextmanager
def file_lock(path: Path, timeout: float = -1) -> Iterator[None]:
    """An exclusive inter-process lock on ``path`` (created if missing); ``timeout`` -1 waits forever."""
    from filelock import FileLock  # on first use: ~5 ms that `lcrag --help` need not pay

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path), timeout=timeout):
        yield


def ensure_directory(path: Path, what: str, error: type[Exception]) -> Path:
    """``path`` as a directory, created if missing; an existing file or an uncreatable path raises ``error`` in one
    line naming ``what`` it should be (e.g. "the index directory")."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise error(f"{path} is a file, not a directory: give {what} a new directory or an existing one")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise error(f"cannot create {what} {path}: {exc.strerror or exc}") from None
    return path


def set_aside(path: Path, reason: str) -> Path | None:
    """Move a damaged derived file or directory to ``<name>.damaged-<time>`` and warn once; returns the new path."""
    path = Path(path)
    if not path.exists():
        return None
    target = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    try:
        os.replace(path, target)
    except OSError:
        return None  # another process moved it first
    log.warning("%s is damaged (%s): set aside as %s and rebuilt", path, reason, target.name)
    return target
