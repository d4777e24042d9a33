#!/usr/bin/env bash
# The retriever comparison of benchmarks/results/retrievers*.md (LC-vs-RAG study, Table 5 layout): LC and RAG with
# each of the five retrievers, every retriever given the same 2,000-token retrieved budget, bundled MiniLM embedder,
# 2 CPU cores. Resumable: run it again after an interruption.
# Usage: bash benchmarks/run_eval_retrievers.sh ../shared/data [READER.gguf]
#   default reader: the bundled SmolLM2-135M (it also writes the summaries) -> retrievers.md;
#   READER.gguf, e.g. bash benchmarks/fetch_qwen05.sh /tmp/models && bash benchmarks/run_eval_retrievers.sh \
#   ../shared/data /tmp/models/qwen2.5-0.5b.gguf -> retrievers_qwen2.5-0.5b.md: that reader answers (8K window) while
#   SmolLM2 keeps writing the RAPTOR and tree-index summaries (--summary-llm smollm2), as the RAPTOR paper pairs one
#   summarizer with many readers; the SmolLM2 run's indexes are copied first, so its trees are reused, not rebuilt.
# Questions: the first 2 of each L-Eval task (7 documents) and the first of each LongBench task (7 documents); sized
# so that the whole run (RAPTOR and tree summaries of 14 documents, 105 RAG calls) fits a 2-core session.
# When benchmarks/results/eval_smollm2 holds a completion cache from its own run (same reader, same prompts), it is
# copied first, so LC and closed-book answers already computed there are not asked again (they are identical).
set -euo pipefail
data=${1:?path to ../shared/data}
reader=${2:-}
base=benchmarks/results/eval_retrievers
if [ -n "$reader" ]; then
  name=$(basename "$reader" .gguf); out="${base}_$name"; summary="benchmarks/results/retrievers_$name.md"
  llm=(--llm "$reader" --context-window 8192 --summary-llm smollm2)
else
  out=$base; summary=benchmarks/results/retrievers.md; llm=()
fi
run() {  # name, dataset path, questions per file
  mkdir -p "$out/$1/cache"
  if [ -n "$reader" ]; then
    # The summary indexes SmolLM2 built for the default run (same documents, chunking, embedder and summarizer).
    for part in indexes sentences raptor; do
      if [ -d "$base/$1/cache/$part" ] && [ ! -d "$out/$1/cache/$part" ]; then cp -r "$base/$1/cache/$part" "$out/$1/cache/"; fi
    done
  elif [ -f "benchmarks/results/eval_smollm2/$1/cache/completions.sqlite" ] && [ ! -f "$out/$1/cache/completions.sqlite" ]; then
    cp "benchmarks/results/eval_smollm2/$1/cache/completions.sqlite" "$out/$1/cache/"
  fi
  lcrag eval --dataset "$data/$2" --out "$out/$1" --strategies lc,rag \
    --retriever bm25,dense,sentence-window,tree,raptor -k "" --budget 2000 --limit "$3" --filter-closed-book "${llm[@]}"
  lcrag report "$out/$1" > /dev/null
}
run leval leval 2
run longbench longbench 1
python benchmarks/summarise_retrievers.py "$out/leval" "$out/longbench" --out "$summary"
