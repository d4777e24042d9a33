"""PassKey accuracy table from a run of benchmarks/run_eval_passkey.sh.

    python benchmarks/summarise_passkey.py benchmarks/results/eval_passkey/run --out benchmarks/results/passkey.md
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, md_table

from lcrag.evaluation.report import load_rows, session_times


def run_tables(run: Path) -> tuple[str, str]:
    """(accuracy table, mean prompt tokens table) of one run directory."""
    rows = [r for r in load_rows(run) if r["strategy"] in ("lc", "rag")]
    # item ids are "<variant>-<length>-d<depth>"
    cells: dict[tuple[str, int, str], list[float]] = defaultdict(list)
    tokens: dict[tuple[str, int, str], list[int]] = defaultdict(list)
    for r in rows:
        variant, length, _ = r["item_id"].rsplit("-", 2)
        key = (variant, int(length), r["config"])
        cells[key].append(r["score"])
        tokens[key].append(r["prompt_tokens"])
    variants = sorted({k[0] for k in cells}, key=["passkey", "special-token", "two-passkeys"].index)
    lengths = sorted({k[1] for k in cells})
    configs = sorted({k[2] for k in cells}, key=lambda c: (c != "lc", c))
    label = {c: c.replace("|", " · ") for c in configs}
    header = ["variant", "config", *(f"{n // 1024}K" for n in lengths), "all"]
    body = []
    for variant in variants:
        for config in configs:
            line = [variant, label[config]]
            allv = []
            for n in lengths:
                v = cells.get((variant, n, config), [])
                allv += v
                line.append(f"{100 * sum(v) / len(v):.0f} ({len(v)})" if v else "–")
            line.append(f"**{100 * sum(allv) / len(allv):.1f}**" if allv else "–")
            body.append(line)

    def mean_tokens(n: int, config: str) -> str:
        counts = [t for v in variants for t in tokens[(v, n, config)]]
        return f"{sum(counts) / len(counts):.0f}" if counts else "–"

    tok_header = ["config", *(f"{n // 1024}K" for n in lengths)]
    tok_body = [[label[c], *(mean_tokens(n, c) for n in lengths)] for c in configs]
    return md_table(header, body), md_table(tok_header, tok_body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    sections = []
    for run in args.runs:
        manifest = json.loads((run / "manifest.json").read_text())
        accuracy, tokens = run_tables(run)
        wall, _, _ = session_times(run)
        sections.append(f"""## Reader `{manifest["reader"]}` ({run.name}; {wall / 60:.0f} min of sessions that called the reader)

Accuracy %, (questions) per cell:

{accuracy}

Mean prompt tokens per question (the baseline for cost: LC):

{tokens}
""")
    text = f"""# PassKey: LC vs RAG, three variants, four lengths

Commands: `bash benchmarks/run_eval_passkey.sh` (bundled SmolLM2-135M) and
`bash benchmarks/run_eval_passkey.sh /tmp/models/qwen2.5-0.5b.gguf` (Qwen2.5-Coder-0.5B-Instruct from
`benchmarks/fetch_qwen05.sh`), each ending with
`python benchmarks/summarise_passkey.py {' '.join(str(r) for r in args.runs)} --out {args.out}`.
Machine: {machine()}. Reader window 8K for both readers (LC cuts longer haystacks in the middle, LongBench's rule,
so a needle at depth 0.25 or 0.75 of a 32K or 128K haystack is not in LC's prompt); RAG: top-5 300-word chunks,
BM25 or MiniLM dense. Haystack lengths in SmolLM2 tokens, needle depths 0.25 and 0.75. Prompt: ∞Bench's passkey
template. Scoring: ∞Bench's passkey scorer (first integer in the answer equals the key) for `passkey` and
`special-token`; `first_second` (first "first"/"second" in the answer equals the label) for `two-passkeys`.

Variants (Self-Route paper §5.4): `passkey` asks ∞Bench's "What is the pass key?"; `special-token` asks "What is the
special token hidden inside the texts?" about the same needle; `two-passkeys` hides two keys and asks "Which passkey
is larger? First or second?".

{chr(10).join(sections)}"""
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
