#!/usr/bin/env bash
# The evaluation runs behind benchmarks/results/routing.md: LC and Self-Route (whose first step is RAG with the
# option to decline, recorded with its answer, score and decline probability) on the same questions, with
# Qwen2.5-Coder-0.5B-Instruct (8K window) on 2 CPU cores. Mostly L-Eval (long documents, many questions per document,
# where LC's prefix cache and routing matter), then LongBench; runs resume, so re-running adds what is missing and a
# larger LIMIT adds questions.
# Usage: bash benchmarks/fetch_qwen05.sh /tmp/models && bash benchmarks/run_eval_routing.sh ../shared/data /tmp/models [LIMIT]
set -euo pipefail
data=${1:?path to ../shared/data}
models=${2:?directory holding qwen2.5-0.5b.gguf}
limit=${3:-12}
out=benchmarks/results/eval_routing
run() {  # name, dataset path, questions per file
  lcrag eval --dataset "$data/$2" --out "$out/$1" --strategies lc,self-route -k 5 --limit "$3" \
    --llm "$models/qwen2.5-0.5b.gguf" --context-window 8192
}
run leval leval "$limit"
run longbench longbench "$limit"
