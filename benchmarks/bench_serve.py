"""The service (issue 18): prefix reuse across questions, restarts and processes; server overhead; a load test.

1. Prefix reuse, LC with the embedded reader on a real document: the 1st LC question through `lcrag serve`, the 2nd on
   the same server, the 3rd after a restart of the server (same cache directory), the 4th in a new `lcrag ask`
   process; each one's reader time (the LC call's seconds) and wall time, as a ratio to the 1st.
2. Overhead: a cached answer (completion-cache hit) through HTTP `POST /v1/ask` vs the bare library call
   (`Pipeline.ask` in this process), alternating, p50 of each and the difference.
3. Streaming: LC and Self-Route answers streamed by `POST /v1/ask` (`stream: true`) on the document whose prefix
   is cached: seconds to the question reaching the reader (`started`), to the first token and to the whole answer;
   then a client that leaves after 3 tokens of a long LC answer, and how long the next question takes (closed-book,
   4 tokens) against a like question on an idle server: a generation left running would make it wait.
4. Load: 16 concurrent clients for 60 s on loopback, mixed: 80% asks of cached questions, 20% uploads of small text
   files to a second collection (each re-indexes it in the background); counts of every status, p50/p95 latency
   per kind, then every upload checked on disk (present, the right size, no temporary file left).

    python benchmarks/bench_serve.py --doc /tmp/docs/bashref.pdf --context-window 8192 --out benchmarks/results/serve.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import free_port, log, machine, md_table  # noqa: E402

QUESTIONS = ["Which shopt option runs the last command of a pipeline in the current shell?",
             "What does the -e option of set do?", "Which variable holds the PID of the last background job?",
             "What is the default value of HISTSIZE?", "Which builtin makes a variable read-only?"]


# Short LC answers: what is measured is reading the document, not writing a long answer (a 64-token answer alone
# takes seconds on this CPU and would hide the prefix reuse).
LC_ANSWER_TOKENS = 16


class Server:
    def __init__(self, cache: Path, window: int):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = httpx.Client(timeout=3600)  # one connection pool: a new client per call costs ~20 ms itself
        self.process = subprocess.Popen([sys.executable, "-m", "lcrag.cli", "serve", "--port", str(self.port),
                                         "--cache-dir", str(cache), "--context-window", str(window),
                                         "--max-waiting", "64"], stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("the server did not start")

    def ask(self, question: str, strategy: str, collection: str = "docs", **options) -> tuple[dict, float]:
        started = time.perf_counter()
        response = self.http.post(f"{self.url}/v1/ask", json={"collection": collection, "question": question,
                                                             "strategy": strategy, **options})
        response.raise_for_status()
        return response.json(), time.perf_counter() - started

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)


def wait_ready(url: str, name: str) -> None:
    while httpx.get(f"{url}/v1/collections/{name}").json()["status"]["state"] == "indexing":
        time.sleep(0.2)


def prefix_reuse(args, cache: Path) -> tuple[str, Server]:
    rows = []
    server = Server(cache, args.context_window)
    httpx.post(f"{server.url}/v1/collections", json={"name": "docs"})
    with open(args.doc, "rb") as f:
        httpx.post(f"{server.url}/v1/collections/docs/files", files={"file": (args.doc.name, f)}, timeout=600)
    wait_ready(server.url, "docs")
    for label, question in (("1st LC question", QUESTIONS[0]), ("2nd, same server", QUESTIONS[1])):
        answer, wall = server.ask(question, "lc", max_tokens=LC_ANSWER_TOKENS)
        rows.append([label, answer["calls"][0], wall])
        log(f"{label}: {wall:.1f}s")
    server.stop()
    server = Server(cache, args.context_window)
    answer, wall = server.ask(QUESTIONS[2], "lc", max_tokens=LC_ANSWER_TOKENS)
    rows.append(["3rd, after a restart", answer["calls"][0], wall])
    log(f"after a restart: {wall:.1f}s")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "lcrag.cli", "ask", str(args.doc), QUESTIONS[3], "--strategy", "lc",
                           "--json", "--cache-dir", str(cache), "--context-window", str(args.context_window),
                           "--max-tokens", str(LC_ANSWER_TOKENS)],
                          capture_output=True, text=True, check=True)
    rows.append(["4th, new lcrag ask process", json.loads(done.stdout)["calls"][0], time.perf_counter() - started])
    first_call, first_wall = rows[0][1]["seconds"], rows[0][2]
    table = [[label, call["prompt_tokens"], call["cached_prompt_tokens"], call["completion_tokens"],
              f"{call['seconds']:.2f}", f"{100 * call['seconds'] / first_call:.1f}%", f"{wall:.2f}",
              f"{100 * wall / first_wall:.1f}%"] for label, call, wall in rows]
    return md_table(["question", "prompt tokens", "cached (restored)", "completion tokens", "reader s",
                     "vs 1st (reader)", "wall s", "vs 1st (wall)"], table), server


def overhead(args, cache: Path, server: Server) -> str:
    from lcrag.pipeline.pipeline import Pipeline, Settings

    for q in QUESTIONS:  # every question answered once (RAG): later asks are completion-cache hits
        server.ask(q, "rag")
    pipeline = Pipeline(Settings(cache_dir=cache, context_window=args.context_window, strategy="rag"))
    document = server_document(cache)
    bare, http = [], []
    for i in range(args.rounds):
        q = QUESTIONS[i % len(QUESTIONS)]
        started = time.perf_counter()
        pipeline.ask(document, q)
        bare.append(time.perf_counter() - started)
        http.append(server.ask(q, "rag")[1])
    pipeline.close()
    p50b, p50h = statistics.median(bare) * 1000, statistics.median(http) * 1000
    return md_table(["cached answer", "p50 ms", "p95 ms"], [
        ["bare library call (Pipeline.ask)", f"{p50b:.1f}", f"{sorted(bare)[int(0.95 * len(bare))] * 1000:.1f}"],
        ["HTTP POST /v1/ask (loopback)", f"{p50h:.1f}", f"{sorted(http)[int(0.95 * len(http))] * 1000:.1f}"],
        ["server overhead (p50 difference)", f"{p50h - p50b:.1f}", ""]])


STREAM_QUESTIONS = ["How do I make a variable available to child processes?", "What does the trap builtin do?",
                    "How are arithmetic expressions written?"]
LONG_ANSWER = "List every shell builtin command with a one-line description of each."


def streamed(server: Server, question: str, strategy: str, **options) -> dict[str, float]:
    """Seconds from the request to each event's first arrival, and the token count."""
    started, seen, tokens = time.perf_counter(), {}, 0
    body = {"collection": "docs", "question": question, "strategy": strategy, "stream": True, **options}
    with server.http.stream("POST", f"{server.url}/v1/ask", json=body) as response:
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
                seen.setdefault(kind, time.perf_counter() - started)
                tokens += kind == "token"
    return seen | {"tokens": tokens}


def streaming(args, server: Server) -> str:
    rows = []
    for question in STREAM_QUESTIONS:
        for strategy in ("lc", "self-route"):
            seen = streamed(server, question, strategy, max_tokens=64)
            rows.append([strategy, question, f"{seen['started']:.2f}", f"{seen['token']:.2f}", f"{seen['answer']:.2f}",
                         seen["tokens"], f"{100 * seen['token'] / seen['answer']:.0f}%"])
            log(f"streamed {strategy}: first token {seen['token']:.1f}s of {seen['answer']:.1f}s")
    table = md_table(["strategy", "question", "started s", "first token s", "answer s", "token events",
                      "first token / answer"], rows)
    # The probe is a closed-book question (the question alone, ~30 prompt tokens, 4 answer tokens: well under a
    # second); a generation left running would make it wait for hundreds of tokens more.
    body = {"collection": "docs", "question": LONG_ANSWER, "strategy": "lc", "stream": True, "max_tokens": 1000}
    tokens = 0
    with server.http.stream("POST", f"{server.url}/v1/ask", json=body) as response:
        for line in response.iter_lines():
            tokens += line.startswith("event: token")
            if tokens == 3:
                break  # the client leaves
    left = time.perf_counter()
    server.ask("Name one Unix shell.", "closed-book", max_tokens=4)
    after_cancel = time.perf_counter() - left  # from the disconnect to the next answer
    _, idle = server.ask("Name one text editor.", "closed-book", max_tokens=4)
    metrics = httpx.get(f"{server.url}/metrics").text
    cancelled = next((line.split()[-1] for line in metrics.splitlines() if line.startswith("lcrag_cancelled_total")), "?")
    return (table + "\n\n" + md_table(["after a client left 3 tokens into a 1,000-token LC answer", "seconds"], [
        ["next question (closed-book, 4 tokens), from the disconnect", f"{after_cancel:.2f}"],
        ["a like question on the idle server", f"{idle:.2f}"],
        ["ratio", f"{after_cancel / idle:.2f}"]]) + f"\n\nCancelled questions counted by /metrics: {cancelled}.")


def server_document(cache: Path):
    from lcrag.documents.loaders import join_documents, load_documents

    files = sorted((cache / "collections" / "docs" / "files").iterdir())
    return join_documents([d for f in files if not f.name.startswith(".") for d in load_documents(f)],
                          cache / "collections" / "docs")


def load_test(args, server: Server) -> str:
    httpx.post(f"{server.url}/v1/collections", json={"name": "uploads"})
    results, lock, stop = [], threading.Lock(), time.time() + args.seconds
    uploaded: dict[str, int] = {}

    def client(n: int) -> None:
        with httpx.Client(timeout=600) as http:
            i = 0
            while time.time() < stop:
                i += 1
                started = time.perf_counter()
                if i % 5 == 0:
                    name, body = f"note-{n}-{i}.txt", (f"Client {n} note {i}: the depot code is {n * 1000 + i}. " * 40)
                    r = http.post(f"{server.url}/v1/collections/uploads/files", files={"file": (name, body.encode())})
                    kind = "upload"
                    if r.status_code == 201:
                        with lock:
                            uploaded[name] = len(body.encode())
                else:
                    r = http.post(f"{server.url}/v1/ask", json={"collection": "docs", "question":
                                                                 QUESTIONS[i % len(QUESTIONS)], "strategy": "rag"})
                    kind = "ask"
                with lock:
                    results.append((kind, r.status_code, time.perf_counter() - started))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stored = {p.name: p.stat().st_size for p in (args.cache / "collections/uploads/files").iterdir()}
    lost = [n for n, size in uploaded.items() if stored.get(n) != size]
    temporary = [n for n in stored if n.startswith(".upload")]
    rows = []
    for kind in ("ask", "upload"):
        mine = [r for r in results if r[0] == kind]
        latencies = sorted(r[2] for r in mine)
        statuses = {}
        for r in mine:
            statuses[r[1]] = statuses.get(r[1], 0) + 1
        rows.append([kind, len(mine), json.dumps(dict(sorted(statuses.items()))),
                     f"{statistics.median(latencies) * 1000:.0f}" if latencies else "—",
                     f"{latencies[int(0.95 * len(latencies))] * 1000:.0f}" if latencies else "—"])
    fivexx = sum(1 for r in results if r[1] >= 500)
    return (md_table(["request", "count", "statuses", "p50 ms", "p95 ms"], rows) +
            f"\n\n{args.clients} clients, {args.seconds} s: {len(results)} requests, {fivexx} with a 5xx status; "
            f"{len(uploaded)} uploads accepted, {len(lost)} lost or of the wrong size on disk, {len(temporary)} "
            "temporary files left.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--doc", type=Path, required=True)
    parser.add_argument("--context-window", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/serve.md"))
    args = parser.parse_args()
    args.cache = Path(tempfile.mkdtemp(prefix="lcrag-serve-bench-"))
    reuse, server = prefix_reuse(args, args.cache)
    print(reuse)
    try:
        live = streaming(args, server)
        print(live)
        over = overhead(args, args.cache, server)
        print(over)
        load = load_test(args, server)
        print(load)
    finally:
        server.stop()
    command = " ".join(["python", "benchmarks/bench_serve.py", *sys.argv[1:]])
    args.out.write_text(f"# The service: prefix reuse, overhead, streaming, load\n\nCommand: `{command}`\n\nMachine: {machine()}\n\n"
                        f"## Prefix reuse (LC, embedded reader)\n\n{reuse}\n\n## Server overhead on a cached answer\n\n"
                        f"{over}\n\n## Streaming and cancelling\n\n{live}\n\n## Load\n\n{load}\n", encoding="utf-8")


if __name__ == "__main__":
    main()
