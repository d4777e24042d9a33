"""PassKey accuracy table from a run of benchmarks/run_eval_passkey.sh.

    python benchmarks/summarise_passkey.py benchmarks/results/eval_passkey/run --out benchmarks/results/passkey.md
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, md_table  # noqa: E402

from lcrag.evaluation.report import load_rows, session_times  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = [r for r in load_rows(args.run) if r["strategy"] in ("lc", "rag")]
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
    header = ["variant", "config", *(f"{n // 1024}K" for n in lengths), "all"]
    body = []
    for variant in variants:
        for config in configs:
            line = [variant, config]
            allv = []
            for n in lengths:
                v = cells.get((variant, n, config), [])
                allv += v
                line.append(f"{100 * sum(v) / len(v):.0f} ({len(v)})" if v else "–")
            line.append(f"**{100 * sum(allv) / len(allv):.1f}**" if allv else "–")
            body.append(line)
    tok_header = ["config", *(f"{n // 1024}K" for n in lengths)]
    tok_body = [[c, *(f"{sum(tokens[(v, n, c)] for v in variants) / max(1, sum(len(tokens[(v, n, c)]) for v in variants)):.0f}"
                      for n in lengths)] for c in configs]
    wall, _, _ = session_times(args.run)
    text = f"""# PassKey: LC vs RAG, three variants, four lengths

Command: `bash benchmarks/run_eval_passkey.sh` (then `python benchmarks/summarise_passkey.py {args.run} --out {args.out}`).
Machine: {machine()}. Reader: bundled SmolLM2-135M-Instruct, 8K window (LC cuts longer haystacks in the middle,
LongBench's rule, so a needle in the middle of a 32K or 128K haystack is not in LC's prompt); RAG: top-5
300-word chunks, BM25 or MiniLM dense. Prompt: ∞Bench's passkey template. Scoring: ∞Bench's passkey scorer (first
integer in the answer equals the key) for `passkey` and `special-token`; `first_second` (first "first"/"second" in
the answer equals the label) for `two-passkeys`. Accuracy %, (questions) per cell: needle depths 0.25 and 0.75.
Wall time of sessions that called the reader: {wall / 60:.0f} min.

Variants (Self-Route paper §5.4): `passkey` asks ∞Bench's "What is the pass key?"; `special-token` asks "What is the
special token hidden inside the texts?" about the same needle; `two-passkeys` hides two keys and asks "Which passkey
is larger? First or second?".

{md_table(header, body)}

Mean prompt tokens per question (the baseline for cost: LC):

{md_table(tok_header, tok_body)}
"""
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
