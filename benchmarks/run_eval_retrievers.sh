#!/usr/bin/env bash
# The retriever comparison of benchmarks/results/retrievers.md (LC-vs-RAG study, Table 5 layout): LC and RAG with
# each of the five retrievers, every retriever given the same 2,000-token retrieved budget, bundled SmolLM2 reader,
# bundled MiniLM embedder, 2 CPU cores. Resumable: run it again after an interruption.
# Usage: bash benchmarks/run_eval_retrievers.sh ../shared/data [questions per file]
# When benchmarks/results/eval_smollm2 holds a completion cache from its own run (same reader, same prompts), it is
# copied first, so LC and closed-book answers already computed there are not asked again (they are identical).
set -euo pipefail
data=${1:?path to ../shared/data}
per_file=${2:-2}
out=benchmarks/results/eval_retrievers
run() {  # name, dataset path
  mkdir -p "$out/$1/cache"
  if [ -f "benchmarks/results/eval_smollm2/$1/cache/completions.sqlite" ] && [ ! -f "$out/$1/cache/completions.sqlite" ]; then
    cp "benchmarks/results/eval_smollm2/$1/cache/completions.sqlite" "$out/$1/cache/"
  fi
  lcrag eval --dataset "$data/$2" --out "$out/$1" --strategies lc,rag \
    --retriever bm25,dense,sentence-window,tree,raptor -k "" --budget 2000 --limit "$per_file" --filter-closed-book
  lcrag report "$out/$1" > /dev/null
}
run leval leval
run longbench longbench
python benchmarks/summarise_retrievers.py "$out/leval" "$out/longbench" --out benchmarks/results/retrievers.md
