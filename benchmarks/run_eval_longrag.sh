#!/usr/bin/env bash
# End-to-end LongRAG runs of benchmarks/results/eval_longrag*: HotpotQA dev questions asked against the whole
# 66K-paragraph corpus, passages vs grouped units (top-1, and at the same 3,072-token context budget).
# Needs the index of benchmarks/bench_corpus_recall.py (its docstring has the build command). Resumable.
# Usage: bash benchmarks/run_eval_longrag.sh ../shared/data /tmp/corpus/hotpot [questions] [reader.gguf]
#   default reader: the bundled SmolLM2-135M -> eval_longrag; a GGUF path (e.g. Qwen2.5-0.5B from
#   benchmarks/fetch_qwen05.sh) -> eval_longrag_<file name>
set -euo pipefail
data=${1:?path to ../shared/data}
index=${2:?corpus index directory}
limit=${3:-20}
llm=${4:-smollm2}
out=benchmarks/results/eval_longrag
[ "$llm" != smollm2 ] && out="${out}_$(basename "$llm" .gguf)"
lcrag eval --dataset "$data/hotpotqa/hotpot_dev_distractor.jsonl.gz" --corpus "$index" --strategies longrag \
  --unit passage,grouped --retriever dense --budget 3072 -k 1 --limit "$limit" --llm "$llm" --out "$out"
lcrag report "$out" > /dev/null
