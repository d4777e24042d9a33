"""Where lcrag keeps what it computes: indexes, embeddings and the completion cache."""

from __future__ import annotations

import os
from pathlib import Path

from lcrag.errors import InputError


def default_cache_dir() -> Path:
    """``$LCRAG_CACHE_DIR``, else ``$XDG_CACHE_HOME/lcrag``, else ``~/.cache/lcrag``."""
    if os.environ.get("LCRAG_CACHE_DIR"):
        return Path(os.environ["LCRAG_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lcrag"


def made_directory(path: str | Path, what: str = "the cache directory (--cache-dir or LCRAG_CACHE_DIR)") -> Path:
    """``path``, made if missing; refused in one line if it cannot be, before anything is computed there."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        why = "it is a file, not a directory" if path.is_file() else error.strerror or str(error)
        raise InputError(f"{path} cannot be {what}: {why}") from None
    return path
