"""Where lcrag keeps what it computes: indexes, embeddings and the completion cache."""

from __future__ import annotations

import os
from pathlib import Path

from lcrag.core.errors import InputError
from lcrag.core.files import ensure_directory


def default_cache_dir() -> Path:
    """``$LCRAG_CACHE_DIR``, else ``$XDG_CACHE_HOME/lcrag``, else ``~/.cache/lcrag``."""
    if os.environ.get("LCRAG_CACHE_DIR"):
        return Path(os.environ["LCRAG_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lcrag"


def cache_directory(path: str | Path | None = None) -> Path:
    """The cache directory (``path``, else the default), made if missing; refused in one line if it cannot be, before
    anything is computed there."""
    return ensure_directory(Path(path or default_cache_dir()), "the cache directory (--cache-dir or LCRAG_CACHE_DIR)",
                            InputError)
