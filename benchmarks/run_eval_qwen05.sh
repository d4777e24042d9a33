#!/usr/bin/env bash
# The recorded evaluation run of benchmarks/results/eval_qwen05 (Qwen2.5-Coder-0.5B-Instruct, 8K window, 2 CPU cores).
# Usage: bash benchmarks/fetch_qwen05.sh /tmp/models && bash benchmarks/run_eval_qwen05.sh ../shared/data /tmp/models
set -euo pipefail
data=${1:?path to ../shared/data}
models=${2:?directory holding qwen2.5-0.5b.gguf}
out=benchmarks/results/eval_qwen05
run() {  # name, dataset path, questions per file
  lcrag eval --dataset "$data/$2" --out "$out/$1" --strategies lc,rag,self-route,op-rag -k 5 --limit "$3" \
    --filter-closed-book --llm "$models/qwen2.5-0.5b.gguf" --context-window 8192
  lcrag report "$out/$1" > /dev/null
}
run hotpotqa hotpotqa/hotpot_dev_distractor.jsonl.gz 10
run leval leval 1
