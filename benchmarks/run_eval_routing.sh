#!/usr/bin/env bash
# The evaluation runs behind benchmarks/results/routing.md: LC and Self-Route (whose first step is RAG with the
# option to decline, recorded with its answer, score and decline probability) on the same questions, with
# Qwen2.5-Coder-0.5B-Instruct (8K window) on 2 CPU cores. Mostly L-Eval (long documents, many questions per document,
# where LC's prefix cache and routing matter), then a minority of short-context multi-hop questions (HotpotQA
# distractor, MuSiQue), then LongBench; runs resume, so re-running adds what is missing and a larger LIMIT adds
# questions. The "wide" run records the cascade's middle step (Self-Route's RAG step over 3x the chunks, k=15) on
# the first question of each L-Eval task, so cascades can be compared with the two-way routers at equal cost.
# The committed runs stopped where the session's time did (L-Eval at 190 of the 252 questions LIMIT=36 asks for,
# HotpotQA and LongBench part-way, MuSiQue not started): re-running resumes every one of them.
# Usage: bash benchmarks/fetch_qwen05.sh /tmp/models && bash benchmarks/run_eval_routing.sh ../shared/data /tmp/models [LIMIT]
set -euo pipefail
data=${1:?path to ../shared/data}
models=${2:?directory holding qwen2.5-0.5b.gguf}
limit=${3:-12}
out=benchmarks/results/eval_routing
run() {  # name, dataset path, questions per file, [strategies, k]
  lcrag eval --dataset "$data/$2" --out "$out/$1" --strategies "${4:-lc,self-route}" -k "${5:-5}" --limit "$3" \
    --llm "$models/qwen2.5-0.5b.gguf" --context-window 8192
}
run leval leval "$limit"
run leval_wide leval 1 self-route 15
run hotpotqa hotpotqa/hotpot_dev_distractor.jsonl.gz 105
run longbench longbench 12
run musique musique/musique_train100.json 30
