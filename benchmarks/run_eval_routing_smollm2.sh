#!/usr/bin/env bash
# The bundled reader (SmolLM2-135M, its own 8K window) on the shared LongBench set with LC and Self-Route rows, for
# benchmarks/results/routing.md's check that a decline-probability threshold routes with it. Resumable.
# Usage: bash benchmarks/run_eval_routing_smollm2.sh ../shared/data
set -euo pipefail
data=${1:?path to ../shared/data}
lcrag eval --dataset "$data/longbench" --out benchmarks/results/eval_routing_smollm2/longbench \
  --strategies lc,self-route -k 5 --limit 13
