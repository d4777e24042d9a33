"""MCP tool-call overhead: `ask` (and `search`) through `lcrag mcp` over stdio, against the same call made in-process
on the same engine, both over a cached answer (the reader's completion cache holds it: no generation is timed).

The baseline is `Answering.ask` / `Answering.search` called directly in this process; the MCP figure is a
`call_tool` round trip from the official client to an `lcrag mcp` process sharing the cache directory. Both run
alternately in the same rounds, so a load that comes and goes hits them alike.

    python benchmarks/bench_mcp.py --document ../shared/data/texts/alice29.txt --calls 60 --out benchmarks/results/mcp.md
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import log, machine, md_table  # noqa: E402

QUESTION = "Who does Alice follow down the rabbit hole?"
OPTIONS = {"strategy": "rag", "k": 3}


def engine(cache: Path):
    from lcrag.pipeline.pipeline import Settings
    from lcrag.service.answering import Answering

    return Answering(Settings(cache_dir=cache), cache / "collections")


def collection(cache: Path, document: Path) -> None:
    files = cache / "collections" / "book" / "files"
    files.mkdir(parents=True, exist_ok=True)
    shutil.copy(document, files / document.name)


async def timed_mcp(cache: Path, answering, calls: int) -> dict[str, list[float]]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "lcrag.cli", "mcp", "--cache-dir", str(cache)])
    times: dict[str, list[float]] = {k: [] for k in ("direct ask", "mcp ask", "direct search", "mcp search")}
    ask_args = {"question": QUESTION, "collection": "book", **OPTIONS}
    search_args = {"query": QUESTION, "collection": "book", "k": 5}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for warm in range(2):  # fills the completion cache and both processes' indexes
            await session.call_tool("ask", ask_args)
            await session.call_tool("search", search_args)
            answering.ask("book", QUESTION, dict(OPTIONS))
            answering.search("book", QUESTION, 5)
        for _ in range(calls):
            times["direct ask"].append(_clock(lambda: answering.ask("book", QUESTION, dict(OPTIONS))))
            started = time.perf_counter()
            result = await session.call_tool("ask", ask_args)
            times["mcp ask"].append(time.perf_counter() - started)
            wire = result.model_dump(mode="json", by_alias=True)  # the protocol's names, with a 1.x or 2.x client
            assert not wire["isError"] and wire["structuredContent"]["from_cache"], result.content
            times["direct search"].append(_clock(lambda: answering.search("book", QUESTION, 5)))
            started = time.perf_counter()
            await session.call_tool("search", search_args)
            times["mcp search"].append(time.perf_counter() - started)
    return times


def _clock(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q * 100) - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--document", type=Path, required=True)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="lcrag-bench-mcp-"))
    collection(cache, args.document)
    answering = engine(cache)
    try:
        times = asyncio.run(timed_mcp(cache, answering, args.calls))
    finally:
        answering.close()
    rows = []
    for tool in ("ask", "search"):
        direct, mcp = times[f"direct {tool}"], times[f"mcp {tool}"]
        for name, values in ((f"direct {tool} (in-process)", direct), (f"mcp {tool} (stdio)", mcp)):
            rows.append([name, len(values), f"{statistics.median(values) * 1000:.1f}",
                         f"{quantile(values, 0.9) * 1000:.1f}", ""])
        overhead = statistics.median(mcp) - statistics.median(direct)
        rows[-1][-1] = f"{overhead * 1000:+.1f} ms ({statistics.median(mcp) / statistics.median(direct):.2f}×)"
    table = md_table(["call", "calls", "p50 ms", "p90 ms", "MCP overhead at p50 (ratio)"], rows)
    text = "\n".join(["# MCP tool-call overhead", "", f"`python benchmarks/bench_mcp.py --document {args.document} "
                      f"--calls {args.calls} --out {args.out}`", "", f"Machine: {machine()}.", "", table, ""])
    args.out.write_text(text)
    print(text)
    log(f"written {args.out}")


if __name__ == "__main__":
    main()
