"""Where lcrag keeps what it computes: indexes, embeddings and the completion cache."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """``$LCRAG_CACHE_DIR``, else ``$XDG_CACHE_HOME/lcrag``, else ``~/.cache/lcrag``."""
    if os.environ.get("LCRAG_CACHE_DIR"):
        return Path(os.environ["LCRAG_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lcrag"
