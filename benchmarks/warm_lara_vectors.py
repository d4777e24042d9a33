"""Embed LaRA's recorded answers and gold answers for the offline scorer in batches, into lcrag's query-vector cache,
before `lcrag eval` replays the readers (benchmarks/run_eval_lara.sh) or route_lara.py re-scores them.

The scorer embeds one answer at a time as rows are written (MiniLM per call: the largest share of a replayed
reader's eval time); the cache is keyed by the text, so embedding the same texts here in batches first leaves the
eval only cache reads. Nothing else changes: the scores are the ones the eval would compute.

    python benchmarks/warm_lara_vectors.py ../shared/data/lara [READER ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from lcrag.evaluation.freeform import FreeformScorer, canonical

BATCH = 16  # the query cache keeps batches up to its MAX_QUERIES


def texts_of(predictions: Path) -> set[str]:
    """Every (answer, gold) text the scorer embeds for one reader's recordings, in its canonical form."""
    texts: set[str] = set()
    for path in sorted(predictions.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            answer, gold = record.get("prediction"), record.get("ground_truth")
            if not isinstance(answer, str) or not answer.strip() or not isinstance(gold, str):
                continue
            for said in {answer, answer.strip()}:
                _, gold_text, answer_text = canonical(record.get("question") or "", gold, said)
                texts.update((gold_text, answer_text))
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("lara", type=Path)
    parser.add_argument("readers", nargs="*")
    args = parser.parse_args()
    readers = args.readers or sorted(p.name for p in (args.lara / "predictions").iterdir())
    embedder = FreeformScorer().embedder
    started = time.perf_counter()
    for reader in readers:
        texts = sorted(texts_of(args.lara / "predictions" / reader))
        for i in range(0, len(texts), BATCH):
            embedder.embed(texts[i:i + BATCH])
        print(f"{reader}: {len(texts)} texts, {time.perf_counter() - started:.0f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
