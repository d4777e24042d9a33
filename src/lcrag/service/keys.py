"""Keys per person, scoped, and the audit log: who may do what to which collections, and who did what.

A key is ``lcrag_<id>_<secret>``: ``id`` (12 hex digits) finds its row, ``secret`` (``secrets.token_urlsafe(32)``,
256 random bits) makes it unguessable. Only the SHA-256 of the whole key is stored (a random 256-bit key needs no
slow hash: there is no dictionary to try), and a key given is compared with it by :func:`hmac.compare_digest`. Each
key has a name (its holder), a role (:data:`ROLES`: a reader asks and reads; a writer also uploads and deletes files;
an admin also creates and deletes collections, manages keys and reads the audit log) and optional collection
patterns (fnmatch globs, ``team-a*``): a key with patterns never sees another collection.

Keys and the audit log live in the store the service uses, so every replica reads the same ones: tables
``lcrag_keys`` and ``lcrag_audit`` in the embedded store's SQLite file (``collections.sqlite`` in the cache
directory) or in the PostgreSQL database of ``--store``, created on first use. A replica reads the keys again when
its copy is older than :data:`REFRESH_SECONDS`, so a key revoked through any replica (or ``lcrag keys revoke``) is
refused by all of them within a second. A revoked key's row stays (revoked), and once any key was ever added the
server asks every request for a key: revoking the last one never opens it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from lcrag.core.errors import InputError

log = logging.getLogger(__name__)

ROLES = ("reader", "writer", "admin")  # each may do what the ones before it may
PREFIX = "lcrag_"
ID_DIGITS = 12
REFRESH_SECONDS = 0.5  # a replica's copy of the keys is read again when this old: a revoked key is refused within 1 s
MAX_COPY_SECONDS = 1.0  # the oldest copy used while another thread reads the keys again
REFRESH_WAIT_SECONDS = 10.0  # the longest a request waits for another's reading of the keys
LAST_USED_SECONDS = 60.0  # a key's "last used" is written at most this often (a write per request would cost more)
MAX_AUDIT_PAGE = 1000
AUDIT_RETENTION_SECONDS = 365 * 86400.0  # how long an entry of the audit log is kept (lcrag serve --audit-retention)
KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
PATTERN = re.compile(r"[A-Za-z0-9_.*?!\[\]-]{1,80}")  # a collection name's characters and fnmatch's
RESERVED = ("api-key", "cli", "anonymous")  # the names the audit log gives those that hold no key of this table
ACTIONS = ("collection.create", "collection.delete", "file.upload", "file.delete", "key.add", "key.revoke")
_DUMMY = hashlib.sha256(b"no such key").hexdigest()  # compared against when a key's id is unknown: the same work


class KeyExists(InputError):
    """A key's name that holds a usable key already (HTTP 409)."""


class KeysUnavailable(RuntimeError):
    """The store holding the keys cannot be read (HTTP 503: no key can be checked)."""


@dataclass(frozen=True)
class Principal:
    """Who a request comes from: a key's name (or ``api-key``, ``anonymous`` on a server without keys), its role
    and its collection patterns (none: every collection)."""

    name: str
    role: str
    patterns: tuple[str, ...] = ()

    def can(self, role: str) -> bool:
        return ROLES.index(self.role) >= ROLES.index(role)

    def sees(self, collection: str) -> bool:
        return not self.patterns or any(fnmatchcase(collection, pattern) for pattern in self.patterns)

    @property
    def unscoped_admin(self) -> bool:
        """An admin over every collection: what managing keys and reading the audit log need (a scoped admin could
        otherwise make itself a key for everything)."""
        return self.role == "admin" and not self.patterns


API_KEY = Principal("api-key", "admin")  # lcrag serve --api-key: one admin key over every collection
ANONYMOUS = Principal("anonymous", "admin")  # a server with no key at all (loopback only): anyone local


def new_key() -> tuple[str, str]:
    """A new key and its id: ``lcrag_<12 hex>_<token_urlsafe(32)>``."""
    key_id = secrets.token_hex(ID_DIGITS // 2)
    return f"{PREFIX}{key_id}_{secrets.token_urlsafe(32)}", key_id


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def key_id(key: str) -> str | None:
    """The id part of a key as given, or None when it is not of the form of :func:`new_key`."""
    if len(key) <= len(PREFIX) + ID_DIGITS + 1 or not key.startswith(PREFIX) or key[len(PREFIX) + ID_DIGITS] != "_":
        return None
    return key[len(PREFIX):len(PREFIX) + ID_DIGITS]


def matches(given: str, stored_hash: str) -> bool:
    """Whether key ``given`` is the one whose SHA-256 is ``stored_hash``, compared in constant time."""
    return hmac.compare_digest(key_hash(given), stored_hash)


def check_name(name: str) -> str:
    if not isinstance(name, str) or not KEY_NAME.fullmatch(name):
        raise InputError(f"key names are 1-64 letters, digits, '_', '.', '@' or '-' (starting with a letter or digit), "
                         f"not {str(name)[:64]!r}")
    if name in RESERVED:
        raise InputError(f"{name!r} is the audit log's name for {'the --api-key' if name == 'api-key' else name}; "
                         "choose another")
    return name


def check_role(role: str) -> str:
    if role not in ROLES:
        raise InputError(f"unknown role {str(role)[:40]!r}: one of {', '.join(ROLES)}")
    return role


def check_patterns(patterns) -> tuple[str, ...]:
    """Collection patterns as given (fnmatch globs over collection names), each checked."""
    checked = []
    for pattern in patterns or ():
        if not isinstance(pattern, str) or not PATTERN.fullmatch(pattern):
            raise InputError(f"collection pattern {str(pattern)[:80]!r}: a collection name or a glob of one "
                             "(letters, digits, '_', '.', '-' and '*', '?', '[...]'), e.g. team-a*")
        checked.append(pattern)
    return tuple(dict.fromkeys(checked))


@dataclass
class _Snapshot:
    """The keys as last read: whether any key was ever added, and the usable ones by id."""

    read_at: float = float("-inf")
    any_key: bool = False
    active: dict[str, tuple[str, Principal]] = field(default_factory=dict)  # id -> (hash, principal)


class Database:
    """Where the tables are: a SQLite file or a PostgreSQL store. ``transaction()`` yields ``run(sql, params)``
    (``?`` placeholders) returning the rows."""

    schema: str = ""
    errors: tuple[type[BaseException], ...] = ()

    def transaction(self, write: bool = True):  # pragma: no cover - each backend's own
        raise NotImplementedError


_COLUMNS = """name TEXT PRIMARY KEY, key_id TEXT NOT NULL UNIQUE, hash TEXT NOT NULL, role TEXT NOT NULL,
    patterns TEXT NOT NULL, created DOUBLE PRECISION NOT NULL, created_by TEXT NOT NULL,
    last_used DOUBLE PRECISION, revoked DOUBLE PRECISION"""
_AUDIT = """at DOUBLE PRECISION NOT NULL, actor TEXT NOT NULL, action TEXT NOT NULL, collection TEXT, detail TEXT"""
_AUDIT_AT = "CREATE INDEX IF NOT EXISTS lcrag_audit_at ON lcrag_audit (at);"  # what pruning the log looks up


class SqliteDatabase(Database):
    """The embedded store's SQLite file (a connection of its own, WAL, beside the store's)."""

    schema = (f"CREATE TABLE IF NOT EXISTS lcrag_keys ({_COLUMNS});\n"
              f"CREATE TABLE IF NOT EXISTS lcrag_audit (id INTEGER PRIMARY KEY AUTOINCREMENT, {_AUDIT});\n{_AUDIT_AT}")
    errors = (sqlite3.Error, OSError)

    def __init__(self, path: Path):
        self.path = Path(path)
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30.0, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(self.schema)
            self._db = db
        return self._db

    @contextmanager
    def transaction(self, write: bool = True) -> Iterator[Any]:
        with self._lock:
            db = self._connection()
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")  # a read never waits for the store's writers
            try:
                yield lambda sql, params=(): db.execute(sql, params).fetchall()
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


class PostgresDatabase(Database):
    """The tables in a PostgreSQL store's database (its connections: :meth:`PostgresStore.connection`)."""

    schema = (f"CREATE TABLE IF NOT EXISTS lcrag_keys ({_COLUMNS});\n"
              f"CREATE TABLE IF NOT EXISTS lcrag_audit (id bigserial PRIMARY KEY, {_AUDIT});\n{_AUDIT_AT}")

    def __init__(self, store):
        import psycopg

        from lcrag.store.postgres_database import StoreDown, StoreUnavailable

        self.store, self.errors = store, (psycopg.Error, StoreUnavailable, StoreDown)
        self._ready = False

    @contextmanager
    def transaction(self, write: bool = True) -> Iterator[Any]:
        with self.store.connection() as db:
            if not self._ready:
                db.execute("SELECT pg_advisory_xact_lock(7306)")  # one creator at a time
                db.execute(self.schema)
                self._ready = True

            def run(sql: str, params=()):
                cursor = db.execute(sql.replace("?", "%s"), params)
                return cursor.fetchall() if cursor.description else []

            yield run

    def close(self) -> None:
        pass  # the store's connections are the store's


def _reason(exc: BaseException) -> str:
    """Why the store failed, in words that name no server path or address: SQLite's own message, else the kind of
    failure."""
    if isinstance(exc, sqlite3.Error):
        return " ".join(str(exc).split())[:300]
    if type(exc).__name__ in ("StoreUnavailable", "StoreDown"):
        return "the database cannot be reached"
    return f"the database failed: {type(exc).__name__}"


class Keys:
    """Keys and the audit log over a :class:`Database`, with the keys read at most every ``refresh_seconds``."""

    def __init__(self, database: Database, refresh_seconds: float = REFRESH_SECONDS,
                 wait_seconds: float = REFRESH_WAIT_SECONDS, audit_retention: float = AUDIT_RETENTION_SECONDS):
        """``audit_retention``: seconds an audit entry is kept; older ones go as the next change is recorded."""
        self.database, self.refresh_seconds = database, min(refresh_seconds, MAX_COPY_SECONDS)
        self.audit_retention = audit_retention
        self.wait_seconds = wait_seconds
        self._snapshot = _Snapshot()
        self._refreshing, self._writing = threading.Lock(), threading.Lock()
        self._used: dict[str, float] = {}  # key name -> when last used, not yet written
        self._written: dict[str, float] = {}  # key name -> the last-used time last written

    @contextmanager
    def _run(self, what: str, write: bool = True) -> Iterator[Any]:
        try:
            with self.database.transaction(write) as run:
                yield run
        except self.database.errors as exc:
            raise KeysUnavailable(f"{what}: the store cannot be used ({_reason(exc)})") from None

    # -- checking keys ---------------------------------------------------------------------------------------------
    def stale(self) -> bool:
        return time.monotonic() - self._snapshot.read_at >= self.refresh_seconds

    def refresh(self, force: bool = False) -> None:
        """Read the keys again if the copy is stale. One reader at a time: meanwhile the others use the copy there
        is while it is under :data:`MAX_COPY_SECONDS` old, else wait for the new one (at most ``wait_seconds``: a
        store that hangs holds no request longer, and no more threads)."""
        if not self._refreshing.acquire(blocking=False):
            if not force and time.monotonic() - self._snapshot.read_at < MAX_COPY_SECONDS:
                return
            if not self._refreshing.acquire(timeout=self.wait_seconds):
                raise KeysUnavailable(f"the keys cannot be checked: the store has not answered in "
                                      f"{self.wait_seconds:g} s")
        try:
            self._read(force)
        finally:
            self._refreshing.release()
        if self._used and self._writing.acquire(blocking=False):  # outside the reading: never holds it up
            try:
                self._write_last_used()
            finally:
                self._writing.release()

    def _read(self, force: bool) -> None:
        if not force and not self.stale():  # read by the thread this one waited for
            return
        started = time.monotonic()
        with self._run("the keys cannot be checked", write=False) as run:
            rows = run("SELECT key_id, hash, name, role, patterns, revoked FROM lcrag_keys")
        active = {row[0]: (row[1], Principal(row[2], row[3], tuple(json.loads(row[4]))))
                  for row in rows if row[5] is None}
        self._snapshot = _Snapshot(started, bool(rows), active)

    def read(self) -> bool:
        """Whether the keys were read at all yet."""
        return self._snapshot.read_at != float("-inf")

    def required(self) -> bool:
        """Whether a key was ever added: then every request needs one. From the copy read last: a caller on an event
        loop reads it again in a thread (:meth:`refresh`) when it is :meth:`stale`."""
        return self._snapshot.any_key

    def identify(self, key: str) -> Principal | None:
        """The holder of ``key``, or None (unknown, revoked, or not a key of this form), from the copy read last."""
        entry = self._snapshot.active.get(key_id(key) or "")
        stored, principal = entry if entry is not None else (_DUMMY, None)
        if not matches(key, stored) or principal is None:
            return None
        self._used[principal.name] = time.time()
        return principal

    def _write_last_used(self) -> None:
        """Write when keys were last used, each at most every :data:`LAST_USED_SECONDS`; a failure is only logged
        (it is tried again at the next refresh)."""
        due = {name: at for name, at in list(self._used.items())
               if at - self._written.get(name, float("-inf")) >= LAST_USED_SECONDS}
        if not due:
            return
        try:
            with self._run("when keys were last used could not be written") as run:
                for name, at in due.items():
                    run("UPDATE lcrag_keys SET last_used = ? WHERE name = ?", (at, name))
        except KeysUnavailable as exc:
            log.warning("%s", exc)
            return
        for name, at in due.items():
            self._written[name] = at
            if self._used.get(name) == at:
                del self._used[name]

    # -- managing keys ---------------------------------------------------------------------------------------------
    def add(self, name: str, role: str = "reader", patterns=(), by: str = "cli") -> dict:
        """A new key for ``name`` (a revoked key's name may be given again): its description with the key itself,
        the only time it is shown. A name that holds a usable key is refused (:class:`InputError`)."""
        check_name(name)
        check_role(role)
        patterns = check_patterns(patterns)
        key, kid = new_key()
        now = time.time()
        with self._run(f"key {name!r} could not be added") as run:
            added = run("INSERT INTO lcrag_keys (name, key_id, hash, role, patterns, created, created_by) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET key_id = excluded.key_id, "
                        "hash = excluded.hash, role = excluded.role, patterns = excluded.patterns, "
                        "created = excluded.created, created_by = excluded.created_by, last_used = NULL, "
                        "revoked = NULL WHERE lcrag_keys.revoked IS NOT NULL RETURNING name",
                        (name, kid, key_hash(key), role, json.dumps(patterns), now, by))
            if not added:
                raise KeyExists(f"a key named {name!r} exists: revoke it first (lcrag keys revoke {name})")
            self._audit(run, by, "key.add", None, f"{name} ({role}{': ' + ', '.join(patterns) if patterns else ''})")
        self._snapshot.read_at = float("-inf")  # this process sees it at once
        return {"name": name, "role": role, "collections": list(patterns), "created": now, "key": key}

    def revoke(self, name: str, by: str = "cli") -> None:
        """Revoke ``name``'s key (refused by every replica within a second); an unknown name: :class:`LookupError`."""
        with self._run(f"key {name[:64]!r} could not be revoked") as run:
            if not run("UPDATE lcrag_keys SET revoked = ? WHERE name = ? AND revoked IS NULL RETURNING name",
                       (time.time(), name)):
                raise LookupError(f"no key named {name[:64]!r} (lcrag keys list shows them)")
            self._audit(run, by, "key.revoke", None, name)
        self._snapshot.read_at = float("-inf")

    def listed(self, revoked: bool = False) -> list[dict]:
        """The keys (never a key itself, nor its hash), by name; revoked ones too when asked."""
        with self._run("the keys cannot be listed") as run:
            rows = run("SELECT name, role, patterns, created, created_by, last_used, revoked FROM lcrag_keys "
                       "ORDER BY name")
        return [{"name": n, "role": r, "collections": json.loads(p), "created": c, "created_by": b,
                 "last_used": max(u or 0, self._used.get(n, 0)) or None, "revoked": v}
                for n, r, p, c, b, u, v in rows if revoked or v is None]

    # -- the audit log ---------------------------------------------------------------------------------------------
    def _audit(self, run, actor: str, action: str, collection: str | None, detail: str | None) -> None:
        now = time.time()
        run("INSERT INTO lcrag_audit (at, actor, action, collection, detail) VALUES (?, ?, ?, ?, ?)",
            (now, actor, action, collection, detail))
        run("DELETE FROM lcrag_audit WHERE at < ?", (now - self.audit_retention,))  # (an indexed range: cheap)

    def record(self, actor: str, action: str, collection: str | None = None, detail: str | None = None) -> None:
        """A change, in the audit log."""
        with self._run("the audit log cannot be written") as run:
            self._audit(run, actor, action, collection, detail)

    def audit(self, limit: int = 100, before: int | None = None) -> list[dict]:
        """The audit log, newest first: at most ``limit`` entries (of :data:`MAX_AUDIT_PAGE`), older than entry
        ``before`` when given (the next page)."""
        limit = max(1, min(int(limit), MAX_AUDIT_PAGE))
        with self._run("the audit log cannot be read") as run:
            rows = run("SELECT id, at, actor, action, collection, detail FROM lcrag_audit WHERE id < ? "
                       "ORDER BY id DESC LIMIT ?", (before if before is not None else 2**62, limit))
        return [{"id": int(i), "at": a, "actor": who, "action": what, "collection": c, "detail": d}
                for i, a, who, what, c, d in rows]

    def close(self) -> None:
        self.database.close()


def keys_for(collections, audit_retention: float = AUDIT_RETENTION_SECONDS) -> Keys:
    """The keys of the store ``collections`` is (a PostgreSQL store's database, else the embedded store's SQLite
    file beside the collections folder)."""
    store = getattr(collections, "db", None)
    if store is not None and hasattr(store, "connection"):
        return Keys(PostgresDatabase(store), audit_retention=audit_retention)
    return Keys(SqliteDatabase(Path(collections.root).parent / "collections.sqlite"), audit_retention=audit_retention)
