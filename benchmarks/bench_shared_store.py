"""The PostgreSQL collection store (issue 36, items 3-4) against real `lcrag serve` processes on loopback and a real
PostgreSQL started here (initdb in a temporary folder: tests/postgres_fixtures.py); the reader is a stand-in
OpenAI-compatible server (the tests' stand-in, tests/reader_servers.py), so questions time the service, not a model.

1. Time from the last upload to ready for 100, 1,000 and 5,000 small files uploaded 20 at a time into an empty
   collection of a replica on PostgreSQL (its indexing a job it claims itself).
2. Warm ask overhead: the p50 of a question (rag, the stub answering at once) on PostgreSQL against the embedded store.
3. Two replicas against one on one database, behind a pool of two stand-in readers with a fixed latency: questions
   answered per second by 16 clients.

    python benchmarks/bench_shared_store.py --out benchmarks/results/scale.md
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from bench_scale import Server, ask_times, grow, ready_after, upload_many  # noqa: E402
from common import log, machine, md_table  # noqa: E402
from postgres_fixtures import new_database, postgres_server  # noqa: E402


def stub_readers(n: int, delay: float) -> tuple[list[subprocess.Popen], list[str]]:
    """``n`` stand-in readers, each in its own process, answering after ``delay`` seconds; their base URLs."""
    code = ("import sys, threading; sys.path.insert(0, sys.argv[1]); import reader_servers as r; "
            "reader = r.Stub(answer=r.closest_line); reader.delay = float(sys.argv[2]); print(reader.url, flush=True); "
            "threading.Event().wait()")
    processes = [subprocess.Popen([sys.executable, "-c", code, str(Path(__file__).parents[1] / "tests"), str(delay)],
                                  stdout=subprocess.PIPE, text=True) for _ in range(n)]
    return processes, [p.stdout.readline().strip() for p in processes]


def ready_times(server: str, tmp: Path, reader: str, sizes: list[int]) -> list[list]:
    rows = []
    replica = Server(tmp / "ready", reader, "--store", new_database(server))
    try:
        with httpx.Client(timeout=600) as client:
            for n in sizes:
                client.post(f"{replica.url}/v1/collections", json={"name": f"c{n}"}).raise_for_status()
                uploading, ready = grow(replica, client, f"c{n}", 0, n, n)
                rows.append([f"{n:,} files into an empty collection", f"{uploading:.1f}", f"{ready:.2f}"])
                log(rows[-1])
    finally:
        replica.close()
    return rows


def warm_ask(url: str, questions: int) -> float:
    with httpx.Client(timeout=600) as client:
        client.post(f"{url}/v1/collections", json={"name": "other"}).raise_for_status()
        upload_many(client, url, "other", 0, 20)
        ready_after(client, url, "other", 20)
        ask_times(client, url, 20)  # warm: the index built, the answers' paths taken once
        return statistics.median(ask_times(client, url, questions))


def ask_overhead(server: str, tmp: Path, reader: str, questions: int) -> list[list]:
    medians = {}
    for label, extra in (("embedded", ()), ("PostgreSQL", ("--store", new_database(server)))):
        replica = Server(tmp / f"warm-{label}", reader, *extra)
        try:
            medians[label] = warm_ask(replica.url, questions)
        finally:
            replica.close()
        log([label, medians[label]])
    return [[label, f"{p50 * 1000:.2f}"] for label, p50 in medians.items()] + [
        ["PostgreSQL - embedded", f"{(medians['PostgreSQL'] - medians['embedded']) * 1000:+.2f}"]]


def throughput(urls: list[str], clients: int, seconds: float, run: str) -> float:
    """Questions answered per second by ``clients`` asking in turn over ``urls`` for ``seconds`` (each question
    asked once, ``run`` in its text: neither the completion cache nor the store's answer cache answers it, in this run
    or a later one on the same database)."""
    answered, stop = [], threading.Event()

    def client(number: int) -> None:
        with httpx.Client(timeout=600) as http:
            count = 0
            while not stop.is_set():
                url = urls[(number + count) % len(urls)]
                question = f"What is the code of unit {count * clients + number} ({run})?"  # never cached
                http.post(f"{url}/v1/ask", json={"collection": "other", "question": question,
                                                 "strategy": "rag"}).raise_for_status()
                count += 1
            answered.append(count)

    with ThreadPoolExecutor(clients) as pool:
        started = time.perf_counter()
        futures = [pool.submit(client, n) for n in range(clients)]
        time.sleep(seconds)
        stop.set()
        for future in futures:
            future.result()
    return sum(answered) / (time.perf_counter() - started)


def replicas_vs_one(server: str, tmp: Path, delay: float, clients: int, seconds: float) -> list[list]:
    processes, readers = stub_readers(2, delay)
    database = new_database(server)
    pool = ["--llm", "openai:stub", *[arg for url in readers for arg in ("--base-url", url)]]
    replicas = [Server(tmp / f"replica-{n}", readers[0], "--store", database, *pool) for n in range(2)]
    try:
        warm_ask(replicas[0].url, 5)
        rows = []
        for count in (1, 2):
            rate = throughput([r.url for r in replicas[:count]], clients, seconds, f"{count} replicas")
            rows.append([f"{count} replica{'s' if count > 1 else ''}", f"{rate:.2f}"])
            log(rows[-1])
        rows.append(["ratio", f"{float(rows[1][1]) / float(rows[0][1]):.2f}x"])
        return rows
    finally:
        for replica in replicas:
            replica.close()
        for process in processes:
            process.kill()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.5, help="the stand-in readers' fixed latency (s)")
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    processes, readers = stub_readers(1, 0.0)
    with tempfile.TemporaryDirectory() as tmp, postgres_server() as server:
        ready = ready_times(server, Path(tmp), readers[0], [int(x) for x in args.sizes.split(",")])
        overhead = ask_overhead(server, Path(tmp), readers[0], args.questions)
        scaling = replicas_vs_one(server, Path(tmp), args.delay, 16, args.seconds)
    for process in processes:
        process.kill()
    text = "\n".join([
        "## PostgreSQL store: replicas on one database (issue 36, items 3-4)", "",
        f"Machine: {machine()}. Command: `python benchmarks/bench_shared_store.py {' '.join(sys.argv[1:])}`.",
        "Real `lcrag serve --store postgresql://…` processes on loopback, a real PostgreSQL started by the script "
        "(initdb in a temporary folder, fsync off), the stand-in reader of tests/reader_servers.py; small text "
        "files (~450 bytes) uploaded 20 at a time over HTTP, indexed by the replica's own job thread.", "",
        md_table(["upload (PostgreSQL)", "uploading (s)", "last upload -> ready (s)"], ready), "",
        md_table([f"warm question, p50 over {args.questions} (rag, the reader answering at once)", "ms"], overhead), "",
        f"Two replicas against one, 16 clients asking for {args.seconds:g} s, behind a pool of two stand-in readers "
        f"that answer after {args.delay:g} s (`--base-url A --base-url B`):", "",
        md_table(["replicas on one database", "questions answered per second"], scaling), ""])
    print(text)
    if args.out:
        previous = args.out.read_text() if args.out.exists() else "# Scale\n\n"
        args.out.write_text(previous.rstrip() + "\n\n" + text)


if __name__ == "__main__":
    main()
