#!/usr/bin/env bash
# Writes the routing tables of benchmarks/results/routing.md from the recorded runs (see run_eval_routing*.sh):
# leave-one-dataset-out learned routers, every policy priced as gpt-4o-mini, cascades against the two-way routers at
# equal cost, and the frontier plot.
# Usage: bash benchmarks/report_routing.sh > /tmp/routing_tables.md
set -euo pipefail
runs=benchmarks/results/eval_routing
all=()
for name in leval longbench hotpotqa musique; do
  [ -s "$runs/$name/rows.jsonl" ] && all+=("$runs/$name")
done
wide=()
[ -s "$runs/leval_wide/rows.jsonl" ] && wide=(--wide "$runs/leval_wide")
echo "### Qwen2.5-Coder-0.5B-Instruct (8K window): every dataset, leave-one-dataset-out routers"
echo
lcrag route eval "${all[@]}" --price-as gpt-4o-mini --plot benchmarks/results/routing_frontier.png "${wide[@]}"
echo
echo "### Qwen2.5-Coder-0.5B-Instruct: L-Eval only (many questions per document: where the prefix cache pays)"
echo
lcrag route eval $runs/leval --price-as gpt-4o-mini
if [ -s benchmarks/results/eval_routing_smollm2/longbench/rows.jsonl ]; then
  echo
  echo "### Bundled SmolLM2-135M on the shared LongBench set"
  echo
  lcrag route eval benchmarks/results/eval_routing_smollm2/longbench --price-as gpt-4o-mini
fi
