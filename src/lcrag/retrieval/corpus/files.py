"""The files of a corpus index: their names, atomic writes, the build lock, the corpus fingerprint."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from filelock import Timeout

from lcrag.documents.files import check_regular_file
from lcrag.core.errors import InputError
from lcrag.core.lazy import lazy_module
from lcrag.core.files import atomic_write_text, ensure_directory, file_lock

if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use (see lcrag.core.lazy)
    np = lazy_module("numpy")

# What an index holds besides the lock: removed by a rebuild whose corpus content or piece size changed.
INDEX_FILES = ("meta.json*", "corpus.sqlite*", "pieces.npz*", "tokens-*", "embeddings-*", "units")
log = logging.getLogger("lcrag")


def file_key(text: str) -> str:
    """A short, file-name-safe key of a tokenizer's or embedder's name."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def save_npz(path: Path, **arrays: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".partial.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def write_meta(path: Path, meta: dict) -> None:
    atomic_write_text(path, json.dumps(meta, indent=1))


def index_directory(out: str | Path) -> Path:
    """``out`` as an index directory, created if missing; a file or an uncreatable path is an :class:`InputError`."""
    return ensure_directory(Path(out), "--out (the index directory)", InputError)


def fingerprint(source: str | Path) -> tuple[int, str]:
    """(size, sha256) of the corpus file, streamed. The whole file is hashed: ingesting reads all of it anyway,
    and hashing runs at over 1 GB/s, so a resumed or repeated build pays seconds, never a wrong index."""
    check_regular_file(Path(source), max_bytes=sys.maxsize)  # corpora are streamed, so no size limit here
    digest, size = hashlib.sha256(), 0
    with open(source, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


@contextmanager
def build_lock(out: Path) -> Iterator[None]:
    """Hold the index's build lock; say so once when another process holds it, then wait for it."""
    with ExitStack() as stack:
        try:
            stack.enter_context(file_lock(out / ".build.lock", timeout=0))
        except Timeout:
            log.warning("another process is building %s; waiting for it to finish", out)
            stack.enter_context(file_lock(out / ".build.lock"))
        yield
