"""What the pipeline derived from a collection's files on disk, under the cache directory beside the collections,
removed when a file is: a text removed from a collection must not stay in a cache made from it.

- completions cached for questions about the collection (``completions.sqlite``, tagged with the collection:
  :func:`lcrag.readers.cache.forget_collection`), whose prompts held its files' text;
- the collection's indexes (``indexes/<key>/``, named by the collection in their ``meta.json``: its tree index holds
  summaries of its text) made before the change; the index of the collection as it is now is made after it;
- the KV states the embedded reader saved of the collection's LC prompts (``kv/<key>.bin``, tagged with it:
  :func:`lcrag.readers.kv_store.forget_collection_prefixes`) before the change;
- the RAPTOR trees of a removed content (``raptor/<settings>/trees/<content hash>/``: summaries of that file).

The parse cache keeps its own (:meth:`lcrag.documents.sandbox.ParseCache.drop`)."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterable
from pathlib import Path

from lcrag.readers.cache import forget_collection
from lcrag.readers.kv_store import forget_collection_prefixes

log = logging.getLogger(__name__)

COMPLETIONS = "completions.sqlite"
PREFIXES = "kv"  # lcrag.pipeline.pipeline's keep_prefixes
INDEXES = "indexes"
RAPTOR = "raptor"
_HEX = frozenset("0123456789abcdef")


def forget_collection_caches(cache_dir: Path, name: str, before: float) -> int:
    """Remove the completions cached for questions about collection ``name`` and its indexes made before ``before``
    (a time), and the reader's KV states of its prompts saved before then: what held the text of a file it no longer
    has; how many entries, states and folders went."""
    gone = forget_collection(cache_dir / COMPLETIONS, name) + forget_collection_prefixes(cache_dir / PREFIXES, name,
                                                                                           before)
    for meta in (cache_dir / INDEXES).glob("*/meta.json"):
        try:
            made = meta.stat().st_mtime
            if made >= before or json.loads(meta.read_text(encoding="utf-8")).get("document") != name:
                continue
        except (OSError, ValueError, AttributeError):
            continue  # being written or removed meanwhile, or not an index's
        shutil.rmtree(meta.parent, ignore_errors=True)
        gone += 1
    return gone


def forget_contents(cache_dir: Path, content_hashes: Iterable[str]) -> int:
    """Remove the RAPTOR trees of these contents (files no collection holds any more); how many went."""
    gone = 0
    for content in set(content_hashes):
        if len(content) != 64 or not set(content) <= _HEX:
            continue  # (not a SHA-256: no glob of anything else)
        for tree in (cache_dir / RAPTOR).glob(f"*/trees/{content}"):
            shutil.rmtree(tree, ignore_errors=True)
            gone += 1
    return gone
