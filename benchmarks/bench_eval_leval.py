"""The evaluation harness's own cost on L-Eval: `lcrag eval` with a dense retriever and k in {3, 5, 10}, this tree
against a base commit, A/B alternated in one run.

    python benchmarks/bench_eval_leval.py --dataset ../shared/data/leval/financial_qa.jsonl --base COMMIT \\
        [--limit 40] [--repeats 3] [--out benchmarks/results/eval_leval.md]

The reader is the OpenAI-compatible stand-in (tests/reader_servers.py, answering at once), so what is timed is
what lcrag does around the reader: loading the dataset, chunking and embedding the documents (the bundled MiniLM),
embedding each question, retrieving, assembling, writing rows. Each side runs in its own fresh run directory every
time (nothing carried over), the base from a `git worktree` of COMMIT on PYTHONPATH with the same interpreter and
packages. The rows of both sides must be the same (question, config, prediction, score), else the script fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import log, machine, md_table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from reader_servers import Stub, closest_line  # noqa: E402  (the tests' stand-in reader: one copy of it)


def eval_command(dataset: Path, out: Path, limit: int, reader_url: str) -> list[str]:
    return [sys.executable, "-m", "lcrag.cli", "eval", "--dataset", str(dataset), "--out", str(out),
            "--strategies", "rag", "--retriever", "dense", "-k", "3,5,10", "--limit", str(limit),
            "--llm", "openai:stub", "--base-url", reader_url, "--context-window", "8192"]


def run_side(src: Path, command: list[str], cache: Path) -> float:
    env = os.environ | {"PYTHONPATH": str(src), "LCRAG_CACHE_DIR": str(cache)}
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{src}: lcrag eval failed: {done.stderr[-2000:]}")
    return seconds


def rows(out: Path) -> list[tuple]:
    found = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    return sorted((r["item_id"], r["config"], r["prediction"], r["score"]) for r in found)


def worktree(commit: str, where: Path) -> Path:
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(where), commit], check=True,
                   capture_output=True)
    return where / "src"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", type=Path, required=True, help="an L-Eval JSONL file")
    parser.add_argument("--base", required=True, help="the commit to compare with")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.base = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.base], check=True,
                               capture_output=True, text=True).stdout.strip()  # a name that stays true
    reader_url = Stub(answer=closest_line).url
    with tempfile.TemporaryDirectory(prefix="lcrag-bench-eval-") as tmp:
        work = Path(tmp)
        sides = {"base": worktree(args.base, work / "base"), "new": REPO / "src"}
        times: dict[str, list[float]] = {side: [] for side in sides}
        results: dict[str, list[tuple]] = {}
        try:
            for repeat in range(args.repeats):
                for side in (sides if repeat % 2 == 0 else reversed(list(sides))):  # ABBA: drift hits both
                    out = work / f"{side}-{repeat}"
                    seconds = run_side(sides[side], eval_command(args.dataset, out, args.limit, reader_url),
                                       work / f"cache-{side}-{repeat}")
                    times[side].append(seconds)
                    results[side] = rows(out)
                    log(f"{side} run {repeat + 1}: {seconds:.1f} s, {len(results[side])} rows")
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(work / "base")],
                           capture_output=True)
    report = render(args, times, results)
    print(report)
    if args.out:
        args.out.write_text(report, encoding="utf-8")
    sys.exit(0 if results["base"] == results["new"] else 1)


def render(args, times: dict[str, list[float]], results: dict[str, list[tuple]]) -> str:
    median = {side: statistics.median(t) for side, t in times.items()}
    same = results["base"] == results["new"]
    table = md_table(["side", "runs (s)", "median (s)", "rows", "vs base"],
                     [[side, ", ".join(f"{t:.1f}" for t in times[side]), f"{median[side]:.1f}", len(results[side]),
                       f"{median[side] / median['base']:.2f}×"] for side in times])
    command = (f"python benchmarks/bench_eval_leval.py --dataset {args.dataset} --base {args.base} --limit "
               f"{args.limit} --repeats {args.repeats}" + (f" --out {args.out}" if args.out else ""))
    return "\n".join([
        "# Evaluation harness on L-Eval: dense retriever, k in {3, 5, 10}", "",
        f"Command: `{command}`  ", f"Machine: {machine()}", "",
        table, "",
        f"Rows identical between base and new (question, config, prediction, score): **{'yes' if same else 'NO'}**.",
        "",
        "The reader is a stand-in that answers at once (tests/reader_servers.py): these are lcrag's own seconds "
        "around the reader (dataset, chunking, embedding with the bundled MiniLM, retrieval, assembly, rows), not a "
        "measure of answers; with a real reader its calls dominate every row and this time is what is left over.", "",
    ])


if __name__ == "__main__":
    main()
