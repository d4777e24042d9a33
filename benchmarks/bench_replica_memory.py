"""A replica's memory per MB of text it holds (issue 43, item 7): a real `lcrag serve` (the embedded store, or
`--store postgresql://…` on a PostgreSQL started here) with the stand-in reader of tests/reader_servers.py, given
every text file under the folders passed (e.g. LaRA's 32K and 128K documents), measured warm, once the collection is
ready and after two questions (one BM25, one dense), over a baseline: the same server warm (a one-file collection
ready and asked the same two questions: the embedder and tokenizers loaded). RSS is the server process's; "with helpers" is the proportional
set size (PSS, /proc/PID/smaps_rollup: shared pages counted once) of it and every process it started (the parse
sandbox, the forkserver, the chunking worker), so nothing is counted twice.

    python benchmarks/bench_replica_memory.py ../shared/data/lara/datasets/32k ../shared/data/lara/datasets/128k \\
        --out benchmarks/results/scale_memory.md
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from bench_scale import Server  # noqa: E402
from bench_shared_store import stub_readers  # noqa: E402
from common import log, machine, md_table  # noqa: E402
from postgres_fixtures import new_database, postgres_server  # noqa: E402

QUESTIONS = (("Who is the main character?", "bm25"), ("What happened at the end of the year?", "dense"))


def descendants(pid: int) -> list[int]:
    """``pid`` and every process under it (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            pass
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo.extend(children.get(found[-1], []))
    return found


def _kb(path: str, field: str) -> int:
    try:
        line = next(l for l in Path(path).read_text().splitlines() if l.startswith(field))
        return int(line.split()[1])
    except (OSError, StopIteration):
        return 0


def memory(pid: int) -> tuple[float, float, int]:
    """The server's RSS (MB), its and its helpers' PSS (MB), and how many processes that is."""
    tree = descendants(pid)
    return (_kb(f"/proc/{pid}/status", "VmRSS:") / 1024,
            sum(_kb(f"/proc/{p}/smaps_rollup", "Pss:") for p in tree) / 1024, len(tree))


def upload_all(url: str, files: list[Path], collection: str = "held") -> None:
    with httpx.Client(timeout=600) as client:
        client.post(f"{url}/v1/collections", json={"name": collection}).raise_for_status()
        for number, path in enumerate(files):
            with open(path, "rb") as f:  # a name of its own: two folders may hold the same title
                client.post(f"{url}/v1/collections/{collection}/files",
                            files={"file": (f"{number:03d}-{path.stem[:60]}.txt", f)}).raise_for_status()
        give_up = time.monotonic() + 3600
        while client.get(f"{url}/v1/collections/{collection}").json()["status"]["state"] != "ready":
            if time.monotonic() > give_up:
                raise RuntimeError("the collection was not ready within an hour")
            time.sleep(1)


def ask_two(url: str, collection: str = "held") -> None:
    for question, retriever in QUESTIONS:
        reply = httpx.post(f"{url}/v1/ask", json={"collection": collection, "question": question, "strategy": "rag",
                                                  "retriever": retriever}, timeout=600)
        reply.raise_for_status()


def measure(label: str, files: list[Path], tmp: Path, reader: str, *extra: str) -> list:
    server = Server(tmp / label, reader, "--retrievers", "bm25", "--retrievers", "dense", *extra)
    try:
        upload_all(server.url, files[:1], "warm")  # the embedder and tokenizers loaded, the paths taken once
        ask_two(server.url, "warm")
        warm = memory(server.process.pid)
        started = time.monotonic()
        upload_all(server.url, files)
        ready_seconds = time.monotonic() - started
        ready = memory(server.process.pid)
        ask_two(server.url)
        asked = memory(server.process.pid)
    finally:
        server.close()
    text_mb = sum(p.stat().st_size for p in files) / 1e6
    log([label, text_mb, warm, ready, asked, ready_seconds])
    return [label, f"{text_mb:.1f}", f"{warm[0]:.0f}", f"{ready[0]:.0f}", f"{asked[0]:.0f}",
            f"{asked[1]:.0f} ({asked[2]} processes)", f"{(asked[0] - warm[0]) / text_mb:.1f}",
            f"{(asked[1] - warm[1]) / text_mb:.1f}", f"{ready_seconds:.0f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="folders whose *.txt files the replica holds")
    parser.add_argument("--stores", nargs="+", default=["embedded", "postgresql"], choices=["embedded", "postgresql"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    files = sorted(p for folder in args.folders for p in folder.rglob("*.txt"))
    readers, urls = stub_readers(1, 0.0)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if "embedded" in args.stores:
                rows.append(measure("embedded", files, Path(tmp), urls[0]))
            if "postgresql" in args.stores:
                with postgres_server() as server:
                    rows.append(measure("postgresql", files, Path(tmp), urls[0], "--store", new_database(server)))
    finally:
        for reader in readers:
            reader.kill()
    report(args, files, rows)


def report(args, files: list[Path], rows: list[list]) -> None:
    command = "python benchmarks/bench_replica_memory.py " + " ".join(map(str, args.folders)) + (
        f" --out {args.out}" if args.out else "")
    text = (f"## A replica's memory per MB of text held (issue 43, item 7)\n\nMachine: {machine()}. Command: "
            f"`{command}`.\n{len(files)} text files, one collection, bm25 and dense offered (every file embedded at "
            f"ingestion), the stand-in reader. The baseline (warm) is the server after a one-file collection was made "
            f"ready and asked the same two questions (models loaded, every path taken once); per MB of text is the "
            f"growth over it.\n\n"
            + md_table(["store", "text (MB)", "RSS warm (MB)", "RSS ready (MB)", "RSS after 2 questions (MB)",
                        "with helpers, PSS (MB)", "RSS per MB of text", "with helpers per MB of text",
                        "upload -> ready (s)"], rows) + "\n")
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
