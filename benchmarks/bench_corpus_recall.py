"""LongRAG retrieval benchmark: answer recall and gold-document recall of passage, document and grouped units.

    lcrag corpus build ../shared/data/hotpotqa/wiki_paragraphs.jsonl.gz --out /tmp/corpus/hotpot \
        --unit passage,document,grouped --tokenizer smollm2
    python benchmarks/bench_corpus_recall.py --index /tmp/corpus/hotpot \
        --questions ../shared/data/hotpotqa/hotpot_dev_distractor.jsonl.gz --out benchmarks/results/corpus_recall.md

Questions come from the HotpotQA dev distractor file (its question, answer and supporting titles; its own
paragraphs are ignored: every question is asked against the whole 66K-paragraph corpus). For each unit kind and
scorer (dense MaxP, BM25):
  - answer recall@k: DPR has_answer (LongRAG's) on any of the top-k units;
  - gold-document recall@k: both supporting titles among the top-k units' documents (LongRAG's HotpotQA recall);
  - the same at equal token budgets: the best units, whole, while their reader tokens (SmolLM2's, counted at build)
    stay within the budget; with the mean units and tokens that makes.
Answer recall is decided per unit (an answer split across two units' boundary is not counted), as DPR does.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from common import log, machine, md_table

from lcrag.evaluation.datasets import load_dataset
from lcrag.evaluation.metrics import has_answer
from lcrag.retrieval.corpus import CorpusIndex
from lcrag.retrieval.embedders import make_embedder

KS = (1, 5, 20)
BUDGETS = (1024, 2048, 4096, 8192)
DEPTH = {"passage": 120, "document": 120, "grouped": 30}  # units fetched: enough to fill the largest budget


def evaluate(index: CorpusIndex, items, kind: str, scorer: str) -> dict:
    started = time.perf_counter()
    hits = index.search_many([i.question for i in items], kind, scorer, DEPTH[kind])
    search_s = time.perf_counter() - started
    tokens = index.unit_tokens(kind)
    units = index.units(kind)
    out = {f"answer@{k}": 0 for k in KS} | {f"gold@{k}": 0 for k in KS}
    per_budget = {b: {"answer": 0, "gold": 0, "units": 0, "tokens": 0} for b in BUDGETS}
    title_of: dict[int, str] = {}
    prefixes = []  # per question: (tokens, answer found, gold found) after each of the ranked units
    for item, ranked in zip(items, hits):
        ids = [h.unit for h in ranked]
        texts = index.unit_texts(kind, ids)
        has = [has_answer(t, item.answers) for t in texts]
        doc_lists = [units.unit_docs(u).tolist() for u in ids]
        missing = sorted({d for docs in doc_lists for d in docs if d not in title_of})
        for doc in index.store.get_many(missing):
            title_of[doc.idx] = doc.title
        gold = set(item.meta["supporting_titles"])

        def gold_found(n: int) -> bool:
            return gold <= {title_of[d] for docs in doc_lists[:n] for d in docs}

        cum = np.cumsum([int(tokens[u]) for u in ids])
        prefixes.append((cum, np.logical_or.accumulate(has), [gold_found(n) for n in range(1, len(ids) + 1)]))
        for k in KS:
            out[f"answer@{k}"] += any(has[:k])
            out[f"gold@{k}"] += gold_found(k)
        for budget, acc in per_budget.items():
            used = n = 0
            for u in ids:
                if used + tokens[u] > budget:
                    break
                used += int(tokens[u])
                n += 1
            acc["answer"] += any(has[:n])
            acc["gold"] += gold_found(n)
            acc["units"] += n
            acc["tokens"] += used
    q = len(items)
    result = {k: 100 * v / q for k, v in out.items()}
    result["budgets"] = {b: {"answer": 100 * a["answer"] / q, "gold": 100 * a["gold"] / q, "units": a["units"] / q,
                             "tokens": a["tokens"] / q} for b, a in per_budget.items()}
    result["search_ms_per_question"] = 1000 * search_s / q
    result["unit_tokens_mean"] = float(np.mean(tokens))
    result["prefixes"] = prefixes
    return result


def matched_budget(top: list, others: list) -> dict:
    """Per question, the other kind's best units within the tokens of this kind's top-1 unit."""
    answer = gold = tokens = units = 0
    for (cum1, has1, gold1), (cum, has, gold_n) in zip(top, others):
        n = int(np.searchsorted(cum, cum1[0], side="right"))
        answer += bool(has[n - 1]) if n else False
        gold += bool(gold_n[n - 1]) if n else False
        tokens += int(cum[n - 1]) if n else 0
        units += n
    q = len(top)
    return {"answer": 100 * answer / q, "gold": 100 * gold / q, "tokens": tokens / q, "units": units / q}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=None, help="first N questions (default: all)")
    parser.add_argument("--scorers", default="dense,bm25")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--render", action="store_true", help="re-render the Markdown from the JSON beside --out")
    args = parser.parse_args()
    if args.render:
        args.out.write_text(render(json.loads(args.out.with_suffix(".json").read_text())))
        return

    items = load_dataset(args.questions, limit=args.limit).items
    meta = json.loads((args.index / "meta.json").read_text())
    spec = meta.get("build", {}).get("embedder")
    scorers = args.scorers.split(",")
    index = CorpusIndex(args.index, embedder=make_embedder(spec) if spec and "dense" in scorers else None)
    results = {}
    for kind in index.unit_kinds:
        for scorer in scorers:
            log(f"{kind} / {scorer} over {len(items)} questions")
            results[f"{kind}|{scorer}"] = evaluate(index, items, kind, scorer)
    for scorer in scorers:
        g, p = results.get(f"grouped|{scorer}"), results.get(f"passage|{scorer}")
        if g and p:
            g["matched"] = matched_budget(g["prefixes"], p["prefixes"])
            g["top1_tokens"] = float(np.mean([c[0] for c, _, _ in g["prefixes"]]))
    for r in results.values():
        r.pop("prefixes")
    raw = {"command": " ".join(["python", *sys.argv]), "machine": machine(), "questions": len(items),
           "index": meta, "results": results, "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    args.out.with_suffix(".json").write_text(json.dumps(raw, indent=1))
    args.out.write_text(render(raw))
    print(render(raw))


def render(raw: dict) -> str:
    res, meta = raw["results"], raw["index"]
    for r in res.values():  # JSON turned the budget keys into strings
        r["budgets"] = {int(b): v for b, v in r["budgets"].items()}
    units = meta["units"]
    rows = []
    for key, r in res.items():
        kind, scorer = key.split("|")
        rows.append([kind, scorer, f"{units[kind]['count']:,}", f"{r['unit_tokens_mean']:.0f}",
                     *(f"{r[f'answer@{k}']:.1f}" for k in KS), *(f"{r[f'gold@{k}']:.1f}" for k in KS),
                     f"{r['search_ms_per_question']:.1f}"])
    by_k = md_table(["units", "scorer", "count", "tokens/unit", *(f"answer R@{k}" for k in KS),
                     *(f"gold R@{k}" for k in KS), "search ms/q"], rows)
    rows = []
    for key, r in res.items():
        kind, scorer = key.split("|")
        for b, v in r["budgets"].items():
            rows.append([kind, scorer, b, f"{v['answer']:.1f}", f"{v['gold']:.1f}", f"{v['units']:.1f}", f"{v['tokens']:.0f}"])
    by_budget = md_table(["units", "scorer", "token budget", "answer recall", "gold-doc recall", "units read",
                          "tokens read"], rows)
    lines = []
    for scorer in ("dense", "bm25"):
        p, g = res.get(f"passage|{scorer}"), res.get(f"grouped|{scorer}")
        if p and g:
            lines.append(f"- {scorer}: answer recall@1 grouped {g['answer@1']:.1f} vs passage {p['answer@1']:.1f} "
                         f"(**{g['answer@1'] - p['answer@1']:+.1f} points**, target ≥ +15; paper on NQ: 52.2 → 71.7); "
                         "at equal budgets: " + ", ".join(
                             f"{b}: {g['budgets'][b]['answer'] - p['budgets'][b]['answer']:+.1f}" for b in BUDGETS))
            m = g["matched"]
            lines.append(f"- {scorer}, same tokens per question: the top-1 group ({g['top1_tokens']:.0f} tokens on "
                         f"average) has the answer for {g['answer@1']:.1f}% and both gold documents for "
                         f"{g['gold@1']:.1f}%; the best passages within the same tokens ({m['units']:.1f} passages, "
                         f"{m['tokens']:.0f} tokens) {m['answer']:.1f}% and {m['gold']:.1f}% "
                         f"(**{g['answer@1'] - m['answer']:+.1f} points** answer recall)")
    grouping = units.get("grouped", {})
    g = res.get("grouped|dense") or res.get("grouped|bm25") or {}
    grouped_mean, top1 = g.get("unit_tokens_mean", 0), g.get("top1_tokens", 0)
    return f"""# LongRAG retrieval units on HotpotQA (answer recall, gold-document recall)

Command: `{raw['command']}`
Index: `lcrag corpus build {meta['source']} --unit {','.join(units)} --tokenizer smollm2` ({meta['documents']:,} documents,
{meta['pieces']:,} pieces of ~{meta['piece_words']} words; embedder `{meta.get('embedder')}`; grouping
`{grouping.get('grouping')}` over {grouping.get('edges', 0):,} edges, groups ≤ {grouping.get('group_tokens')} tokens).
Machine: {raw['machine']} · {raw['date']} · {raw['questions']:,} questions (HotpotQA dev, asked against the whole corpus).

Recall: answer recall = DPR `has_answer` of the gold answer in a retrieved unit (LongRAG's "answer recall");
gold-doc recall = both supporting documents among the retrieved units (LongRAG's HotpotQA recall). Tokens are
SmolLM2 reader tokens counted at build time.

## Summary
{chr(10).join(lines)}

## By number of units
{by_k}

## At equal token budgets (units whole, best first, while they fit)
{by_budget}

## What this means
- Per unit, LongRAG's effect is there: the top-1 group holds the answer far more often than the top-1 passage
  (the paper: NQ 52.2 → 71.7 with bge-large and hyperlink groups of Wikipedia), and it holds both supporting
  documents of a two-hop question about half the time, which one passage never can.
- Per token it is not: at the same number of tokens the best passages match or beat the group (dense roughly
  level, BM25 behind), and at fixed budgets below a group's size the group does not fit at all. Here the gain
  comes from reading more text per unit, not from better-chosen text. Two reasons we can name: the corpus has no
  hyperlinks, so groups come from title mentions (a weaker relation than Wikipedia's links), and most paragraphs
  mention no other title and stay alone, so groups are smaller and more uneven than LongRAG's ~4K tokens.
- Both scorers favour big groups: the mean group has {grouped_mean:.0f} tokens, the top-1 group {top1:.0f}. A group
  with more pieces has more chances at the best piece score (MaxP), and more matching terms (BM25).
- The dense scorer is all-MiniLM-L6-v2 (int8, 256-token input), far weaker than the paper's bge-large; BM25 runs
  over each unit's whole text, so long groups are length-normalised against short ones.
- Search times were measured while an evaluation run shared the two cores.
"""


if __name__ == "__main__":
    main()
