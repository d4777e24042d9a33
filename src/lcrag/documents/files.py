"""Reading user files safely: regular files only, a size limit, and text that decodes or is refused.

Documents, datasets, corpora and prompt files all come through here, so a FIFO, a device, a huge file or random
bytes get the same one-line error wherever they are given.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from lcrag.errors import InputError

# Larger inputs are refused unless the user raises the limit (``--max-file-size`` / ``LCRAG_MAX_FILE_MB``).
DEFAULT_MAX_FILE_MB = 512


def max_file_bytes() -> int:
    value = os.environ.get("LCRAG_MAX_FILE_MB")
    try:
        mb = float(value) if value else DEFAULT_MAX_FILE_MB
    except ValueError:
        raise InputError(f"LCRAG_MAX_FILE_MB must be a number of megabytes, not {value!r}") from None
    if mb <= 0:
        raise InputError(f"LCRAG_MAX_FILE_MB must be > 0, not {value!r}")
    return int(mb * 1024 * 1024)


def check_regular_file(path: Path, max_bytes: int | None = None) -> int:
    """The size of ``path``, after checking it is a readable regular file within the size limit (never blocks)."""
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{path} does not exist") from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{path} is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path} is not a regular file (a pipe, socket or device); give a file")
    limit = max_bytes if max_bytes is not None else max_file_bytes()
    if info.st_size > limit:
        raise InputError(f"{path} is {info.st_size / 2**20:.0f} MB, over the {limit / 2**20:.0f} MB limit "
                         f"(raise it with LCRAG_MAX_FILE_MB)")
    return info.st_size


def read_regular_file(path: Path, max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file within the size limit; anything else is an :class:`InputError`."""
    check_regular_file(path, max_bytes)
    limit = max_bytes if max_bytes is not None else max_file_bytes()
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)  # the file may have grown since the check
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputError(f"{path} is over the {limit / 2**20:.0f} MB limit (raise it with LCRAG_MAX_FILE_MB)")
    return data
