"""Document prefixes kept on disk: llama.cpp's slot save/restore, so the second LC question on a document after a
restart (or in a new ``lcrag ask`` process) does not re-read the document.

The embedded reader's server writes a slot's KV state to ``DIR/<name>.bin`` and reads it back (its ``/slots``
endpoint, ``--slot-save-path``). A state is saved once per (model, document, prompt prefix) key, under a temporary
name renamed into place (two processes never see a half file); reading it back touches it, and the least recently
used files go when the directory passes its byte limit. A file the server cannot restore (damaged, or from another
build) is deleted and the prefix recomputed. A state saved for a question about a service's collection is tagged
with it (``<name>.tags`` beside it), so that it goes when a file is removed from the collection
(:func:`forget_collection_prefixes`): it holds that file's text, as the model read it."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from lcrag.readers.cache import collection_tag

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 4 << 30  # LCRAG_KV_MAX_GB overrides
Post = Callable[[str, str], bool]  # (action, file name in the directory) -> whether the server did it


def max_bytes_from_env() -> int:
    value = os.environ.get("LCRAG_KV_MAX_GB")
    try:
        return int(float(value) * (1 << 30)) if value else DEFAULT_MAX_BYTES
    except ValueError:
        log.warning("LCRAG_KV_MAX_GB=%r is not a number: using %d GB", value, DEFAULT_MAX_BYTES >> 30)
        return DEFAULT_MAX_BYTES


class KVStore:
    def __init__(self, directory: Path, max_bytes: int = DEFAULT_MAX_BYTES):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.bin"

    def restore(self, post: Post, key: str) -> bool:
        """Load the key's saved state into the slot; False (and the file gone) when there is none or it is bad."""
        path = self.path(key)
        if not path.is_file():
            return False
        if post("restore", path.name):
            os.utime(path)  # recently used: evicted last
            return True
        log.warning("discarded a KV state file the reader could not restore (%s); the document is read again",
                    path.name)
        path.unlink(missing_ok=True)
        return False

    def save(self, post: Post, key: str, tags: tuple[str, ...] = ()) -> None:
        """Save the slot's state under the key (once), tagged with ``tags`` (its question's collection: see
        :func:`lcrag.readers.cache.question_tags`), then keep the directory within its byte limit."""
        path = self.path(key)
        if path.is_file():
            return
        temporary = f".{key}.{os.getpid()}.tmp"
        if post("save", temporary) and (self.directory / temporary).is_file():
            os.replace(self.directory / temporary, path)
            if tags:
                path.with_suffix(".tags").write_text("\n".join(tags) + "\n", encoding="utf-8")
            self.evict(keep=path)
        else:
            (self.directory / temporary).unlink(missing_ok=True)

    def evict(self, keep: Path | None = None) -> None:
        files = sorted((p.stat().st_mtime, p.stat().st_size, p) for p in self.directory.glob("*.bin"))
        total = sum(size for _, size, _ in files)
        for _, size, p in files:  # oldest first
            if total <= self.max_bytes:
                break
            if p != keep:
                total -= size
                p.unlink(missing_ok=True)
                p.with_suffix(".tags").unlink(missing_ok=True)


def forget_collection_prefixes(directory: Path, name: str, before: float) -> int:
    """Remove the states saved in ``directory`` for questions about collection ``name`` before ``before`` (a time);
    how many went."""
    gone = 0
    for tags in Path(directory).glob("*.tags"):
        try:
            if tags.stat().st_mtime >= before or collection_tag(name) not in tags.read_text("utf-8").splitlines():
                continue
        except (OSError, UnicodeDecodeError):
            continue  # removed meanwhile (evicted), or not one of ours
        tags.with_suffix(".bin").unlink(missing_ok=True)
        tags.unlink(missing_ok=True)
        gone += 1
    return gone
