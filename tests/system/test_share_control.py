"""Holding a learned router's LC share at run time (lcrag.strategies.routing.share_control)."""

from __future__ import annotations

import json
import multiprocessing
import random


from lcrag.strategies.routing.share_control import ShareLedger, ShareTarget

CALIBRATION = tuple(sorted(random.Random(1).gauss(0.0, 0.3) for _ in range(1001)))  # the fitting readers' scores


def clustered_scores(n: int, seed: int = 0) -> list[float]:
    """A new reader's scores: on another scale than the calibration (shifted and wider), and arriving in runs of
    40-80 questions of one kind (a dataset file's comparison questions all score high)."""
    rng, scores = random.Random(seed), []
    while len(scores) < n:
        centre = rng.choice((0.2, 0.8, 1.5))
        scores += [rng.gauss(centre, 0.4) for _ in range(rng.randint(40, 80))]
    return scores[:n]


def _decide_many(path: str, n: int) -> None:
    from pathlib import Path

    ledger = ShareLedger(Path(path), CALIBRATION)
    for score in clustered_scores(n, seed=n):
        ledger.decide(ShareTarget(0.3), score, 1000, 100)


def test_concurrent_processes_lose_no_question(tmp_path):
    path = tmp_path / "ledger.json"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_decide_many, args=(str(path), 40)) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert [w.exitcode for w in workers] == [0, 0, 0]
    assert json.loads(path.read_text())["questions"] == 120
