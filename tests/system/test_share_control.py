"""Holding a learned router's LC share at run time (lcrag.strategies.routing.share_control)."""

from __future__ import annotations

import json
import multiprocessing

from share_control_runs import CALIBRATION, clustered_scores

from lcrag.strategies.routing.share_control import ShareLedger, ShareTarget


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
