#!/usr/bin/env bash
# PassKey accuracy of LC and RAG (benchmarks/results/passkey.md): ∞Bench's PassKey and the Self-Route paper's two
# variants, four haystack lengths (2K-128K reader tokens), two needle depths, an 8K reader window (longer haystacks
# are cut in the middle for LC), RAG with BM25 and dense retrieval, top-5 300-word chunks.
# Resumable: run it again after an interruption.
# Usage: bash benchmarks/run_eval_passkey.sh [READER.gguf]   (default: the bundled SmolLM2-135M)
#   e.g. bash benchmarks/fetch_qwen05.sh /tmp/models && bash benchmarks/run_eval_passkey.sh /tmp/models/qwen2.5-0.5b.gguf
set -euo pipefail
out=benchmarks/results/eval_passkey
lengths=${LENGTHS:-2048,8192,32768,131072}
reader=${1:-}
if [ -n "$reader" ]; then
  run="$out/run_$(basename "$reader" .gguf)"; llm=(--llm "$reader" --context-window 8192)
else
  run="$out/run"; llm=()
fi
# The generated haystacks are data, not results: kept out of git (.gitignore), regenerated identically (seeded).
# Lengths are counted with the bundled SmolLM2 tokenizer, so every reader gets the same haystacks.
[ -f "$out/data/synthetic_two_passkeys.jsonl" ] || lcrag passkey "$out/data" --lengths "$lengths" --depths 0.25,0.75
lcrag eval --dataset "$out/data" --out "$run" --strategies lc,rag --retriever bm25,dense -k 5 "${llm[@]}"
lcrag report "$run" > /dev/null
python benchmarks/summarise_passkey.py "$out"/run* --out benchmarks/results/passkey.md
