"""The answer cache: an answer kept in the collection store (:meth:`CollectionStore.cache_answer`), so that the same
question about the same collection is answered again — by this replica or any other on the store — without a reader
call.

An answer is kept under the collection's id and version (a file added or removed, or the collection made again, is
a new version: nothing of an earlier one is served) and a key (:meth:`AnswerCache.key`) hashing everything else that
shapes it: the question, the conversation it follows, every per-question choice as resolved
(:class:`lcrag.pipeline.specs.QuestionSpec`: strategy and retriever with all their options, k, budget, chunking, max tokens,
prompts, how a follow-up is condensed), the router's file by content, the reader's identity (model and servers:
:func:`lcrag.readers.reader_identity`), the embedder, and the text the collection's files gave (its content hash:
an answer written while a change was being indexed is never served for the content that follows it).

A collection version keeps at most ``lcrag serve --kept-answers`` answers (:data:`lcrag.store.base.KEPT_ANSWERS`);
the one written longest ago goes first, so a store that answers many distinct questions stays bounded.

Not kept: an answer a learned router decided while holding an LC share (``answer.routing``): its ledger must move
with every question it routes, which a cached answer would skip. A cache-aware Self-Route's answer is kept: its
state only makes a route cheaper, and a cached answer costs nothing.

An answer is kept only when it is at most ``lcrag serve --max-kept-answer-kb`` (:data:`MAX_KEPT_ANSWER_BYTES`) as
written, and one over it is never served (an earlier lcrag kept bigger ones): a larger answer (a long text asked for
with many sources) is answered afresh each time rather than kept trimmed, since an answer served from the cache must
be the one the question got, sources and all; the bound holds the store to ``--kept-answers`` times it per version.

A cached answer is the one written then, its calls marked ``from_cache`` (as the completion cache marks a completion
it serves: the counts are the original call's, its seconds 0); it is stored as JSON, never as a pickle (a shared
database is no place to take code from)."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from lcrag.pipeline.pipeline import Pipeline
from lcrag.core.provenance import Source
from lcrag.readers import reader_identity
from lcrag.service.limits import MAX_KEPT_ANSWER_BYTES
from lcrag.store.base import KEPT_ANSWERS, CollectionState
from lcrag.pipeline.specs import resolve
from lcrag.strategies.routing.learned import is_router_path
from lcrag.core.types import Answer, ChunkUsed, Document, LLMCall

logger = logging.getLogger(__name__)

# Changes when what a key hashes or how an answer is written changes: answers kept before are not read.
FORMAT = "lcrag-answer-1"
_FIELDS = frozenset(f.name for f in fields(Answer))


def router_digest(router: str | None) -> str | None:
    """A router as its content (a shipped one by its name): the same file on two replicas is one router."""
    if not router:
        return None
    if not is_router_path(router):
        return router  # a shipped router's bare name (a server offers no other), never a file in its directory
    try:
        return hashlib.sha256(Path(router).read_bytes()).hexdigest()
    except (OSError, ValueError):
        return f"unreadable:{router}"


def from_cache(answer: Answer) -> bool:
    """Whether every call of ``answer`` was answered from a cache (no generation)."""
    return bool(answer.calls) and all(call.from_cache for call in answer.calls)


def dump(answer: Answer) -> bytes:
    return json.dumps({"format": FORMAT, "answer": answer.to_dict()}, ensure_ascii=False).encode("utf-8")


def load(raw: bytes) -> Answer | None:
    """The answer written by :func:`dump`, its calls marked from the cache; None for anything else."""
    try:
        data = json.loads(raw)
        if data.get("format") != FORMAT:
            return None
        kept = {name: value for name, value in data["answer"].items() if name in _FIELDS}
        kept["calls"] = [replace(LLMCall(**call), from_cache=True, seconds=0.0) for call in kept["calls"]]
        kept["chunks"] = [ChunkUsed(**chunk) for chunk in kept["chunks"]]
        kept["sources"] = [Source(**source) for source in kept["sources"]]
        return Answer(**kept)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None  # another version's or a damaged entry: answered afresh (and written again)


class AnswerCache:
    """Answers in ``store`` for the questions ``pipeline`` answers, at most ``keep`` per collection version (the
    oldest written go first), each at most ``max_bytes`` as written; ``enabled`` False or ``keep`` 0: nothing is
    read or kept."""

    def __init__(self, store: Any, pipeline: Pipeline, enabled: bool, keep: int = KEPT_ANSWERS,
                 max_bytes: int = MAX_KEPT_ANSWER_BYTES):
        self.store, self.pipeline, self.enabled, self.keep = store, pipeline, enabled and keep > 0, keep
        self.max_bytes = max_bytes

    def version(self, collection: str) -> tuple[str, int] | None:
        """The collection's id and version now (None: the cache is off)."""
        return self.version_of(self.store.state(collection)) if self.enabled else None

    def version_of(self, state: CollectionState) -> tuple[str, int] | None:
        """The id and version of a collection read as ``state`` (None: the cache is off)."""
        return (state.id, state.version) if self.enabled else None

    def key(self, document: Document, question: str, history: list[dict[str, str]],
            choices: dict[str, Any]) -> str:
        settings = self.pipeline.settings_for(choices)
        spec = resolve(settings, settings.strategy)
        parts = [FORMAT, reader_identity(self.pipeline.reader), settings.context_window, settings.embedder,
                 settings.summary_llm, repr(spec), router_digest(spec.strategy.kwargs.get("router")),
                 document.content_hash, question, list(history)]
        return hashlib.sha256(json.dumps(parts, default=repr, ensure_ascii=False).encode("utf-8")).hexdigest()

    def get(self, version: tuple[str, int] | None, key: str) -> Answer | None:
        if version is None:
            return None
        raw = self.store.cached_answer(version[0], version[1], key)
        return None if raw is None or len(raw) > self.max_bytes else load(raw)

    def put(self, version: tuple[str, int] | None, key: str, answer: Answer, collection: str) -> bool:
        """Keep ``answer`` when it may be served again; the store keeps it only while the collection is still at
        ``version`` (a change that came in while it was answered makes a new version, which it does not belong to;
        a collection deleted meanwhile has none), checked where it is written, not read before. Whether it was
        kept. A store that fails to keep it (a full disk, a database gone away) is logged: the question was
        answered all the same."""
        if version is None or answer.routing is not None:
            return False
        raw = dump(answer)
        if len(raw) > self.max_bytes:
            logger.info("an answer to %r is not kept in the answer cache: %s bytes, over the %s of "
                        "--max-kept-answer-kb", collection, f"{len(raw):,}", f"{self.max_bytes:,}")
            return False
        try:
            return self.store.cache_answer(version[0], version[1], key, raw, self.keep)
        except Exception as exc:  # whatever the store raises (OSError, psycopg's errors): the answer stands
            logger.warning("an answer to %r could not be kept in the answer cache: %s", collection, exc)
            return False
