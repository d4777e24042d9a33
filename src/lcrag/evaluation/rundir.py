"""Run directories are user data: read strictly, repaired only where a kill is the known cause, never overwritten.

A run directory holds ``rows.jsonl`` (one finished row per line, appended), ``manifest.json`` (the settings that
produced the rows) and the run's completion cache. A torn last line (a process killed mid-write leaves a line without
its newline) is the one damage with a known cause: the runner cuts it off on resume and the report skips it. Anything
else is reported with ``file:line`` as a :class:`RunDirectoryError` and left as it is, for the user to decide.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from filelock import Timeout

from lcrag.core.errors import RunDirectoryError
from lcrag.readers.cache import CompletionCache, parse_completion
from lcrag.core.files import atomic_write_text, ensure_directory, file_lock

log = logging.getLogger("lcrag")

ROWS = "rows.jsonl"
MANIFEST = "manifest.json"
LOCK = ".run.lock"
OWNER = ".run.owner.json"  # who holds the lock: pid, host, start time (the lock file itself stays empty)


@dataclass
class RowsFile:
    """The rows of ``rows.jsonl`` keyed by (item_id, config); ``complete_bytes`` ends at the last newline."""

    path: Path
    rows: dict[tuple[str, str], dict] = field(default_factory=dict)
    complete_bytes: int = 0
    tail: bytes = b""  # what follows the last newline: empty, a torn line, or a whole row that lost its newline
    tail_row: dict | None = None


def _bad_line(path: Path, lineno: int, what: str) -> RunDirectoryError:
    return RunDirectoryError(f"{path}:{lineno}: {what}; the file is left as it is: fix or delete line {lineno}, "
                             f"or start a new --out")


def _parse_row(path: Path, lineno: int, raw: bytes) -> dict:
    try:
        row = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise _bad_line(path, lineno, "not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise _bad_line(path, lineno, f"not a JSON row ({exc.msg} at column {exc.colno})") from None
    if not isinstance(row, dict) or not isinstance(row.get("item_id"), str) or not isinstance(row.get("config"), str):
        raise _bad_line(path, lineno, "not a row (a JSON object with string item_id and config)")
    return row


def read_rows(path: Path) -> RowsFile:
    """Every complete line must be a row and no (item_id, config) may repeat; the tail is returned for the caller."""
    path = Path(path)
    result = RowsFile(path)
    if not path.exists():
        return result
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RunDirectoryError(f"cannot read {path}: {exc.strerror}") from None
    result.complete_bytes = data.rfind(b"\n") + 1
    first_line: dict[tuple[str, str], int] = {}
    for lineno, raw in enumerate(data[: result.complete_bytes].split(b"\n")[:-1], 1):
        if not raw.strip():
            continue
        row = _parse_row(path, lineno, raw)
        key = (row["item_id"], row["config"])
        if key in first_line:
            raise _bad_line(path, lineno, f"repeats the row of question {key[0]!r} under {key[1]!r} "
                                          f"(line {first_line[key]})")
        first_line[key] = lineno
        result.rows[key] = row
    result.tail = data[result.complete_bytes:]
    if result.tail.strip():
        try:
            result.tail_row = _parse_row(path, data.count(b"\n", 0, result.complete_bytes) + 1, result.tail)
        except RunDirectoryError:
            result.tail_row = None  # torn: the kill came before the line was whole
        if result.tail_row is not None and (result.tail_row["item_id"], result.tail_row["config"]) in result.rows:
            result.tail_row = None  # already complete above: the tail adds nothing
    return result


def repair_torn_tail(rows: RowsFile) -> None:
    """Resume's one repair: a whole last row missing its newline gets it; a torn one is cut off (with one warning).

    Only bytes after the last newline are touched, so no complete row is ever lost."""
    if not rows.tail:
        return
    if rows.tail_row is not None:
        with rows.path.open("ab") as f:
            f.write(b"\n")
        rows.rows[(rows.tail_row["item_id"], rows.tail_row["config"])] = rows.tail_row
    else:
        os.truncate(rows.path, rows.complete_bytes)
        log.warning("%s: cut off a torn last line (%d bytes, left by an interrupted run); its row is answered again "
                    "from the run's cache", rows.path, len(rows.tail))
    rows.tail, rows.tail_row = b"", None


def read_manifest(run_dir: Path) -> dict | None:
    """The run's manifest, or None when there is none; damaged -> RunDirectoryError with ``file:line``."""
    path = Path(run_dir) / MANIFEST
    if not path.exists():
        return None
    advice = "restore it (it records the settings that produced rows.jsonl) or start a new --out"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise RunDirectoryError(f"{path}:1: not UTF-8 text; {advice}") from None
    except json.JSONDecodeError as exc:
        raise RunDirectoryError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}); {advice}") from None
    except OSError as exc:
        raise RunDirectoryError(f"cannot read {path}: {exc.strerror}") from None
    if not isinstance(manifest, dict):
        raise RunDirectoryError(f"{path}:1: not a JSON object; {advice}")
    return manifest


_CACHE_ADVICE = ("the file is left as it is: move it away to answer the missing rows again (with new LLM calls), "
                 "or start a new --out")


def check_run_cache(path: Path) -> None:
    """The run's completion cache is user data (it proves no LLM call is repeated), so damage is reported, not set
    aside: the database must pass SQLite's quick check and every entry must be a completion. Read-only."""
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return  # not written yet (a kill before its first commit leaves an empty file)
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            status = db.execute("PRAGMA quick_check").fetchone()[0]
            if status != "ok":
                raise RunDirectoryError(f"{path}: damaged SQLite database ({status}); {_CACHE_ADVICE}")
            for rowid, value in db.execute("SELECT rowid, value FROM completions"):
                if parse_completion(value) is None:  # the cache's own rule, so no entry passes here and fails later
                    raise RunDirectoryError(f"{path}: row {rowid} of table completions is not a completion; "
                                            f"{_CACHE_ADVICE}")
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        raise RunDirectoryError(f"{path}: damaged SQLite database ({exc}); {_CACHE_ADVICE}") from None


def open_run_cache(path: Path) -> CompletionCache:
    """The run's completion cache, checked first (see :func:`check_run_cache`)."""
    check_run_cache(path)
    return CompletionCache(path, derived=False)  # damage found later is reported too, never set aside


def ensure_run_dir(run_dir: Path) -> None:
    """Create the run directory; an existing file or an unusable path is a one-line error."""
    ensure_directory(Path(run_dir), "--out (a run directory)", RunDirectoryError)


def _holder(run_dir: Path) -> str:
    try:
        owner = json.loads((run_dir / OWNER).read_text(encoding="utf-8"))
        return f"pid {owner['pid']} on {owner['host']}, running since {owner['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not recorded its pid yet"


@contextmanager
def hold_run(run_dir: Path) -> Iterator[None]:
    """One process at a time per run directory: a second one is refused at once, told which process holds it.

    The lock is an OS file lock (released by the kernel if the holder dies), so a killed run never blocks a resume.
    """
    run_dir = Path(run_dir)
    with ExitStack() as stack:
        try:
            stack.enter_context(file_lock(run_dir / LOCK, timeout=0))
        except Timeout:
            raise RunDirectoryError(f"{run_dir} is in use by another lcrag eval ({_holder(run_dir)}); wait for it "
                                    f"to finish or stop it, then run again (it resumes)") from None
        owner = {"pid": os.getpid(), "host": socket.gethostname(),
                 "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
        atomic_write_text(run_dir / OWNER, json.dumps(owner))
        try:
            yield
        finally:
            (run_dir / OWNER).unlink(missing_ok=True)
