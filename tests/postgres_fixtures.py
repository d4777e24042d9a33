"""A real PostgreSQL server for the tests: ``initdb`` in a temporary folder, started on a free loopback port, stopped
after. ``tests/install-system-packages.sh`` installs the server where it is missing (Debian keeps its programs in
``/usr/lib/postgresql/N/bin``, off the PATH: they are looked for there too). PostgreSQL refuses to run as root, so
as root the server runs as the ``postgres`` user (which Debian's package creates), through ``runuser``."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from service_fixtures import free_port


def postgres_bin() -> Path:
    """The folder of PostgreSQL's server programs (``initdb``, ``pg_ctl``), the newest installed."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not versions:
        raise RuntimeError("PostgreSQL's server is not installed: run sh tests/install-system-packages.sh")
    return Path(versions[-1]).parent


def _as_server_user(folder: Path) -> list[str]:
    """The command prefix that runs a program as a user PostgreSQL accepts (as root: ``postgres``), with ``folder``
    made theirs."""
    if os.geteuid() != 0:
        return []
    user = pwd.getpwnam("postgres")
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, user.pw_uid, user.pw_gid)
    return ["runuser", "-u", "postgres", "--"]


@contextmanager
def postgres_server():
    """A running server on 127.0.0.1 (trust authentication, loopback only); yields its base URL
    ``postgresql://postgres@127.0.0.1:PORT``."""
    folder = Path(tempfile.mkdtemp(prefix="lcrag-pg-"))  # not under pytest's root-only folder: postgres reads it
    folder.chmod(0o755)
    data, sockets = folder / "data", folder / "sockets"
    sockets.mkdir()
    as_user = _as_server_user(folder)
    programs = postgres_bin()
    port = free_port()
    run = dict(check=True, capture_output=True, text=True, timeout=120)
    subprocess.run([*as_user, str(programs / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                    "--encoding=UTF8", "--locale=C.UTF-8"], **run)
    options = f"-h 127.0.0.1 -p {port} -k {sockets} -F -c max_connections=200 -c shared_buffers=64MB"
    subprocess.run([*as_user, str(programs / "pg_ctl"), "-D", str(data), "-l", str(folder / "log"), "-o", options,
                    "-w", "-t", "60", "start"], **run)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run([*as_user, str(programs / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


def new_database(server: str) -> str:
    """A new empty database on ``server``; its URL."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return f"{server}/{name}"


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """One PostgreSQL server for the test session (a test module imports this fixture to use it)."""
    with postgres_server() as url:
        yield url


@pytest.fixture
def database(postgres: str) -> str:
    """A new empty database on the session's server, for one test."""
    return new_database(postgres)
