"""An evaluation run of LC and Self-Route rows to true-or-false questions, written as `lcrag eval` writes one, for the
judged-sample tests of the unit tier (a scripted judge) and the integration tier (the bundled judge, the CLI)."""

from __future__ import annotations

import json
import random

QUESTION = "True or false: the door in chapter {i} is open."  # a form the bundled 135M judge answers


def proxy(answer: str, rng: random.Random) -> float:
    """A proxy that tracks the judge, imperfectly: ~0.85 for the right answer, ~0.15 for the wrong one."""
    return round((0.85 if answer == "True" else 0.15) + rng.uniform(-0.1, 0.1), 3)


def write_true_false_run(path, n=40, seed=0, lc_right=0.7, rag_right=0.45):
    """A run of LC and Self-Route rows to questions whose gold answer is "True"; each answer is "True" or "False",
    scored by :func:`proxy`. Weak retrieval (a low top chunk score, a high decline probability) where RAG is wrong."""
    rng = random.Random(seed)
    path.mkdir(parents=True)
    rows = []
    for i in range(n):
        lc = "True" if rng.random() < lc_right else "False"
        rag = "True" if rng.random() < rag_right else "False"
        top, decline = (0.8, 0.02) if rag == "True" else (0.2, 0.4)
        common = {"item_id": f"q{i}", "dataset": "abc"[i % 3], "question": QUESTION.format(i=i),
                  "answers": ["True"], "metric": "lara"}
        rows.append({**common, "config": "lc", "strategy": "lc", "prediction": lc, "score": proxy(lc, rng),
                     "prompt_tokens": 4000, "calls": [{"prompt_tokens": 4000}]})
        rows.append({**common, "config": "self-route|bm25|k5", "strategy": "self-route", "prediction": rag,
                     "raw_route_answer": rag, "score": proxy(rag, rng), "route_score": proxy(rag, rng),
                     "route": "rag", "prompt_tokens": 900, "calls": [{"prompt_tokens": 900}],
                     "chunk_scores": [top, top / 2], "decline_probability": decline})
    (path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


