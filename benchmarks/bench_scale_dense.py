"""A dense question on a 2 MB collection right after it is ready, through two `lcrag serve --store` replicas at once
(issue 43, item 1): the indexing job embeds the collection once and stores its vectors; a question only loads them.

A real PostgreSQL is started here (initdb in a temporary folder: tests/postgres_fixtures.py); the reader is the
tests' stand-in OpenAI-compatible server (tests/reader_servers.py, answering at once), so the times are the
service's, not a model's; the embedder is the bundled one (MiniLM, ONNX, CPU). The collection is one text file of
whole books joined until it holds ``--mb`` MB, read from ``--texts`` (e.g. LaRA's 128k books in ../shared/data; the
text is written to a temporary folder, never into the repository).

1. Upload to ready: the time from the upload's answer to both replicas saying ready (the job on either replica).
2. Right after ready, ``--rounds`` rounds of one dense question through each replica at once (a different question
   each round: no answer is served from the answer cache); the time from ready to the first round's two answers,
   and each round's latency.
3. BM25 questions on the same collection through both replicas meanwhile (one client per replica, one question at a
   time), against their p50 once the dense rounds are over (the baseline, measured in the same run: the same two
   clients at once, without the dense questions).
4. ``SELECT count(*), max(writes) FROM lcrag_segments WHERE embedder <> ''``: every embedding segment written once.

    flock /tmp/lcrag-bench.lock python benchmarks/bench_scale_dense.py \\
        --texts ../shared/data/lara/datasets/128k/book --out benchmarks/results/scale_dense.md
"""

from __future__ import annotations

import argparse
import random
import re
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
from common import Processes, free_port, log, machine, md_table  # noqa: E402
from postgres_fixtures import new_database, postgres_server  # noqa: E402

STUB = ("import sys, threading; sys.path.insert(0, sys.argv[1]); import reader_servers as r; "
        "reader = r.Stub(answer=r.closest_line); print(reader.url, flush=True); threading.Event().wait()")


def collection_text(texts: Path, megabytes: float) -> tuple[str, list[str]]:
    """Whole texts of ``texts`` (a folder, sorted by name, or one file) joined until ``megabytes`` MB; the names."""
    files = sorted(p for p in texts.iterdir() if p.is_file()) if texts.is_dir() else [texts]
    parts, names, size = [], [], 0
    for path in files:
        if size >= megabytes * 1e6:
            break
        text = path.read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        names.append(path.name)
        size += len(text.encode())
    return "\n\n".join(parts), names


def questions(text: str, count: int, seed: int) -> list[str]:
    """``count`` different questions made of words of the text's sentences (each asks about a real passage)."""
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", text) if 8 <= len(s.split()) <= 40]
    rng = random.Random(seed)
    return [f"What is said about {' '.join(rng.choice(sentences).split()[2:9])}?" for _ in range(count)]


def replica(processes: Processes, cache: Path, reader: str, database: str, extra: list[str]) -> str:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    processes.popen([sys.executable, "-m", "lcrag.cli", "serve", "--port", str(port), "--cache-dir", str(cache),
                     "--llm", f"openai:stand-in@{reader}", "--context-window", "4096", "--max-upload-mb", "64",
                     "--store", database, *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(1200):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return url
        except httpx.HTTPError:
            time.sleep(0.1)
    raise TimeoutError(f"lcrag serve on {url} did not start")


def ask(client: httpx.Client, url: str, question: str, retriever: str) -> tuple[float, int]:
    began = time.monotonic()
    reply = client.post(f"{url}/v1/ask", json={"collection": "big", "question": question, "strategy": "rag",
                                               "retriever": retriever})
    return time.monotonic() - began, reply.status_code


def ready(client: httpx.Client, urls: list[str], timeout: float) -> float:
    """Wait until every replica says the collection is ready; when that was (monotonic)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = [client.get(f"{u}/v1/collections/big").json()["status"]["state"] for u in urls]
        if all(s == "ready" for s in states):
            return time.monotonic()
        if "error" in states:
            raise RuntimeError(f"indexing failed: {client.get(f'{urls[0]}/v1/collections/big').json()}")
        time.sleep(0.05)
    raise TimeoutError("the collection was not ready in time")


def bm25_loop(url: str, asked: list[str], stop: threading.Event, times: list[tuple[float, int]],
              rate: float = 0.0, seed: int = 0) -> None:
    """BM25 questions through ``url`` until ``stop``: one after another (``rate`` 0: a closed loop, each client
    always waiting on an answer, which alone keeps the cores busy), or ``rate`` a second on average, at random
    times (an open loop with Poisson arrivals, seeded: a question is sent on time whether or not the one before was
    answered, so a slower server shows in the latency, not in fewer questions; random, so that the BM25 questions
    never fall in step with the dense rounds)."""
    if not rate:
        with httpx.Client(timeout=600) as client:
            for question in asked:
                if stop.is_set():
                    return
                times.append(ask(client, url, question, "bm25"))
        return
    arrivals, at = random.Random(seed), time.monotonic()
    with httpx.Client(timeout=600, limits=httpx.Limits(max_connections=32)) as client, \
            ThreadPoolExecutor(32) as pool:
        for question in asked:
            at += arrivals.expovariate(rate)
            if stop.wait(max(0.0, at - time.monotonic())):
                return
            pool.submit(lambda q: times.append(ask(client, url, q, "bm25")), question)


def dense_rounds(urls: list[str], asked: list[str], rounds: int, ready_at: float,
                 every: float = 0.0) -> tuple[float, list[float], list]:
    """``rounds`` rounds of one dense question per replica at once, back to back or one each ``every`` seconds;
    seconds from ready to the first round's last answer, each round's slowest latency, and every status."""
    latencies, statuses, first, began = [], [], 0.0, time.monotonic()
    with httpx.Client(timeout=900) as client, ThreadPoolExecutor(len(urls)) as pool:
        for number in range(rounds):
            time.sleep(max(0.0, began + number * every - time.monotonic()))
            results = list(pool.map(lambda u: ask(client, u, asked[number * len(urls) + urls.index(u)], "dense"),
                                    urls))
            if number == 0:
                first = time.monotonic() - ready_at
            latencies.append(max(seconds for seconds, _ in results))
            statuses += [status for _, status in results]
    return first, latencies, statuses


def segment_writes(database: str) -> tuple[int, int]:
    import psycopg

    with psycopg.connect(database, autocommit=True) as db:
        count, most = db.execute("SELECT count(*), max(writes) FROM lcrag_segments WHERE embedder <> ''").fetchone()
    return int(count), int(most or 0)


def run(args, tmp: Path, processes: Processes, server: str) -> dict:
    text, names = collection_text(args.texts, args.mb)
    (tmp / "books.txt").write_text(text, encoding="utf-8")
    reader_process = processes.popen([sys.executable, "-c", STUB, str(Path(__file__).parents[1] / "tests")],
                                     stdout=subprocess.PIPE, text=True)
    reader = reader_process.stdout.readline().strip()
    database = new_database(server)
    extra = [part for name in args.retrievers for part in ("--retrievers", name)]
    urls = [replica(processes, tmp / name, reader, database, extra) for name in ("a", "b")]
    # per replica: BM25 questions enough for the dense rounds (a closed loop stops at its 200th), then the idle ones
    meanwhile = int(args.bm25_rate * (args.rounds * args.dense_every + 60)) if args.bm25_rate else 200
    asked = questions(text, 2 * (args.rounds + meanwhile + args.idle), seed=7)
    with httpx.Client(timeout=900) as client:
        client.post(f"{urls[0]}/v1/collections", json={"name": "big"}).raise_for_status()
        began = time.monotonic()
        client.post(f"{urls[0]}/v1/collections/big/files",
                    files={"file": ("books.txt", (tmp / "books.txt").read_bytes())}).raise_for_status()
        uploaded = time.monotonic()
        ready_at = ready(client, urls, args.timeout)
    log(f"uploaded in {uploaded - began:.1f} s, ready {ready_at - uploaded:.1f} s after")
    stop, during = threading.Event(), {u: [] for u in urls}
    pool = asked[2 * args.rounds:]
    loops = [threading.Thread(target=bm25_loop, args=(u, pool[i * meanwhile:(i + 1) * meanwhile], stop, during[u],
                                                      args.bm25_rate, i)) for i, u in enumerate(urls)]
    for loop in loops:
        loop.start()
    first, rounds, statuses = dense_rounds(urls, asked, args.rounds, ready_at, args.dense_every)
    stop.set()
    for loop in loops:
        loop.join()
    log(f"dense: first round {first:.2f} s after ready, rounds {[round(r, 3) for r in rounds]}, statuses {statuses}")
    idle = {u: [] for u in urls}  # the same two BM25 clients at once, without the dense questions
    rest = pool[2 * meanwhile:]
    loops = [threading.Thread(target=bm25_loop, args=(u, rest[i * args.idle:(i + 1) * args.idle], threading.Event(),
                                                      idle[u], args.bm25_rate, 10 + i)) for i, u in enumerate(urls)]
    for loop in loops:
        loop.start()
    for loop in loops:
        loop.join()
    return {"text": (len(text.encode()), names), "upload": uploaded - began, "ready": ready_at - uploaded,
            "first": first, "rounds": rounds, "statuses": statuses, "meanwhile": during, "idle": idle,
            "writes": segment_writes(database), "urls": urls}


def report(args, r: dict) -> str:
    rows = []
    for label, url in zip("ab", r["urls"]):
        during = [s for s, _ in r["meanwhile"][url]]
        idle = statistics.median(s for s, _ in r["idle"][url])
        p50 = statistics.median(during) if during else float("nan")
        bad = sum(1 for _, status in r["meanwhile"][url] + r["idle"][url] if status != 200)
        rows.append([label, len(during), f"{p50 * 1000:.1f}", f"{max(during) * 1000:.1f}" if during else "-",
                     f"{idle * 1000:.1f}", f"{p50 / idle:.2f}x", bad])
    size, names = r["text"]
    count, most = r["writes"]
    bad_dense = sum(1 for status in r["statuses"] if status != 200)
    return "\n".join([
        "# A dense question on a 2 MB collection right after ready, through two replicas (issue 43, item 1)", "",
        f"Command: `flock /tmp/lcrag-bench.lock python benchmarks/bench_scale_dense.py --texts {args.texts} "
        f"--mb {args.mb} --rounds {args.rounds} --idle {args.idle}"
        + (f" --bm25-rate {args.bm25_rate:g} --dense-every {args.dense_every:g}" if args.bm25_rate or args.dense_every
           else "")
        + "".join(f" --retrievers {n}" for n in args.retrievers) + "`", "",
        f"Machine: {machine()}; 2 cores shared, no GPU. Two `lcrag serve --store postgresql://...` replicas on one "
        "PostgreSQL 15 started by the benchmark, the tests' stand-in reader (answers at once), the bundled MiniLM "
        "embedder; retrievers offered: " + (", ".join(args.retrievers) or "the default (every one that makes no "
                                              "reader call: bm25, dense, hybrid, sentence-window)") + ".", "",
        f"Collection: one file of {size / 1e6:.2f} MB ({', '.join(names)}), uploaded through replica a.", "",
        md_table(["measure", "value", "target"], [
            ["upload answered (s)", f"{r['upload']:.1f}", ""],
            ["upload answered -> both replicas ready (s): the job parses, chunks, embeds, builds every offered index",
             f"{r['ready']:.1f}", ""],
            ["ready -> first dense round answered through both replicas at once (s)", f"{r['first']:.2f}", "<= 5"],
            ["dense rounds' latency, slowest of the two, each round (s)",
             ", ".join(f"{x:.2f}" for x in r["rounds"]), ""],
            ["dense answers not 200", bad_dense, "0"],
            ["embedding segments, max(writes)", f"{count}, {most}", "max 1"]]), "",
        "BM25 questions through each replica ("
        + (f"{args.bm25_rate:g} a second on average, sent at random times: an open loop" if args.bm25_rate else
           "one client each, one question at a time: a closed loop")
        + f"; dense rounds {'every ' + format(args.dense_every, 'g') + ' s' if args.dense_every else 'back to back'}"
        ") while the dense rounds ran, against their p50 after them without dense questions (the baseline, same "
        "run: the same load at once); the first BM25 question on each replica after ready loads the collection (parsed text from the "
        "store's parse cache, chunks from its segments), and counts in the max:", "",
        md_table(["replica", "BM25 meanwhile", "p50 (ms)", "max (ms)", "idle p50 (ms)", "meanwhile / idle",
                  "not 200"], rows), ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=Path, required=True, help="a folder of long texts (or one file)")
    parser.add_argument("--mb", type=float, default=2.0, help="megabytes of text in the collection")
    parser.add_argument("--rounds", type=int, default=10, help="rounds of dense questions through both replicas")
    parser.add_argument("--idle", type=int, default=30, help="idle BM25 questions per replica for the baseline")
    parser.add_argument("--bm25-rate", type=float, default=0.0,
                        help="BM25 questions a second per replica, sent on time (an open loop); 0: one client per "
                             "replica asking one after another (a closed loop: the cores are already busy)")
    parser.add_argument("--dense-every", type=float, default=0.0,
                        help="seconds between the dense rounds' starts; 0: back to back")
    parser.add_argument("--retrievers", action="append", default=[], help="lcrag serve --retrievers (repeatable)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds the collection may take to be ready")
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Processes() as processes, postgres_server() as server:
        result = run(args, Path(tmp), processes, server)
    text = report(args, result)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
