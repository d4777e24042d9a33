"""Upload -> ready as a collection grows (issue 43, item 2): the time from the POST of one new small file until
GET /v1/collections/NAME says ready with it, over ``--uploads`` uploads each into a collection of 100, 1,200 and
5,000 files, through a real `lcrag serve` on loopback on the embedded store and on ``--store postgresql://`` (a real
PostgreSQL started here, as tests/postgres_fixtures.py does), the server's default retriever (BM25). The reader is
the tests' stand-in (no question is asked). The server offers BM25 alone unless told (``--serve-args ''``: every
retriever, whose indexes the indexing job then makes too). The collection is seeded over HTTP, 16 uploads at a
time; the measured uploads are one at a time, each waited for.

    flock /tmp/lcrag-bench.lock python benchmarks/bench_upload_scale.py --label after \
        --out benchmarks/results/scale_upload.md
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from bench_scale import Server, ready_after, small_file, upload_many  # noqa: E402
from bench_shared_store import stub_readers  # noqa: E402
from common import log, machine, md_table  # noqa: E402
from postgres_fixtures import new_database, postgres_server  # noqa: E402

POLL_SECONDS = 0.005  # between two GETs of the collection while an upload is indexed


def upload_then_ready(client: httpx.Client, url: str, collection: str, number: int, files: int) -> float:
    """Seconds from the POST of file ``number`` until the collection (then of ``files`` files) says ready."""
    began = time.perf_counter()
    client.post(f"{url}/v1/collections/{collection}/files",
                files={"file": (f"u{number:05d}.txt", small_file(number))}).raise_for_status()
    while True:
        status = client.get(f"{url}/v1/collections/{collection}", params={"files": "false"}).json()["status"]
        if status["state"] == "ready" and status["files"] == files:
            return time.perf_counter() - began
        if status["state"] == "error":
            raise RuntimeError(status)
        time.sleep(POLL_SECONDS)


def measure(server: Server, sizes: list[int], uploads: int) -> list[list]:
    """Grow one collection to each size (seeded 16 at a time) and time ``uploads`` uploads into it."""
    rows, held, number = [], 0, 100_000
    with httpx.Client(timeout=600) as client:
        client.post(f"{server.url}/v1/collections", json={"name": "grown"}).raise_for_status()
        for size in sizes:
            seeded = time.perf_counter()  # (the measured uploads before count among the size's files)
            upload_many(client, server.url, "grown", held, size - held, at_once=16)
            held = size
            ready_after(client, server.url, "grown", held)
            log(f"seeded {size} files in {time.perf_counter() - seeded:.1f} s")
            times = []
            for _ in range(uploads):
                held, number = held + 1, number + 1
                times.append(upload_then_ready(client, server.url, "grown", number, held))
            rows.append([size, statistics.median(times), max(times)])
            log(f"{size} files: median {rows[-1][1] * 1000:.0f} ms, max {rows[-1][2] * 1000:.0f} ms")
    return rows


def table(results: dict[str, list[list]]) -> str:
    rows = []
    for store, measured in results.items():
        base = measured[0][1]
        for size, median, worst in measured:
            rows.append([store, f"{size:,}", f"{median * 1000:.0f}", f"{worst * 1000:.0f}", f"{median / base:.2f}x"])
    return md_table(["store", "files in the collection", "upload -> ready median (ms)", "max (ms)",
                     "median / median at the smallest"], rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--label", default="")
    parser.add_argument("--sizes", default="100,1200,5000")
    parser.add_argument("--uploads", type=int, default=20)
    parser.add_argument("--stores", default="embedded,postgresql")
    parser.add_argument("--serve-args", default="--retrievers bm25",
                        help="more lcrag serve arguments (default: offer BM25 alone, the server's retriever, so that "
                             "indexing makes what it made before issue 43's item 1; '' for every retriever)")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    processes, readers = stub_readers(1, 0.0)
    results: dict[str, list[list]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp, postgres_server() as database:
            for store in args.stores.split(","):
                extra = (("--store", new_database(database)) if store == "postgresql" else ()) + tuple(
                    args.serve_args.split())
                server = Server(Path(tmp) / store, readers[0], *extra)
                try:
                    results[store] = measure(server, sizes, args.uploads)
                except (httpx.HTTPError, RuntimeError):
                    log(f"{store}: the server's last log lines:\n{server.log_tail()}")
                    raise
                finally:
                    server.close()
    finally:
        for process in processes:
            process.kill()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    text = "\n".join([f"### {args.label or 'run'} (at {commit}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
                      "", f"Machine: {machine()}. Command: `python benchmarks/bench_upload_scale.py "
                      f"{' '.join(sys.argv[1:])}`.", "", table(results), ""])
    print(text)
    if args.out:
        previous = args.out.read_text() if args.out.exists() else "# Upload -> ready as a collection grows\n\n"
        args.out.write_text(previous.rstrip() + "\n\n" + text)


if __name__ == "__main__":
    main()
