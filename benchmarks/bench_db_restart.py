"""A PostgreSQL restart under load (issue 43, item 4): two `lcrag serve --store` replicas over one PostgreSQL 15 with a
stand-in reader (tests/reader_servers.py), six client loops asking (RAG), listing and uploading through both, and
the database stopped (`pg_ctl stop -m fast`) and started again about a second later, mid-run. Counted: every call's status (target:
no 5xx but 503), and /readyz of each replica sampled every 100 ms against the database's own state (sampled every
50 ms by a direct connection): 503 while it is down, 200 how soon after it is back. The same run against the code
before psycopg_pool (a snapshot of src/ at --before, run from a temporary folder) is the baseline.

    flock /tmp/lcrag-bench.lock python benchmarks/bench_db_restart.py [--seconds 40] [--before COMMIT]
"""

from __future__ import annotations

import argparse
import io
import os
import shlex
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from bench_shared_store import stub_readers  # noqa: E402
from common import free_port, log, machine, md_table, postgres_programs, postgres_server, stop_group  # noqa: E402

ROOT = Path(__file__).parents[1]
NOTE = "\n".join(f"Line {n}: the harbour log notes calm weather and {n} boats in port." for n in range(60))
CLIENTS = 6
COLLECTIONS = 3


def source_of(commit: str, into: Path) -> Path:
    """src/ as it was at ``commit``, unpacked under ``into`` (nothing in the work tree or the repository changes)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "src"], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def replica(cache: Path, database: str, reader: str, source: Path | None) -> tuple[subprocess.Popen, str, Path]:
    """`lcrag serve --store` in a process group of its own, from ``source`` (None: this checkout); its URL."""
    port, log_file = free_port(), cache.with_suffix(".log")
    env = {**os.environ, "LCRAG_CACHE_DIR": str(cache)}
    if source is not None:
        env["PYTHONPATH"] = str(source)  # ahead of the checkout's editable install
    cache.mkdir(parents=True)
    with open(log_file, "w") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "lcrag.cli", "serve", "--port", str(port), "--store",
                                    database, "--llm", f"openai:stand-in@{reader}", "--max-waiting", "32"],
                                   env=env, stderr=stderr, stdout=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        try:
            httpx.get(f"{url}/healthz", timeout=1)
            return process, url, log_file
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"lcrag serve did not start: {log_file.read_text()[-500:]}")


def data_folder(database: str) -> Path:
    with psycopg.connect(database, autocommit=True) as db:
        return Path(db.execute("SHOW data_directory").fetchone()[0])


def restart(data: Path, down: float) -> tuple[float, float]:
    """Stop the server (``-m fast``: every session ended, as a restart does), leave it down ``down`` seconds, start
    it again with the options it ran with (postmaster.opts); when the stop began and the start ended (monotonic)."""
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    words = shlex.split((data / "postmaster.opts").read_text())[1:]
    at = words.index("-D")
    options = " ".join(shlex.quote(w) for w in words[:at] + words[at + 2:])
    pg_ctl = [*as_user, str(postgres_programs() / "pg_ctl"), "-D", str(data)]
    # Output to a log file, none to a pipe: the server started in the background would hold a pipe open.
    quiet = dict(check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    began = time.monotonic()
    subprocess.run([*pg_ctl, "-m", "fast", "-w", "stop"], **quiet)
    time.sleep(down)
    subprocess.run([*pg_ctl, "-o", options, "-l", str(data.parent / "log"), "-w", "-t", "60", "start"], **quiet)
    return began, time.monotonic()


class Samples:
    """Timestamped observations from several threads until :meth:`stop`."""

    def __init__(self):
        self.rows: list[tuple] = []
        self.lock, self.done = threading.Lock(), threading.Event()

    def add(self, *row) -> None:
        with self.lock:
            self.rows.append((time.monotonic(), *row))

    def stop(self) -> None:
        self.done.set()


def watch_database(database: str, samples: Samples) -> None:
    """The database's own state every 50 ms: whether a new connection answers ``SELECT 1``."""
    while not samples.done.is_set():
        try:
            with psycopg.connect(database, connect_timeout=1, autocommit=True) as db:
                db.execute("SELECT 1")
            samples.add("db", 200)
        except psycopg.Error:
            samples.add("db", 0)
        time.sleep(0.05)


def watch_ready(url: str, name: str, samples: Samples) -> None:
    """/readyz every 100 ms."""
    with httpx.Client(timeout=5) as http:
        while not samples.done.is_set():
            try:
                samples.add(f"readyz {name}", http.get(f"{url}/readyz").status_code)
            except httpx.HTTPError:
                samples.add(f"readyz {name}", -1)
            time.sleep(0.1)


def client(number: int, urls: list[str], samples: Samples) -> None:
    """One client loop: ask, list and upload, in turn, through both replicas."""
    turn = 0
    with httpx.Client(timeout=60) as http:
        while not samples.done.is_set():
            url = urls[(number + turn) % len(urls)]
            collection = f"c{(number + turn) % COLLECTIONS}"
            kind = ("ask", "list", "upload")[turn % 3]
            started = time.monotonic()
            try:
                if kind == "ask":
                    response = http.post(f"{url}/v1/ask", json={"collection": collection, "strategy": "rag",
                                                                "question": f"How many boats on line {turn % 60}?"})
                elif kind == "list":
                    response = http.get(f"{url}/v1/collections/{collection}")  # its files and status
                else:
                    response = http.post(f"{url}/v1/collections/{collection}/files", files={
                        "file": (f"n{number}-{turn}.txt", f"Client {number} note {turn}: {turn} gulls.\n".encode())})
                status, text = response.status_code, response.text[:300]
            except httpx.HTTPError as exc:
                status, text = -1, type(exc).__name__
            samples.add(kind, status, time.monotonic() - started, text, response.headers.get("retry-after")
                        if status > 0 else None)
            turn += 1


def prepare(urls: list[str]) -> None:
    for n in range(COLLECTIONS):
        httpx.post(f"{urls[0]}/v1/collections", json={"name": f"c{n}"}).raise_for_status()
        httpx.post(f"{urls[0]}/v1/collections/c{n}/files", files={"file": ("notes.txt", NOTE.encode())},
                   timeout=120).raise_for_status()
    for n in range(COLLECTIONS):
        deadline = time.monotonic() + 300
        while httpx.get(f"{urls[1]}/v1/collections/c{n}", timeout=60).json()["status"]["state"] == "indexing":
            assert time.monotonic() < deadline, "not indexed in 300 s"
            time.sleep(0.2)


def run(label: str, server: str, reader: str, tmp: Path, source: Path | None, seconds: float,
        down: float) -> dict:
    """Two replicas from ``source`` over a new database on ``server``, the loops for ``seconds`` with the database
    restarted at a third of them; what was seen."""
    database = server.rsplit("/", 1)[0] + f"/bench_{label}"
    with psycopg.connect(server, autocommit=True) as db:
        db.execute(f"CREATE DATABASE bench_{label}")
    started = [replica(tmp / f"{label}-{n}", database, reader, source) for n in "ab"]
    urls = [url for _, url, _ in started]
    samples = Samples()
    try:
        prepare(urls)
        threads = [threading.Thread(target=watch_database, args=(database, samples))]
        threads += [threading.Thread(target=watch_ready, args=(url, name, samples)) for url, name in zip(urls, "ab")]
        threads += [threading.Thread(target=client, args=(n, urls, samples), daemon=True) for n in range(CLIENTS)]
        for thread in threads:
            thread.start()
        time.sleep(seconds / 3)
        began, ended = restart(data_folder(database), down)
        time.sleep(seconds * 2 / 3)
        samples.stop()
        for thread in threads:
            thread.join(120)
    finally:
        samples.stop()  # (a failure too: the loops end)
        for process, _, _ in started:
            stop_group(process)
    logs = "".join(path.read_text(errors="replace") for _, _, path in started)
    return {"rows": samples.rows, "restart": (began, ended), "tracebacks": logs.count("Traceback"),
            "log_lines": len(logs.splitlines()), "pool_lines": logs.count("cannot be reached")}


def outage(rows: list[tuple], began: float, ended: float) -> tuple[float, float]:
    """When the database was first seen down after ``began`` and first seen up again after that (the restart
    command's own times if the 50 ms samples missed it)."""
    db = [(t, s) for t, kind, s, *_ in rows if kind == "db"]
    down = next((t for t, s in db if t >= began and s == 0), began)
    return down, next((t for t, s in db if t > down and s == 200), ended)


def summary(result: dict) -> dict:
    rows, (began, ended) = result["rows"], result["restart"]
    down, up = outage(rows, began, ended)
    calls = [r for r in rows if r[1] in ("ask", "list", "upload")]
    statuses = Counter(r[2] for r in calls)
    before = [r[3] for r in calls if r[0] + r[3] < began]
    worst = max((r[3] for r in calls if r[0] <= up and r[0] + r[3] >= down), default=0.0)
    readiness = {}
    for name in "ab":
        ready = [(t, s) for t, kind, s, *_ in rows if kind == f"readyz {name}"]
        during = [s for t, s in ready if down + 0.3 <= t <= up]  # (a probe sent just before it went down passes)
        after = next((t for t, s in ready if t > up and s == 200), None)
        false = [s for t, s in ready if (t < began - 0.5 or t > up + 10) and s != 200]
        readiness[name] = {"down": Counter(during), "back": None if after is None else after - up,
                           "not ready otherwise": len(false)}
    return {"calls": len(calls), "statuses": statuses, "tracebacks": result["tracebacks"], "other 5xx": sum(n for s, n in statuses.items()
                                                                      if s >= 500 and s != 503),
            "retry-after": all(r[5] for r in calls if r[2] == 503), "down": up - down,
            "p50": statistics.median(before) if before else 0.0, "worst": worst, "readiness": readiness,
            "kinds": {kind: Counter(r[2] for r in calls if r[1] == kind) for kind in ("ask", "list", "upload")},
            "examples": sorted({(r[2], r[4][:160]) for r in calls if r[2] >= 500 or r[2] < 0})[:6]}


def report(args, results: dict[str, dict]) -> str:
    header = ["run", "calls", "statuses", "5xx other than 503", "503 with Retry-After", "database down (s)",
              "p50 call before the restart (s)", "slowest call across it (s)", "tracebacks in the logs"]
    rows = []
    for label, s in results.items():
        statuses = ", ".join(f"{code}: {n}" for code, n in sorted(s["statuses"].items()))
        rows.append([label, s["calls"], statuses, s["other 5xx"], "yes" if s["retry-after"] else "no",
                     f"{s['down']:.2f}", f"{s['p50']:.3f}", f"{s['worst']:.2f}", s["tracebacks"]])
    ready_rows = []
    for label, s in results.items():
        for name, r in s["readiness"].items():
            back = "never" if r["back"] is None else f"{r['back']:.2f}"
            ready_rows.append([label, name, ", ".join(f"{c}: {n}" for c, n in sorted(r["down"].items())) or "-",
                               back, r["not ready otherwise"]])
    kinds = [[label, kind, ", ".join(f"{c}: {n}" for c, n in sorted(counts.items()))]
             for label, s in results.items() for kind, counts in s["kinds"].items()]
    after, before = results["after"], results.get("before")
    ratio = (f"5xx other than 503: {after['other 5xx']} after, {before['other 5xx']} before; p50 call before the "
             f"restart after/before: {after['p50'] / before['p50']:.2f}x" if before and before["p50"] else "")
    examples = "\n".join(f"- {label}: {code} {text!r}" for label, s in results.items() for code, text in s["examples"])
    return f"""# A database restart under load (issue 43, item 4)

`flock /tmp/lcrag-bench.lock python benchmarks/bench_db_restart.py --seconds {args.seconds:g} --down {args.down:g} --before {args.before}`

Machine: {machine()}; 2 cores shared with other work (load from other sessions ran meanwhile), no GPU. PostgreSQL 15
on loopback (initdb of the benchmark's own); two `lcrag serve --store` replicas; the stand-in reader of
tests/reader_servers.py (no model: the service around it is measured); {CLIENTS} client loops, each asking (RAG),
reading a collection (its files and status) and uploading a small file in turn through both replicas, over {COLLECTIONS}
collections, for {args.seconds:g} s; at a third of the run `pg_ctl stop -m fast` (every session ended), {args.down:g} s
stopped, `pg_ctl start`. "after" is this checkout (psycopg_pool, StoreDown → 503); "before" is src/ at {args.before} (the
home-made pool), run the same way in the same run: the baseline.

{md_table(header, rows)}

{ratio}

Per kind of call:

{md_table(["run", "call", "statuses"], kinds)}

/readyz of each replica, sampled every 100 ms, against the database's own state (a new connection's `SELECT 1`
every 50 ms): the statuses while it was down, how soon after it answered again /readyz said 200, and how many
samples were not 200 outside the outage (more than 0.5 s before the restart, or 10 s after):

{md_table(["run", "replica", "/readyz while the database was down", "200 again after (s)",
           "not ready otherwise"], ready_rows)}

(before: /readyz did not exist, 404.)

Examples of 5xx and failed calls:

{examples or "- none"}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--down", type=float, default=0.8, help="seconds the database stays stopped")
    parser.add_argument("--before", default="9a2e4f9", help="the commit whose src/ is the baseline ('' for none)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/scale_outage.md"))
    args = parser.parse_args()
    processes, (reader,) = stub_readers(1, 0.0)
    results = {}
    try:
        with tempfile.TemporaryDirectory(prefix="lcrag-restart-") as folder, postgres_server() as (server, _):
            tmp = Path(folder)
            runs = [("after", None)] + ([("before", source_of(args.before, tmp / "before"))] if args.before else [])
            for label, source in runs:
                log(f"{label}: two replicas, {CLIENTS} clients, {args.seconds:g} s, a restart at a third")
                results[label] = summary(run(label, server, reader, tmp, source, args.seconds, args.down))
                log({k: v for k, v in results[label].items() if k != "examples"})
    finally:
        for process in processes:
            process.kill()
    Path(args.out).write_text(report(args, results))
    log(f"written {args.out}")


if __name__ == "__main__":
    main()
