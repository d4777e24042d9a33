#!/usr/bin/env bash
# The recorded evaluation run of benchmarks/results/eval_smollm2 (bundled SmolLM2-135M reader, 2 CPU cores).
# Resumable: run it again after an interruption. Usage: bash benchmarks/run_eval_smollm2.sh ../shared/data
set -euo pipefail
data=${1:?path to ../shared/data}
out=benchmarks/results/eval_smollm2
run() {  # name, dataset path, questions per file
  lcrag eval --dataset "$data/$2" --out "$out/$1" --strategies lc,rag,self-route,op-rag -k 5 --limit "$3" --filter-closed-book
  lcrag report "$out/$1" > /dev/null
}
run hotpotqa hotpotqa/hotpot_dev_distractor.jsonl.gz 10
run leval leval 2
run longbench longbench 13
