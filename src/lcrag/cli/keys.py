"""`lcrag keys`: the people's keys of `lcrag serve` and `lcrag mcp`, in the store they use (the cache directory's
SQLite file, or the PostgreSQL database of --store): add one (printed once), list them, revoke one. Each change is
in the audit log as made by "cli"."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from lcrag.cli.commands import command_group
from lcrag.cli.service_flags import CacheDir, RunFile, StoreUrl
from lcrag.core.errors import InputError, OptionError

keys_app = command_group("People's keys for lcrag serve and lcrag mcp, each with a role "
                         "(reader, writer, admin) and the collections it may see; add, list, revoke.")

Name = Annotated[str, typer.Argument(help="Whose key: a person's or a program's name (1-64 letters, digits, _ . @ -).")]


def open_keys(cache_dir: Path | None, store: str | None, config: Path | None):
    """The keys where `lcrag serve` with the same --store, --cache-dir and --config reads them."""
    from lcrag.service.keys import Keys, PostgresDatabase, SqliteDatabase

    if store:
        from lcrag.store.postgres_database import PostgresStore, check_url

        check_url(store)
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise OptionError("--store needs PostgreSQL's driver: pip install -e '.[postgres]'") from None
        return Keys(PostgresDatabase(PostgresStore(store)))
    from lcrag.pipeline.config import Config
    from lcrag.core.paths import cache_directory

    run = Config.from_file(config) if config else Config()
    settings = run.merged({"cache_dir": cache_dir} if cache_dir else {}).settings()
    return Keys(SqliteDatabase(cache_directory(settings.cache_dir) / "collections.sqlite"))


@contextmanager
def opened_keys(cache_dir: Path | None, store: str | None, config: Path | None) -> Iterator:
    """:func:`open_keys`, closed after the block; keys that cannot be read or written are one line (exit code 2)."""
    from lcrag.service.keys import KeysUnavailable

    keys = open_keys(cache_dir, store, config)
    try:
        yield keys
    except KeysUnavailable as exc:
        raise OptionError(" ".join(str(exc).split())) from None
    finally:
        keys.close()


@keys_app.command("add")
def add(
    name: Name,
    collections: Annotated[Optional[list[str]], typer.Option("--collections", help="A collection the key may see, or a pattern of them (fnmatch: team-a*); repeatable, or several separated by commas. None: every collection.")] = None,
    role: Annotated[str, typer.Option("--role", help="reader: list, read and ask its collections; writer: also upload and delete files; admin: also create and delete collections, manage keys over HTTP and read the audit log.")] = "reader",
    cache_dir: CacheDir = None,
    store: StoreUrl = None,
    config: RunFile = None,
) -> None:
    """Add a key for NAME and print it, once: only its hash is kept."""
    from lcrag.service.keys import check_name, check_patterns, check_role

    check_name(name)
    check_role(role)
    patterns = check_patterns([p.strip() for given in collections or () for p in given.split(",") if p.strip()])
    with opened_keys(cache_dir, store, config) as keys:
        added = keys.add(name, role, patterns, by="cli")
    scope = ", ".join(patterns) if patterns else "every collection"
    typer.echo(f"lcrag keys: {name} ({role}, {scope}); the key is shown this once:", err=True)
    typer.echo(added["key"])


@keys_app.command("list")
def list_keys(
    revoked: Annotated[bool, typer.Option("--revoked", help="Show revoked keys too.")] = False,
    cache_dir: CacheDir = None,
    store: StoreUrl = None,
    config: RunFile = None,
) -> None:
    """The keys: name, role, collections, when added and last used (never a key)."""
    with opened_keys(cache_dir, store, config) as keys:
        listed = keys.listed(revoked)
    rows = [("NAME", "ROLE", "COLLECTIONS", "ADDED", "LAST USED", *(("REVOKED",) if revoked else ()))]
    rows += [(k["name"], k["role"], ",".join(k["collections"]) or "*", _when(k["created"]), _when(k["last_used"]),
              *((_when(k["revoked"]),) if revoked else ())) for k in listed]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip(), file=sys.stdout)


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at)) if at else "-"


@keys_app.command("revoke")
def revoke(
    name: Name,
    cache_dir: CacheDir = None,
    store: StoreUrl = None,
    config: RunFile = None,
) -> None:
    """Revoke NAME's key: every replica refuses it within a second."""
    with opened_keys(cache_dir, store, config) as keys:
        try:
            keys.revoke(name, by="cli")
        except LookupError as exc:
            raise InputError(str(exc)) from None
    typer.echo(f"lcrag keys: {name}'s key is revoked", err=True)
