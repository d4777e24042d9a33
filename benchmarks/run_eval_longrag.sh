#!/usr/bin/env bash
# End-to-end LongRAG run of benchmarks/results/eval_longrag (bundled SmolLM2-135M reader, 2 CPU cores): HotpotQA dev
# questions asked against the whole 66K-paragraph corpus, passages vs grouped units at the same context budget.
# Needs the index of benchmarks/bench_corpus_recall.py (its docstring has the build command). Resumable.
# Usage: bash benchmarks/run_eval_longrag.sh ../shared/data /tmp/corpus/hotpot [questions]
set -euo pipefail
data=${1:?path to ../shared/data}
index=${2:?corpus index directory}
limit=${3:-20}
out=benchmarks/results/eval_longrag
lcrag eval --dataset "$data/hotpotqa/hotpot_dev_distractor.jsonl.gz" --corpus "$index" --strategies longrag \
  --unit passage,grouped --retriever dense --budget 3072 -k 1 --limit "$limit" --out "$out"
lcrag report "$out" > /dev/null
