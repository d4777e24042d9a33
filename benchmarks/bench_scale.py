"""Collections that grow file by file (issue 36, embedded store), against a real `lcrag serve` process on loopback
(its reader: a deterministic OpenAI-compatible stub in this process, so questions time the server, not a model):

1. Time from the last upload to ready for 100, 1,000 and 5,000 small files uploaded 20 at a time into an empty
   collection, and for 100 more files into the collection of 5,000 (linear in the files added, not the collection).
2. The 1,200-upload case (20 at a time, small files): ready after the last upload, and the server's thread count at
   its peak (sampled from /proc every 20 ms).
3. A question about an unrelated collection while a 50 MB text is uploaded and indexed: its p50 against idle.

    python benchmarks/bench_scale.py --out benchmarks/results/scale.md
"""

from __future__ import annotations

import argparse
import os
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
from common import free_port, log, machine, md_table  # noqa: E402
from reader_servers import Stub, closest_line  # noqa: E402  (the tests' stand-in reader)

WORDS = "crane pump valve motor sensor relay switch fuse cable panel gauge filter belt gear drive".split()


def small_file(i: int) -> bytes:
    words = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(60))
    return f"Document {i}: the code of unit {i} is {1000 + i}. {words}\n".encode()


class Server:
    """`lcrag serve` in its own process, with its peak thread count sampled."""

    def __init__(self, cache: Path, reader_url: str, *extra: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "LCRAG_CACHE_DIR": str(cache)}
        self.log = cache.with_name(f"{cache.name}-serve.log")  # beside the cache: a crash's last words are kept
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lcrag.cli", "serve", "--port", str(self.port), "--llm", f"openai:stub@{reader_url}",
             "--context-window", "4096", "--max-upload-mb", "64", "--max-waiting", "64",
             "--max-document-chars", "100000000", *extra],
            env=env, stdout=subprocess.DEVNULL, stderr=self.log.open("wb"))
        self.peak_threads, self._stop = 0, threading.Event()
        for _ in range(600):
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                text = Path(f"/proc/{self.process.pid}/status").read_text()
                threads = int(next(line.split()[1] for line in text.splitlines() if line.startswith("Threads:")))
                self.peak_threads = max(self.peak_threads, threads)
            except (OSError, StopIteration):
                pass
            time.sleep(0.02)

    def log_tail(self, lines: int = 30) -> str:
        """The server's last log lines (what to look at when a request of the benchmark failed)."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        self._stop.set()
        self.process.terminate()
        self.process.wait(30)


def upload_many(client: httpx.Client, url: str, collection: str, start: int, n: int, at_once: int = 20) -> float:
    """Upload files start..start+n-1, ``at_once`` at a time; the time the last upload was answered."""
    def one(i: int) -> None:
        reply = client.post(f"{url}/v1/collections/{collection}/files", files={"file": (f"f{i:05d}.txt", small_file(i))})
        reply.raise_for_status()

    with ThreadPoolExecutor(at_once) as pool:
        list(pool.map(one, range(start, start + n)))
    return time.perf_counter()


def ready_after(client: httpx.Client, url: str, collection: str, files: int) -> float:
    while True:
        status = client.get(f"{url}/v1/collections/{collection}").json()["status"]
        if status["state"] == "ready" and status["files"] == files:
            return time.perf_counter()
        if status["state"] == "error":
            raise RuntimeError(status)
        time.sleep(0.05)


def grow(server: Server, client: httpx.Client, collection: str, start: int, n: int, total: int) -> tuple[float, float]:
    began = time.perf_counter()
    last = upload_many(client, server.url, collection, start, n)
    ready = ready_after(client, server.url, collection, total)
    return last - began, ready - last


def ask_times(client: httpx.Client, url: str, n: int, stop: threading.Event | None = None) -> list[float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        reply = client.post(f"{url}/v1/ask", json={"collection": "other", "question": "What is the code of unit 7?",
                                                   "strategy": "rag"})
        reply.raise_for_status()
        times.append(time.perf_counter() - t)
        if stop is not None and stop.is_set():
            break
    return times


def question_during_upload(server: Server, client: httpx.Client, mb: int) -> tuple[float, float, int, float]:
    client.post(f"{server.url}/v1/collections", json={"name": "other"}).raise_for_status()
    upload_many(client, server.url, "other", 0, 20)
    ready_after(client, server.url, "other", 20)
    ask_times(client, server.url, 5)  # warm
    idle = ask_times(client, server.url, 30)  # before the upload
    client.post(f"{server.url}/v1/collections", json={"name": "big"}).raise_for_status()
    big = b"".join(small_file(i) for i in range(mb * 1024 * 1024 // len(small_file(0)) + 1))[: mb << 20]
    done = threading.Event()

    def upload() -> None:
        try:
            with httpx.Client(timeout=600) as own:
                own.post(f"{server.url}/v1/collections/big/files", files={"file": ("big.txt", big)}).raise_for_status()
                ready_after(own, server.url, "big", 1)
        finally:
            done.set()

    began = time.perf_counter()
    thread = threading.Thread(target=upload)
    thread.start()
    during = []
    while not done.is_set():
        during += ask_times(client, server.url, 1)
    thread.join()
    seconds = time.perf_counter() - began
    idle += ask_times(client, server.url, 30)  # idle again after: the machine's other jobs come and go
    return statistics.median(idle), statistics.median(during), len(during), seconds


def growth(tmp: Path, client: httpx.Client, reader_url: str, sizes: list[int]) -> list[list]:
    """Ready after the last upload, for each size into an empty collection, then 100 more into the largest."""
    rows = []
    server = Server(tmp / "scale", reader_url)
    try:
        for n in sizes:
            client.post(f"{server.url}/v1/collections", json={"name": f"c{n}"}).raise_for_status()
            uploading, ready = grow(server, client, f"c{n}", 0, n, n)
            rows.append([f"{n:,} files into an empty collection", f"{uploading:.1f}", f"{ready:.2f}"])
            log(rows[-1])
        largest = max(sizes)
        uploading, ready = grow(server, client, f"c{largest}", largest, 100, largest + 100)
        rows.append([f"100 files into the collection of {largest:,}", f"{uploading:.1f}", f"{ready:.2f}"])
        log(rows[-1])
    finally:
        server.close()
    return rows


def many_uploads(tmp: Path, client: httpx.Client, reader_url: str, many: int) -> list[list]:
    server = Server(tmp / "many", reader_url)
    try:
        client.post(f"{server.url}/v1/collections", json={"name": "many"}).raise_for_status()
        uploading, ready = grow(server, client, "many", 0, many, many)
        rows = [[f"{many:,} uploads, 20 at a time", f"{uploading:.1f}", f"{ready:.2f}", server.peak_threads]]
        log(rows)
        return rows
    finally:
        server.close()


def during_upload(tmp: Path, client: httpx.Client, reader_url: str, mb: int) -> list[list]:
    server = Server(tmp / "upload", reader_url)
    try:
        idle, during, count, seconds = question_during_upload(server, client, mb)
    finally:
        server.close()
    rows = [["idle", f"{idle * 1000:.1f}"],
            [f"during a {mb} MB upload and its indexing ({count} questions, {seconds:.1f} s)", f"{during * 1000:.1f}"],
            ["ratio", f"{during / idle:.2f}x"]]
    log(rows)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--upload-mb", type=int, default=50)
    parser.add_argument("--many", type=int, default=1200)
    parser.add_argument("--only-upload", action="store_true", help="only the question during a large upload")
    args = parser.parse_args()
    stub = Stub(answer=closest_line)
    reader_url = stub.url
    tables = []
    with tempfile.TemporaryDirectory() as tmp, httpx.Client(timeout=600) as client:
        if not args.only_upload:
            sizes = [int(x) for x in args.sizes.split(",")]
            tables.append(md_table(["upload", "uploading (s)", "last upload -> ready (s)"],
                                   growth(Path(tmp), client, reader_url, sizes)))
            tables.append(md_table(["case", "uploading (s)", "last upload -> ready (s)", "server threads at peak"],
                                   many_uploads(Path(tmp), client, reader_url, args.many)))
        tables.append(md_table(["question on an unrelated collection", "p50 (ms)"],
                               during_upload(Path(tmp), client, reader_url, args.upload_mb)))
    stub.kill()
    text = "\n".join(["## Embedded store: collections that grow file by file (issue 36)", "",
                      f"Machine: {machine()}; load average {os.getloadavg()[0]:.1f} at the end (other jobs share it). "
                      "Command: `python benchmarks/bench_scale.py --out benchmarks/results/scale.md`.",
                      "A real `lcrag serve` process on loopback (default run: bm25, words chunking); its reader a "
                      "deterministic OpenAI-compatible stub; small text files (~450 bytes) uploaded 20 at a time.",
                      "", "\n\n".join(tables), ""])
    print(text)
    if args.out:
        previous = args.out.read_text() if args.out.exists() else "# Scale\n\n"
        args.out.write_text(previous.rstrip() + "\n\n" + text)


if __name__ == "__main__":
    main()
