"""Deleting deletes (issue 43): a file with a planted text, uploaded to a collection on two real `lcrag serve --store`
replicas over a real PostgreSQL, read and answered (the stand-in reader of tests/reader_servers.py quotes the line
that answers), then removed: a dump of the whole database (bytea decoded, zlib-compressed values decompressed) and
every file of both replicas' cache folders (SQLite databases row by row, compressed files decompressed) hold the
planted text and the file's name nowhere (the audit log and the collection's change log excepted: they name it by
design). The same through the embedded store. A replica killed mid-upload and away while the file was removed removes
its local copies and the partial upload when it starts again; finished jobs are pruned after --job-retention."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import threading
import time
import zlib
from contextlib import ExitStack
from pathlib import Path

import httpx
import psycopg
import pytest
from postgres_fixtures import database, postgres, postgres_bin  # noqa: F401 - fixtures
from reader_servers import Stub, closest_line
from service_fixtures import free_port, lcrag_process, wait_ready

from lcrag.store.postgres import PostgresCollections

PLANTED = "ZQ01199X"
FILE = "zq-ledger-77.txt"  # a name that would identify the file
FILLER = "\n".join(f"Line {n} of the harbour log notes calm weather and {n} boats in port." for n in range(60))
SECRET = f"{FILLER}\nThe secret codeword of the vault is {PLANTED}\n{FILLER}\n"
QUESTION = "What is the secret codeword of the vault?"
OTHER = FILLER + "\nThe harbour master is Ines.\n"
# Tables that name a removed file by design: who removed what (lcrag_audit, in PostgreSQL or collections.sqlite),
# and which files each version changed (lcrag_file_changes, the last 1,024 changes of a collection, read by replicas
# catching up).
NAMING_TABLES = ("lcrag_audit", "lcrag_file_changes")


def replica(stack: ExitStack, folder: Path, reader: str, *args: str) -> tuple[str, subprocess.Popen]:
    """`lcrag serve` with its own cache folder, answering with the stand-in reader at ``reader``."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = stack.enter_context(lcrag_process("serve", "--port", str(port), "--cache-dir", str(folder), "--llm",
                                                f"openai:stand-in@{reader}", *args, url=url, cache_dir=folder))
    return url, process


def _decoded(data: bytes) -> list[bytes]:
    """``data`` and, when it is zlib- or gzip-compressed, what it holds."""
    found = [data]
    for wbits in (zlib.MAX_WBITS, 16 + zlib.MAX_WBITS):
        try:
            found.append(zlib.decompress(data, wbits))
        except zlib.error:
            continue
    return found


def _sqlite_values(path: Path, leave_out: tuple[str, ...] = ()) -> list[bytes]:
    """Every value of every table of a SQLite database but ``leave_out``, as bytes."""
    values = []
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            if table in leave_out:
                continue
            for row in db.execute(f'SELECT * FROM "{table}"'):
                values += [v if isinstance(v, bytes) else str(v).encode() for v in row if v is not None]
    return values


def holders(folder: Path, *needles: str) -> list[str]:
    """The files under ``folder`` (or their names) that hold a needle: in their bytes (a SQLite file's free pages and
    write-ahead log too), decompressed, or in a SQLite row's value, decompressed. The file's name is looked for in a
    SQLite database's rows only, leaving out the tables that name files by design (:data:`NAMING_TABLES`)."""
    found = []
    for path in folder.rglob("*"):
        if any(n in str(path.relative_to(folder)) for n in needles):
            found.append(f"name: {path}")
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        database = data.startswith(b"SQLite format 3") or path.name.endswith(("-wal", "-journal"))
        pieces = _decoded(data)
        if any(n.encode() in piece for n in needles for piece in pieces if not (database and n == FILE)):
            found.append(str(path))
        elif data.startswith(b"SQLite format 3"):
            rows = [d for value in _sqlite_values(path, NAMING_TABLES) for d in _decoded(value)]
            if any(n.encode() in piece for n in needles for piece in rows):
                found.append(f"rows: {path}")
    return found


def dump_holders(database: str, *needles: str) -> list[tuple[str, str]]:
    """(table, needle) for each line of a text dump of the whole database holding a needle, and for each bytea value
    holding one once decompressed (a parse is zlib-compressed)."""
    dump = subprocess.run([str(postgres_bin() / "pg_dump"), "--data-only", "--inserts", database],
                          capture_output=True, check=True, timeout=120).stdout
    found = [(line.split()[2].removeprefix(b"public.").decode(), n) for line in dump.splitlines() for n in needles
             if n.encode() in line]
    with psycopg.connect(database, autocommit=True) as db:
        columns = db.execute("SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = "
                             "'public' AND data_type = 'bytea'").fetchall()
        for table, column in columns:
            for (value,) in db.cursor(binary=True).execute(f"SELECT {column} FROM {table} WHERE {column} IS NOT NULL"):
                found += [(table, n) for n in needles for piece in _decoded(bytes(value)) if n.encode() in piece]
    return found


def _named_by_design(found: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(table, needle) for table, needle in found if not (needle == FILE and table in NAMING_TABLES)]


# Retrievers whose indexes hold text of their own (summaries the reader wrote), asked besides the default: RAPTOR's
# trees are a file's each, removed with its content. (A tree index is the whole collection's, in a folder that does
# not say whose it is: see the expected failure below; offered, it is made by indexing, asked or not.)
SUMMARIZING = ("raptor",)
OFFERED = [arg for retriever in ("bm25", *SUMMARIZING) for arg in ("--retrievers", retriever)]


def _ask(url: str, retriever: str | None = None) -> httpx.Response:
    """The question, asked again while its index is being made (409 or 503 with Retry-After)."""
    options = {"retriever": retriever} if retriever else {}
    deadline = time.monotonic() + 300
    while True:
        answer = httpx.post(f"{url}/v1/ask", json={"collection": "vault", "question": QUESTION, "strategy": "rag",
                                                    **options}, timeout=300)
        if answer.status_code not in (409, 503) or time.monotonic() > deadline:
            return answer
        time.sleep(1)


def _upload(url: str, name: str, text: str) -> None:
    httpx.post(f"{url}/v1/collections/vault/files", files={"file": (name, text.encode())},
               timeout=60).raise_for_status()


def _read_and_answered(*urls: str) -> None:
    """Each replica reads the collection and answers the planted line (the stand-in quotes it), by each retriever."""
    for url in urls:
        assert wait_ready(url, "vault", timeout=300)["state"] == "ready"
        for retriever in (None, *SUMMARIZING):
            answer = _ask(url, retriever)
            assert answer.status_code == 200 and PLANTED in answer.json()["text"], answer.text


def _removed_and_answered(remover: str, *urls: str) -> None:
    assert httpx.delete(f"{remover}/v1/collections/vault/files/{FILE}").status_code == 200
    for url in urls:
        assert wait_ready(url, "vault", timeout=300)["state"] == "ready"
        answer = _ask(url)
        assert answer.status_code == 200 and PLANTED not in answer.text, answer.text


def _found_in(folders: list[Path], seconds: float = 10) -> list[str]:
    """What still holds the planted text or the file's name in ``folders``, once each replica has had ``seconds``
    to hear of the removal."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(holders(f, PLANTED, FILE) for f in folders):
        time.sleep(0.2)
    return [found for folder in folders for found in holders(folder, PLANTED, FILE)]


def test_a_removed_files_planted_text_is_found_nowhere_in_the_database_or_either_replicas_folder(database,
                                                                                               tmp_path):
    reader = Stub(answer=closest_line)
    folders = [tmp_path / "a", tmp_path / "b"]
    with ExitStack() as stack:
        (a, _), (b, _) = (replica(stack, folder, reader.url, "--store", database, *OFFERED) for folder in folders)
        httpx.post(f"{a}/v1/collections", json={"name": "vault"}).raise_for_status()
        _upload(a, FILE, SECRET)
        _upload(b, "other.txt", OTHER)
        _read_and_answered(a, b)
        assert PLANTED in "".join(reader.chats)
        assert all(holders(folder, PLANTED) for folder in folders)  # the search finds what is there
        assert {table for table, _ in dump_holders(database, PLANTED)} >= {"lcrag_blob_parts", "lcrag_parses"}
        _removed_and_answered(b, a, b)
        assert _found_in(folders) == []
        assert _named_by_design(dump_holders(database, PLANTED, FILE)) == []
        assert holders(folders[0], "Ines")  # what another file holds stays


def test_a_removed_files_planted_text_is_found_nowhere_in_the_embedded_stores_folder(tmp_path):
    reader = Stub(answer=closest_line)
    with ExitStack() as stack:
        url, _ = replica(stack, tmp_path / "alone", reader.url, *OFFERED)
        httpx.post(f"{url}/v1/collections", json={"name": "vault"}).raise_for_status()
        _upload(url, FILE, SECRET)
        _upload(url, "other.txt", OTHER)
        _read_and_answered(url)
        found = holders(tmp_path / "alone", PLANTED)
        assert {Path(p).name for p in found} >= {FILE, "completions.sqlite", "nodes.jsonl"}
        assert any("/raptor/" in p for p in found)
        _removed_and_answered(url, url)
        assert _found_in([tmp_path / "alone"], seconds=0) == []
        assert holders(tmp_path / "alone", "Ines")


def _slow_upload(url: str, stop: threading.Event) -> None:
    """An upload that sends a little at a time until ``stop`` (or its server dies)."""
    boundary = "lcrag-slow-upload"
    head = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="slow.txt"\r\n'
            "Content-Type: text/plain\r\n\r\n").encode()

    def body():
        yield head
        while not stop.is_set():
            yield b"a slow line of text\n" * 4096
            time.sleep(0.05)

    try:
        httpx.post(f"{url}/v1/collections/vault/files", content=body(), timeout=60,
                   headers={"Content-Type": f"multipart/form-data; boundary={boundary}",
                            "Content-Length": str(200 << 20)})
    except httpx.HTTPError:
        pass  # its server was killed


def test_a_replica_killed_mid_upload_and_away_while_a_file_was_removed_removes_both_when_it_starts(database,
                                                                                                 tmp_path):
    reader = Stub(answer=closest_line)
    folder = tmp_path / "a"
    blobs = folder / "collections-shared" / ".blobs"
    stop = threading.Event()
    with ExitStack() as stack:
        a, process = replica(stack, folder, reader.url, "--store", database, *OFFERED)
        httpx.post(f"{a}/v1/collections", json={"name": "vault"}).raise_for_status()
        _upload(a, FILE, SECRET)
        _upload(a, "other.txt", OTHER)
        _read_and_answered(a)
        uploading = threading.Thread(target=_slow_upload, args=(a, stop), daemon=True)
        uploading.start()
        deadline = time.monotonic() + 60
        while not list(blobs.glob(".upload-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        partial = list(blobs.glob(".upload-*"))
        assert partial, "the upload never reached the server's disk"
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
        stop.set()
    assert [p.name for p in blobs.glob(".upload-*")] == [p.name for p in partial]  # left by the kill
    other = PostgresCollections(database, tmp_path / "other")  # the file removed while the replica is away
    other.remove_file("vault", FILE)
    other.reindex("vault")  # (a store made without indexing queues no job by itself)
    other.close()
    assert holders(folder, PLANTED, FILE)
    with ExitStack() as stack:
        a, _ = replica(stack, folder, reader.url, "--store", database, *OFFERED)
        assert list(blobs.glob(".upload-*")) == []
        assert holders(folder, PLANTED, FILE) == []
        assert wait_ready(a, "vault", timeout=300)["state"] == "ready"
        answer = _ask(a)
        assert answer.status_code == 200 and PLANTED not in answer.text
        assert [f["name"] for f in httpx.get(f"{a}/v1/collections/vault").json()["files"]] == ["other.txt"]


def test_finished_jobs_are_pruned_after_the_job_retention(database, tmp_path):
    reader = Stub(answer=closest_line)
    with ExitStack() as stack:
        a, _ = replica(stack, tmp_path / "a", reader.url, "--store", database, "--job-retention", "1")
        httpx.post(f"{a}/v1/collections", json={"name": "vault"}).raise_for_status()
        _upload(a, "other.txt", OTHER)
        assert wait_ready(a, "vault", timeout=300)["state"] == "ready"
        with psycopg.connect(database, autocommit=True) as db:
            deadline = time.monotonic() + 30
            while db.execute("SELECT count(*) FROM lcrag_jobs").fetchone()[0] and time.monotonic() < deadline:
                time.sleep(0.2)
            assert db.execute("SELECT count(*) FROM lcrag_jobs").fetchone()[0] == 0
        assert _ask(a).status_code == 200  # the collection is as it was


def test_a_removed_files_text_is_gone_from_the_collections_tree_index(tmp_path):
    reader = Stub(answer=closest_line)
    with ExitStack() as stack:
        url, _ = replica(stack, tmp_path / "alone", reader.url, *OFFERED, "--retrievers", "tree")
        httpx.post(f"{url}/v1/collections", json={"name": "vault"}).raise_for_status()
        _upload(url, FILE, SECRET)
        _upload(url, "other.txt", OTHER)
        assert wait_ready(url, "vault", timeout=300)["state"] == "ready"
        assert PLANTED in _ask(url, "tree").json()["text"]
        _removed_and_answered(url, url)
        assert _found_in([tmp_path / "alone"], seconds=0) == []
