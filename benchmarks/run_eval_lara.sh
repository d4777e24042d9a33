#!/usr/bin/env bash
# LaRA's recorded readers replayed through `lcrag eval`: one run directory per reader, LC and Self-Route rows for
# every question, scored by the offline LaRA scorer; two readers at a time (2 cores). Resumable: run it again.
#   benchmarks/run_eval_lara.sh ../shared/data/lara /work/runs/lara [READER ...]
# The runs hold LaRA's predictions: keep them out of the repository. Chunk indexes are shared between the readers'
# runs (the documents and lcrag's retrieval are the same for every reader).
set -euo pipefail
LARA=${1:?usage: run_eval_lara.sh LARA_DIR RUNS_DIR [READER ...]}
RUNS=${2:?usage: run_eval_lara.sh LARA_DIR RUNS_DIR [READER ...]}
shift 2
READERS=${*:-$(ls "$LARA/predictions")}
mkdir -p "$RUNS/.indexes"
run() {
  local reader=$1
  mkdir -p "$RUNS/$reader/cache"
  [ -e "$RUNS/$reader/cache/indexes" ] || ln -s ../../.indexes "$RUNS/$reader/cache/indexes"
  lcrag eval --dataset "$LARA" --llm "replay:$LARA/predictions/$reader" --strategies lc,self-route \
    --chunking sentence-splitter:600:100 -k 5 --out "$RUNS/$reader" > "$RUNS/$reader.log" 2>&1 \
    && echo "done $reader" || echo "FAILED $reader (see $RUNS/$reader.log)"
}
export -f run
export LARA RUNS
printf '%s\n' $READERS | xargs -P 2 -I{} bash -c 'run {}'
