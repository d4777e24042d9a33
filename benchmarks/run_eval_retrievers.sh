#!/usr/bin/env bash
# The retriever comparison of benchmarks/results/retrievers.md (LC-vs-RAG study, Table 5 layout): LC and RAG with
# each of the five retrievers, every retriever given the same 2,000-token retrieved budget, bundled SmolLM2 reader,
# bundled MiniLM embedder, 2 CPU cores. Resumable: run it again after an interruption.
# Usage: bash benchmarks/run_eval_retrievers.sh ../shared/data
# Questions: the first 2 of each L-Eval task (7 documents) and the first of each LongBench task (7 documents); sized
# so that the whole run (RAPTOR and tree summaries of 14 documents, 105 RAG calls) fits a 2-core session.
# When benchmarks/results/eval_smollm2 holds a completion cache from its own run (same reader, same prompts), it is
# copied first, so LC and closed-book answers already computed there are not asked again (they are identical).
set -euo pipefail
data=${1:?path to ../shared/data}
out=benchmarks/results/eval_retrievers
run() {  # name, dataset path, questions per file
  mkdir -p "$out/$1/cache"
  if [ -f "benchmarks/results/eval_smollm2/$1/cache/completions.sqlite" ] && [ ! -f "$out/$1/cache/completions.sqlite" ]; then
    cp "benchmarks/results/eval_smollm2/$1/cache/completions.sqlite" "$out/$1/cache/"
  fi
  lcrag eval --dataset "$data/$2" --out "$out/$1" --strategies lc,rag \
    --retriever bm25,dense,sentence-window,tree,raptor -k "" --budget 2000 --limit "$3" --filter-closed-book
  lcrag report "$out/$1" > /dev/null
}
run leval leval 2
run longbench longbench 1
python benchmarks/summarise_retrievers.py "$out/leval" "$out/longbench" --out benchmarks/results/retrievers.md
