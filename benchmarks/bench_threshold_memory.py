"""What client-chosen routing values cost a long-running server (issue 33): N `/v1/ask` requests to a real `lcrag serve`,
each with its own random `route_threshold` and the shipped router (`router: "lara"`), against one small collection;
the server's RSS after a warm-up and at the end, and how many times the router file was parsed.

The server runs from a source tree (``--tree``: this checkout's src, or an old commit's, for the baseline in the
same run). A tiny launcher counts `Router` file parses inside the server process (it wraps the parser, then runs
`lcrag serve` as the CLI does) and writes the count to a file every half second.

    python benchmarks/bench_threshold_memory.py --requests 10000 --base-tree /tmp/old/src --base-requests 1000 \
        --out benchmarks/results/threshold_memory.md
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import free_port, log, machine, md_table  # noqa: E402

HERE = Path(__file__).resolve().parent
LAUNCHER = """
import sys, threading, time
from lcrag.strategies.routing import learned as lr
count, out = [0], sys.argv[1]
name = "parse" if hasattr(lr.Router, "parse") else "load"
inner = getattr(lr.Router, name).__func__
def counted(cls, path):
    count[0] += 1
    return inner(cls, path)
setattr(lr.Router, name, classmethod(counted))
def report():
    while True:
        with open(out, "w") as f:
            f.write(str(count[0]))
        time.sleep(0.5)
threading.Thread(target=report, daemon=True).start()
from lcrag.cli import main
sys.argv = ["lcrag", *sys.argv[2:]]
main()
"""
TEXT = " ".join(f"Record {i}: the harbour crane number {i} lifts {100 + i} tonnes on the night shift." for i in range(300))
QUESTIONS = [f"How many tonnes does crane number {i} lift?" for i in (7, 42, 133, 250)]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(tree: Path, requests: int, warmup: int, seed: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="lcrag-thresholds-"))
    port, counter = free_port(), work / "parses"
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(tree), "LCRAG_CACHE_DIR": str(work / "cache")}
    server = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(counter), "serve", "--port", str(port),
                               "--max-waiting", "16"], env=env, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                httpx.get(f"{url}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        httpx.post(f"{url}/v1/collections", json={"name": "cranes"}).raise_for_status()
        httpx.post(f"{url}/v1/collections/cranes/files", files={"file": ("cranes.txt", TEXT.encode())})
        while httpx.get(f"{url}/v1/collections/cranes").json()["status"]["state"] == "indexing":
            time.sleep(0.2)
        rng = random.Random(seed)
        bodies = [{"collection": "cranes", "question": rng.choice(QUESTIONS), "strategy": "self-route",
                   "router": "lara", "route_threshold": rng.random(), "max_tokens": 4} for _ in range(requests)]
        client = httpx.Client(timeout=600)

        def ask(body):
            reply = client.post(f"{url}/v1/ask", json=body)
            return reply.status_code

        started = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            codes = list(pool.map(ask, bodies[:warmup]))
            after_warmup = rss_mb(server.pid)
            codes += list(pool.map(ask, bodies[warmup:]))
        seconds = time.perf_counter() - started
        time.sleep(1)
        return {"requests": requests, "ok": codes.count(200), "rss_warm": after_warmup, "rss_end": rss_mb(server.pid),
                "parses": int(counter.read_text() or 0), "seconds": seconds}
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--tree", type=Path, default=HERE.parent / "src")
    parser.add_argument("--base-tree", type=Path, help="an old source tree measured the same way (the baseline)")
    parser.add_argument("--base-requests", type=int, default=1000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    runs = [("this tree", args.tree, args.requests)]
    if args.base_tree:
        runs.append((f"baseline ({args.base_tree})", args.base_tree, args.base_requests))
    for label, tree, n in runs:
        log(f"{label}: {n} requests")
        r = measure(tree, n, min(args.warmup, n // 2), seed=33)
        growth = r["rss_end"] - r["rss_warm"]
        rows.append([label, r["requests"], r["ok"], f"{r['rss_warm']:.0f}", f"{r['rss_end']:.0f}", f"{growth:+.1f}",
                     f"{1000 * growth / max(1, r['requests'] - args.warmup):.2f}", r["parses"],
                     f"{1000 * r['seconds'] / r['requests']:.1f}"])
        log(f"{label}: {rows[-1]}")
    command = "python " + " ".join([f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]])
    report = "\n".join([
        "# Client-chosen routing thresholds: server memory (issue 33)", "",
        f"`{command}`", "", f"Machine: {machine()}", "",
        "Each request: `self-route` with the shipped router `lara` and its own random `route_threshold` (and "
        "`max_tokens` 4), over one small collection, 4 clients at once; the bundled SmolLM2 reader, its completion "
        f"cache on. RSS of the server process after {args.warmup} warm-up requests and at the end; parses: how many "
        "times the router file was parsed inside the server.", "",
        md_table(["server", "requests", "200s", "RSS warm (MB)", "RSS end (MB)", "growth (MB)",
                  "growth per 1,000 (MB)", "router parses", "ms / request"], rows), ""])
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
