"""The cached-token share of a pool of two reader servers against one server, measured in the same run.

Real llama.cpp servers (xllamacpp, the embedded reader's build; tests/reader_servers.py starts each in a process of
its own, one thread, one slot, llama.cpp's default 8 GiB host prompt cache) serve the bundled SmolLM2-135M. The same
questions — D synthetic documents, Q questions each, asked document after document in turn (the order least kind to
a prefix cache), LC prompts (the whole document, then the question), two clients at once, no completion cache — are
answered three times, each time by fresh servers with cold caches:

1. one server (the baseline);
2. a pool of two with document affinity (lcrag's default: rendezvous hashing of the document over the servers up);
3. the same pool balancing by least outstanding calls only (``affinity=False``), for contrast.

The share is the servers' own reported ``usage.prompt_tokens_details.cached_tokens`` over their prompt tokens, as
lcrag counts them for ``/metrics`` (``lcrag_reader_cached_token_share``).

    python benchmarks/bench_reader_pool.py [--documents 8] [--questions 3] [--words 250] [--out benchmarks/results/reader_pool.md]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import log, machine, md_table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from reader_servers import llama_server  # noqa: E402  (the tests' helper: one copy of how a server is started)

from lcrag.pipeline.pipeline import Pipeline, Settings  # noqa: E402
from lcrag.readers import make_reader, server_stats  # noqa: E402
from lcrag.readers.pool import pooled_reader  # noqa: E402
from lcrag.documents.synthetic import DEFAULT_FACTS, needle_document  # noqa: E402

CONFIGURATIONS = (("one server", 1, True), ("pool of 2, document affinity", 2, True),
                  ("pool of 2, least outstanding only", 2, False))


def questions(n_documents: int, per_document: int, words: int) -> list[tuple]:
    """(document, question) pairs, the documents taken in turn: q1 of every document, then q2, ..."""
    docs = [needle_document(words, facts=DEFAULT_FACTS[: max(1, per_document - 1)], seed=seed)
            for seed in range(n_documents)]
    asked = [[(doc, fact.question) for fact in facts][:per_document] for doc, facts in docs]
    return [pair for round_ in zip(*asked) for pair in round_]


def run(name: str, servers: int, affinity: bool, asked: list[tuple], cache_dir: Path) -> list:
    started = [llama_server(threads=1, ctx=2048) for _ in range(servers)]
    try:
        urls = [url for _, url in started]
        reader = (make_reader("openai:smollm2", urls[0]) if servers == 1
                  else pooled_reader("smollm2", urls, affinity=affinity))
        pipeline = Pipeline(Settings(llm="openai:smollm2", strategy="lc", max_tokens=12, cache=False,
                                     cache_dir=cache_dir), reader=reader)
        clock = time.perf_counter()
        with ThreadPoolExecutor(2) as clients:
            answers = list(clients.map(lambda pair: pipeline.ask(*pair), asked))
        seconds = time.perf_counter() - clock
        stats = server_stats(reader)
        pipeline.close()
    finally:
        for process, _ in started:
            process.kill()
            process.wait(30)
    assert all(a.text.strip() for a in answers), f"{name}: an empty answer"
    prompt = sum(s["prompt_tokens"] for s in stats)
    cached = sum(s["cached_prompt_tokens"] for s in stats)
    per_server = ", ".join(f"{s['completions']} ({s['cached_prompt_tokens'] / max(1, s['prompt_tokens']):.1%})"
                           for s in stats)
    log(f"{name}: {cached}/{prompt} cached, {seconds:.1f} s")
    return [name, len(answers), prompt, cached, cached / prompt, per_server, seconds]


def report(rows: list[list], args: argparse.Namespace, command: str, load: float) -> str:
    baseline = rows[0][4]
    table = md_table(
        ["readers", "questions", "prompt tokens", "cached prompt tokens", "cached share", "vs one server",
         "questions (cached share) per server", "wall s"],
        [[r[0], r[1], f"{r[2]:,}", f"{r[3]:,}", f"{r[4]:.1%}", f"{r[4] / baseline:.2f}×", r[5], f"{r[6]:.1f}"]
         for r in rows])
    return (f"# A pool of reader servers: cached-token share\n\n"
            f"Command: `{command}`\n\nMachine: {machine()}; load average {load:.1f} when it started (a shared "
            f"machine: the wall times say little of throughput, the shares do not depend on them)\n\n"
            f"Workload: {args.documents} synthetic documents of about {args.words} words, {args.questions} questions "
            f"each, asked document after document in turn by two clients at once, strategy `lc`, no completion "
            f"cache; each configuration on fresh llama.cpp servers (xllamacpp, bundled SmolLM2-135M, one thread, "
            f"one slot, 8 GiB host prompt cache). Shares are the servers' reported cached prompt tokens over their "
            f"prompt tokens (what `/metrics` shows as `lcrag_reader_cached_token_share`).\n\n{table}\n\n"
            f"Issue 36's target: with two reader servers, document affinity keeps the cached-token share >= 90% of "
            f"a single server's: **{rows[1][4] / baseline:.2f}×** here. Without affinity the same pool sends a "
            f"document's questions to both servers, and each server reads it once: {rows[2][4] / baseline:.2f}×.\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=8)
    parser.add_argument("--questions", type=int, default=3)
    parser.add_argument("--words", type=int, default=250)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/reader_pool.md")
    args = parser.parse_args()
    asked = questions(args.documents, args.questions, args.words)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="lcrag-bench-pool-") as cache_dir:
        rows = [run(name, servers, affinity, asked, Path(cache_dir)) for name, servers, affinity in CONFIGURATIONS]
    command = "python benchmarks/bench_reader_pool.py " + " ".join(sys.argv[1:])
    args.out.write_text(report(rows, args, command.strip(), load), encoding="utf-8")
    print(args.out.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
