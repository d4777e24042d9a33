"""Outages say so (issue 43, item 4), on a real PostgreSQL under a real `lcrag serve --store` with the stand-in reader
of tests/reader_servers.py: the database stopped, every API call is answered 503 with Retry-After (no 500, no
traceback in the server's stderr) while /healthz (liveness) says 200 and /readyz (readiness) 503; the database
started again, /readyz says 200 within seconds and the calls succeed. And kill -9 of a replica that started its
helper processes (the fork server, the resource tracker, the chunking process, parsing processes) leaves none of
them alive."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
from postgres_fixtures import database, new_database, postgres, postgres_bin, postgres_server  # noqa: F401
from reader_servers import Stub, closest_line
from service_fixtures import free_port, wait_ready

NOTE = "\n".join(f"Line {n}: the harbour log notes calm weather and {n} boats in port." for n in range(40))
QUESTION = "How many boats were in port on line 7?"


class Postgres:
    """Stop and start a running PostgreSQL server (its data folder and options read while it runs), as root through
    the postgres user like tests/postgres_fixtures.py."""

    def __init__(self, server: str):
        with psycopg.connect(f"{server}/postgres", autocommit=True) as db:
            self.data = Path(db.execute("SHOW data_directory").fetchone()[0])
        words = shlex.split((self.data / "postmaster.opts").read_text())[1:]
        at = words.index("-D")
        self.options = " ".join(shlex.quote(w) for w in words[:at] + words[at + 2:])
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def pg_ctl(self, *args: str) -> None:
        subprocess.run([*self.as_user, str(postgres_bin() / "pg_ctl"), "-D", str(self.data), *args], check=True,
                       capture_output=True, timeout=120)

    def stop(self) -> None:
        self.pg_ctl("-m", "fast", "-w", "stop")  # every session ended, as a restart does

    def start(self) -> None:
        self.pg_ctl("-o", self.options, "-l", str(self.data.parent / "log-restarted"), "-w", "-t", "60", "start")


@contextmanager
def serving(tmp_path: Path, database: str, reader: str, *args: str):
    """`lcrag serve --store DATABASE` with the stand-in reader, its stderr in a file (an outage logs a line a
    second: a pipe could fill); yields its URL, process and stderr file."""
    port = free_port()
    url, log = f"http://127.0.0.1:{port}", tmp_path / "stderr.log"
    env = {**os.environ, "LCRAG_CACHE_DIR": str(tmp_path / "cache")}
    with open(log, "w") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "lcrag.cli", "serve", "--port", str(port), "--cache-dir",
                                    str(tmp_path / "cache"), "--store", database, "--llm",
                                    f"openai:stand-in@{reader}", *args], env=env, stderr=stderr)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, log.read_text()
            try:
                httpx.get(f"{url}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "lcrag serve did not start"
                time.sleep(0.1)
        yield url, process, log
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(30)


def calls(url: str) -> dict[str, httpx.Response]:
    """One of each kind of API call: the listing, a collection's status, a file, a question, an upload."""
    with httpx.Client(base_url=url, timeout=60) as http:
        return {"list": http.get("/v1/collections"),
                "status": http.get("/v1/collections/notes"),
                "file": http.get("/v1/collections/notes/files/notes.txt"),
                "ask": http.post("/v1/ask", json={"collection": "notes", "question": QUESTION, "strategy": "rag"}),
                "upload": http.post("/v1/collections/notes/files", files={"file": ("more.txt", b"More notes.\n")})}


def test_a_stopped_database_is_503_with_retry_after_healthz_stays_200_and_readyz_follows_it(tmp_path):
    reader = Stub(answer=closest_line)
    with postgres_server() as server, serving(tmp_path, new_database(server), reader.url, "--retrievers",
                                              "bm25") as (url, process, log):
        postgres = Postgres(server)
        httpx.post(f"{url}/v1/collections", json={"name": "notes"}).raise_for_status()
        httpx.post(f"{url}/v1/collections/notes/files", files={"file": ("notes.txt", NOTE.encode())},
                   timeout=60).raise_for_status()
        assert wait_ready(url, "notes")["state"] == "ready"
        ready = httpx.get(f"{url}/readyz")
        assert ready.status_code == 200 and ready.json()["store"]["status"] == "ok", ready.text
        assert ready.json()["reader"]["status"] == "ok"
        postgres.stop()
        down = calls(url)
        for name, response in down.items():
            assert response.status_code == 503, (name, response.text)
            assert response.headers["retry-after"].isdigit(), name
            assert "cannot be reached" in response.json()["error"]["message"]
            assert "127.0.0.1" not in response.text  # the database's address is the operator's
        assert httpx.get(f"{url}/healthz").status_code == 200  # alive: not restarted for the database's outage
        not_ready = httpx.get(f"{url}/readyz")
        assert not_ready.status_code == 503 and not_ready.json()["store"]["status"] == "down", not_ready.text
        postgres.start()
        started, deadline = time.monotonic(), time.monotonic() + 10
        while httpx.get(f"{url}/readyz").status_code != 200:
            assert time.monotonic() < deadline, "/readyz still 503 10 s after the database started"
            time.sleep(0.1)
        print(f"readyz 200 {time.monotonic() - started:.1f} s after the database started")
        back = calls(url)
        assert {name: r.status_code for name, r in back.items()} == {
            "list": 200, "status": 200, "file": 200, "ask": 200, "upload": 201}, {n: r.text for n, r in back.items()}
        assert "line 7" in back["ask"].json()["text"].lower() or back["ask"].json()["sources"]
        process.terminate()
        process.wait(30)
        stderr = log.read_text()
    assert "Traceback" not in stderr and " 500" not in stderr, stderr[-3000:]
    assert "cannot be reached" in stderr  # said, in one line a failure


def descendants(pid: int) -> set[int]:
    """The processes descended from ``pid`` (children, theirs, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, pending = set(), [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.add(child)
            pending.append(child)
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie waiting for its reaper has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def niceness(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[16])
    except (OSError, IndexError, ValueError):
        return None


def command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120]
    except OSError:
        return b"(ended)"


def test_kill_9_of_a_replica_leaves_no_process_behind(database, tmp_path):
    reader = Stub(answer=closest_line)
    big = ("The tide tables for the season follow. " * 30 + "\n") * 1000  # > 1 MB: chunked in a process of its own
    with serving(tmp_path, database, reader.url, "--retrievers", "bm25") as (url, process, _):
        httpx.post(f"{url}/v1/collections", json={"name": "notes"}).raise_for_status()
        for name, content in (("notes.md", f"# Notes\n\n{NOTE}\n"), ("tides.txt", big)):  # each parsed in a process
            httpx.post(f"{url}/v1/collections/notes/files", files={"file": (name, content.encode())},
                       timeout=120).raise_for_status()
        deadline, helpers = time.monotonic() + 300, descendants(process.pid)
        while not any(niceness(pid) == 10 for pid in helpers):  # the chunking process (nice 10)
            assert time.monotonic() < deadline, "no chunking process in 300 s"
            time.sleep(0.1)
            helpers = descendants(process.pid)  # (the list the chunking process was seen in: it may end soon after)
        commands = {pid: command_line(pid) for pid in helpers}
        assert len(helpers) >= 3, commands  # the fork server, the resource tracker, the chunking process
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        deadline = time.monotonic() + 5
        while [pid for pid in helpers if alive(pid)] and time.monotonic() < deadline:
            time.sleep(0.1)
        left = {pid: commands[pid] for pid in helpers if alive(pid)}
    assert left == {}, left
