"""The run file a shared store's segments were made with, recorded in the store and checked by every process.

Replicas and workers over one PostgreSQL database share segments keyed by content, chunking and embedder: a process
started with another run file would make other segments beside them (twice the embedding, answers that differ by
replica) or read none. So the first process records what shapes the segments and the indexes it builds — the
chunking (and the tokenizer, when the chunking counts tokens), the embedder, the retrievers offered — and every
later one compares its own with it and refuses to start, in one line naming each difference.
``--new-run-file`` records the process's own instead (for a deliberate change: every collection is indexed again).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

from lcrag.core.errors import OptionError
from lcrag.core.registry import CHUNKERS

SCHEMA = """
CREATE TABLE IF NOT EXISTS lcrag_run_identity (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    identity text NOT NULL,
    recorded double precision NOT NULL
);
"""


class RunFileMismatch(OptionError):
    """This process's run file would make other segments than the store's (exit code 2, one line)."""


def run_identity(settings, retrievers: Iterable[str]) -> dict[str, object]:
    """What shapes a collection's segments and indexes in ``settings``: the chunking (with the reader whose tokenizer
    counts it, for a chunking in tokens), the embedder and the retrievers built for every collection."""
    from lcrag.chunking.spec import parse_chunking

    chunking = settings.chunking_for(settings.strategy)
    identity: dict[str, object] = {"chunking": chunking, "embedder": settings.embedder,
                                   "retrievers": sorted(set(retrievers))}
    if CHUNKERS.get(parse_chunking(chunking)[0]).meta.get("needs_tokenizer"):
        identity["tokenizer"] = settings.tokenizer or settings.llm
    return identity


def differences(recorded: dict, mine: dict) -> list[str]:
    """Each key whose value differs, as ``key: the store's X, this process's Y``."""
    return [f"{key}: the store's {recorded.get(key)!r}, this process's {mine.get(key)!r}"
            for key in sorted(set(recorded) | set(mine)) if recorded.get(key) != mine.get(key)]


def check_identity(db, mine: dict, replace: bool = False) -> bool:
    """Record ``mine`` as the store's run identity when it has none (or ``replace``), else refuse a different one
    (:class:`RunFileMismatch`). ``db``: a :class:`lcrag.store.postgres_database.PostgresStore`. Whether it was recorded anew
    (True: its collections' indexes are to be built again)."""
    text = json.dumps(mine, sort_keys=True)
    with db.connection() as conn:
        conn.execute("SELECT pg_advisory_xact_lock(7306)")  # one process records or compares at a time
        conn.execute(SCHEMA)
        row = conn.execute("SELECT identity FROM lcrag_run_identity").fetchone()
        if row is None or (replace and row[0] != text):
            conn.execute("INSERT INTO lcrag_run_identity (one, identity, recorded) VALUES (true, %s, %s) "
                         "ON CONFLICT (one) DO UPDATE SET identity = EXCLUDED.identity, recorded = EXCLUDED.recorded",
                         (text, time.time()))
            return row is not None
    found = differences(_parsed(row[0]), mine)
    if found:
        raise RunFileMismatch(f"--config: this store's collections were indexed with another run file ("
                              f"{'; '.join(found)}); start every process with the same one, or with --new-run-file "
                              f"to index every collection again with this one")
    return False


def _parsed(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
