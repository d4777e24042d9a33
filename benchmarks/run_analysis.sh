#!/usr/bin/env bash
# Failure analysis (Self-Route §5.2) and LC-only vs RAG-only question analysis (LC-vs-RAG study §5.3-5.4) of the
# recorded runs, collected in benchmarks/results/analysis.md. Needs the runs of run_eval_smollm2.sh,
# run_eval_qwen05.sh (with its reader at the path its manifest names) and run_eval_retrievers.sh.
# Usage: bash benchmarks/run_analysis.sh
set -euo pipefail
r=benchmarks/results
out=$r/analysis.md
{
  echo "# Failure and question analysis of the recorded runs"
  echo
  echo "Commands: \`bash benchmarks/run_analysis.sh\` runs each \`lcrag analyze\` command below and collects its output here."
  echo "Classifier for the failure reasons: the run's own reader (SmolLM2-135M or Qwen2.5-Coder-0.5B); the paper used Gemini-1.5-Pro."
  for run in eval_smollm2/longbench eval_smollm2/leval eval_smollm2/hotpotqa eval_qwen05/hotpotqa eval_qwen05/leval; do
    echo; echo "\`lcrag analyze failures $r/$run\`"; echo
    lcrag analyze failures "$r/$run" | sed 's/^# /## /'
  done
  for mode in "" "--loose"; do
    echo; echo "\`lcrag analyze questions $r/eval_retrievers/leval $r/eval_retrievers/longbench $mode\` (every retriever's RAG against LC)"; echo
    lcrag analyze questions "$r/eval_retrievers/leval" "$r/eval_retrievers/longbench" $mode | sed 's/^## /### /; s/^# /## /'
    echo; echo "\`lcrag analyze questions $r/eval_smollm2/hotpotqa $r/eval_smollm2/leval $r/eval_smollm2/longbench --rag-config 'rag|bm25|k5' $mode\`"; echo
    lcrag analyze questions "$r/eval_smollm2/hotpotqa" "$r/eval_smollm2/leval" "$r/eval_smollm2/longbench" --rag-config 'rag|bm25|k5' $mode | sed 's/^## /### /; s/^# /## /'
  done
} > "$out"
echo "written to $out"
