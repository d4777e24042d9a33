"""RAPTOR build cost on a 30K-word document with the default reader (TARGETS: <= 10 min, summary tokens reported).

    python benchmarks/bench_raptor_build.py --text ../shared/data/texts/lcet10.txt --words 30000 \
        --out benchmarks/results/raptor_build.md

Baselines measured in the same run on the same text: (a) the dense index of the same document (300-word chunks,
MiniLM), the cheapest index lcrag builds; (b) one LC read of the document, i.e. the document's own token count
(summary prompt tokens are reported as a multiple of it).
"""

from __future__ import annotations

import argparse
import logging
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import log, machine, md_table  # noqa: E402

from lcrag import Pipeline, Settings  # noqa: E402
from lcrag.core.tokenization import count_tokens  # noqa: E402
from lcrag.core.types import Document  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", type=Path, required=True)
    parser.add_argument("--words", type=int, default=30000)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--llm", default="smollm2")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    words = args.text.read_text(encoding="utf-8", errors="replace").split(" ")
    # Cut at the --words-th whitespace-separated word, keeping the text's own line breaks.
    text, count = [], 0
    for piece in words:
        count += len(piece.split())
        if count > args.words:
            break
        text.append(piece)
    document = Document(" ".join(text), id=args.text.name)
    n_words = len(document.text.split())
    with tempfile.TemporaryDirectory() as cache:
        pipeline = Pipeline(Settings(llm=args.llm, cache=False, cache_dir=Path(cache)))
        try:
            doc_tokens = count_tokens(pipeline.reader.tokenizer, document.text)
            log(f"{n_words} words, {doc_tokens} reader tokens")
            started = time.perf_counter()
            pipeline.index(document, "words:300").retriever("dense")
            dense_s = time.perf_counter() - started
            log(f"dense index {dense_s:.1f} s")
            started = time.perf_counter()
            raptor = pipeline.index(document, "words:300").retriever("raptor")
            raptor_s = time.perf_counter() - started
        finally:
            pipeline.close()
    tree = raptor.trees[0]
    cost = tree.cost
    layers = [sum(1 for n in tree.nodes if n.layer == i) for i in range(tree.layers + 1)]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    header = ["measure", "value"]
    body = [
        ["document", f"{args.text.name}, first {n_words:,} words = {doc_tokens:,} reader tokens"],
        ["RAPTOR build, wall", f"**{raptor_s / 60:.1f} min** ({raptor_s:.0f} s; target ≤ 10 min)"],
        ["of which summary calls (reader time)", f"{cost.seconds:.0f} s"],
        ["nodes per layer (leaves first)", " / ".join(map(str, layers))],
        ["summary calls", cost.calls],
        ["summary tokens, prompt + completion", f"{cost.prompt_tokens:,} + {cost.completion_tokens:,}"],
        ["summary prompt tokens / document tokens (one LC read)", f"{cost.prompt_tokens / doc_tokens:.2f}×"],
        ["baseline: dense index of the same text (300-word chunks, MiniLM)", f"{dense_s:.1f} s"],
        ["RAPTOR build / dense index", f"{raptor_s / dense_s:.0f}×"],
        ["peak RSS of the process (reader runs in-process)", f"{peak:.0f} MiB"],
    ]
    text_md = f"""# RAPTOR build cost

Command: `python benchmarks/bench_raptor_build.py --text {args.text} --words {args.words} --out {args.out}`
Machine: {machine()}. Reader: `{args.llm}` (bundled SmolLM2-135M-Instruct unless named), summaries of at most 100
tokens with RAPTOR's prompt; embedder: bundled MiniLM; clustering: scikit-learn PCA (10 dims) + Gaussian mixture
(BIC over 1–49 components), threshold 0.1, clusters over 3,500 tokens re-clustered.

{md_table(header, body)}
"""
    args.out.write_text(text_md, encoding="utf-8")
    print(text_md)


if __name__ == "__main__":
    main()
