"""What deleting costs a replica of the PostgreSQL store (issue 43, item 3): after each change it hears of, a replica
looks for local copies the database no longer holds (PostgresCollections.sweep: its .blobs folder listed, one query
for which of them no file holds), at most once a second; at start-up it does that and checks every mirror
(clean_up). Measured over N files held locally, against what an upload costs the same store (put_file) in the same
run, and the time a removal takes (remove_file, its blob, segments and parses collected).

    flock /tmp/lcrag-bench.lock python benchmarks/bench_delete_sweep.py [--files 100 1000 5000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import log, machine, md_table, postgres_server  # noqa: E402

from lcrag.store.postgres import PostgresCollections  # noqa: E402


def _median_ms(run, repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def measure(url: str, files: int) -> list:
    folder = Path(tempfile.mkdtemp(prefix="lcrag-sweep-"))
    store = PostgresCollections(url, folder / "collections")
    name = f"c{files}"
    store.create(name)
    uploads = []
    for n in range(files):
        started = time.perf_counter()
        store.put_file(name, f"f{n:05}.txt", iter([f"file {n} of {files}: some text\n".encode()]), 1 << 20)
        uploads.append((time.perf_counter() - started) * 1000)
    store.paths(name)  # mirrored here, as a replica that reads the collection has it
    sweep = _median_ms(store.sweep)
    removal = _median_ms(lambda: store.remove_file(name, store.file_records(name)[0].name))
    started = time.perf_counter()
    store.close()
    restarted = PostgresCollections(url, folder / "collections")  # clean_up: every mirror and copy checked
    start = (time.perf_counter() - started) * 1000
    restarted.close()
    upload = statistics.median(uploads[-100:])
    log(f"{files} files: upload {upload:.1f} ms, sweep {sweep:.1f} ms, removal {removal:.1f} ms, start {start:.0f} ms")
    return [files, f"{upload:.1f}", f"{sweep:.1f}", f"{sweep / upload:.2f}", f"{removal:.1f}", f"{start:.0f}"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, nargs="+", default=[100, 1000, 5000])
    args = parser.parse_args()
    with postgres_server() as (url, _):
        rows = [measure(url, n) for n in args.files]
    print(f"Machine: {machine()}\n")
    print(md_table(["files held", "upload (median of last 100), ms", "sweep, ms", "sweep / upload",
                    "removal, ms", "start-up (store opened, clean_up), ms"], rows))


if __name__ == "__main__":
    main()
