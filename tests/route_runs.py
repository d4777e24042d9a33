"""An evaluation run of LC and Self-Route rows with a learnable routing signal (LC wins where retrieval is weak), written
as `lcrag eval` writes one, for the routing tests of every tier."""

from __future__ import annotations

import json
import random

def write_run(path, n=60, seed=0, datasets=("a", "b", "c")):
    """LC wins where retrieval is weak (low top score) and the RAG step declines more: a learnable signal."""
    rng = random.Random(seed)
    path.mkdir(parents=True)
    rows = []
    for i in range(n):
        weak = rng.random() < 0.4
        top = rng.uniform(0.1, 0.3) if weak else rng.uniform(0.6, 0.9)
        decline = rng.uniform(0.2, 0.5) if weak else rng.uniform(0.0, 0.05)
        lc, rag = (1.0, 0.0) if weak else (rng.choice([0.0, 1.0]),) * 2
        item, dataset = f"q{i}", datasets[i % len(datasets)]
        rows.append({"item_id": item, "config": "lc", "dataset": dataset, "strategy": "lc", "question": f"Who is {i}?", "score": lc,
                     "prompt_tokens": 5000, "truncated_tokens": 100, "calls": [{"prompt_tokens": 5000}]})
        rows.append({"item_id": item, "config": "self-route|bm25|k5", "dataset": dataset, "strategy": "self-route", "question": f"Who is {i}?",
                     "score": rag, "route_score": rag, "route": "rag", "raw_route_answer": "Bob",
                     "prompt_tokens": 1500, "calls": [{"prompt_tokens": 1500}], "chunk_scores": [top, top / 2, 0.1],
                     "decline_probability": decline})
    (path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


