#!/usr/bin/env bash
# PassKey accuracy of LC and RAG (benchmarks/results/passkey.md): ∞Bench's PassKey and the Self-Route paper's two
# variants, four haystack lengths (2K-128K reader tokens), two needle depths, bundled SmolLM2 reader (8K window:
# longer haystacks are cut in the middle for LC), RAG with BM25 and dense retrieval, top-5 300-word chunks.
# Resumable: run it again after an interruption. Usage: bash benchmarks/run_eval_passkey.sh
set -euo pipefail
out=benchmarks/results/eval_passkey
lengths=${LENGTHS:-2048,8192,32768,131072}
# the generated haystacks are data, not results: kept out of git (.gitignore), regenerated identically (seeded)
[ -f "$out/data/synthetic_two_passkeys.jsonl" ] || lcrag passkey "$out/data" --lengths "$lengths" --depths 0.25,0.75
lcrag eval --dataset "$out/data" --out "$out/run" --strategies lc,rag --retriever bm25,dense -k 5
lcrag report "$out/run" > /dev/null
python benchmarks/summarise_passkey.py "$out/run" --out benchmarks/results/passkey.md
