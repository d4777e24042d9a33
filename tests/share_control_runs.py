"""Runs of a share-held router for the share-control tests of the unit tier (quick resumes) and the system tier (18
killed runs, processes sharing one ledger): the fitting readers' calibration, a new reader's clustered scores, and
one `lcrag eval` process as the runner drives the ledger, killable at any point."""

from __future__ import annotations

import json
import random

import pytest

from lcrag.strategies.routing.share_control import ShareLedgers, ShareTarget

CALIBRATION = tuple(sorted(random.Random(1).gauss(0.0, 0.3) for _ in range(1001)))  # the fitting readers' scores


def clustered_scores(n: int, seed: int = 0) -> list[float]:
    """A new reader's scores: on another scale than the calibration (shifted and wider), and arriving in runs of
    40-80 questions of one kind (a dataset file's comparison questions all score high)."""
    rng, scores = random.Random(seed), []
    while len(scores) < n:
        centre = rng.choice((0.2, 0.8, 1.5))
        scores += [rng.gauss(centre, 0.4) for _ in range(rng.randint(40, 80))]
    return scores[:n]


class Unanswered(Exception):
    """The reader holds no answer (in an eval: the question gets no row)."""


def eval_session(directory, questions, rows: dict, kill: tuple[int, str] | None = None) -> bool:
    """One `lcrag eval` process as the runner drives the ledger: every question without a row, in order, each in
    `answering()`; an unanswerable one raises after its route (a question routed to LC whose LC answer the reader
    does not hold). `kill` = (i, "before") dies before question i is asked (after i-1's row), (i, "routed") after its
    route was written and before its row. False when killed."""
    ledgers = ShareLedgers(directory)  # a new process: the ledger as the file has it
    for i, (question, score, answerable) in enumerate(questions):
        if i in rows:
            continue
        if kill == (i, "before"):
            return False
        try:
            with ledgers.answering():
                decision = ledgers.get("reader", "router", CALIBRATION).decide(
                    ShareTarget(0.3), score, 1000, 100, question)
                if kill == (i, "routed"):
                    return False
                if not answerable:
                    raise Unanswered(question)
        except Unanswered:
            continue
        rows[i] = bool(decision)
    return True


def ledger_file(directory) -> dict:
    (path,) = directory.glob("*.json")
    return json.loads(path.read_text())


@pytest.fixture
def small_window(monkeypatch):
    """A window of 30 questions, so that a few hundred questions cover what a LaRA run's thousand do."""
    from lcrag.strategies.routing import share_control

    monkeypatch.setattr(share_control, "WINDOW", 30)
    monkeypatch.setattr(share_control, "SEEDS", 10)
    return 30


def resume_questions(n: int) -> list[tuple[str, float, bool]]:
    # a few never answered, early ones (more than a window before most kill points) among them
    return [(f"q{i}", score, i not in (2, 5, 41, 77)) for i, score in enumerate(clustered_scores(n, seed=11))]


