"""Replaying a run through run-time share control offline (lcrag.evaluation.routing.held_share), as the live router decides."""

from __future__ import annotations

import random
from types import SimpleNamespace

from lcrag.evaluation.routing.held_share import held_decisions
from lcrag.strategies.routing.share_control import ShareTarget

CALIBRATION = tuple(sorted(random.Random(2).random() for _ in range(200)))


def run(n: int):
    rng = random.Random(4)
    return ([SimpleNamespace(run="reader-a", lc_tokens=30_000, rag_tokens=3_000) for _ in range(n)],
            [rng.random() for _ in range(n)])


def test_declined_questions_go_to_lc_and_count_in_the_held_share():
    questions, scores = run(600)
    declined = [i % 10 == 0 for i in range(600)]  # a tenth: fewer than the share, the router sends the rest
    sent = held_decisions(questions, scores, ShareTarget(0.3), CALIBRATION, declined=declined)
    assert all(sent[i] for i in range(600) if declined[i])
    assert abs(sum(sent) / 600 - 0.3) < 0.03
    by_score = [s for s, d, to_lc in zip(scores, declined, sent) if to_lc and not d]
    assert 0.15 < len(by_score) / 600 < 0.25  # the router's own share made room for them
    half = [i % 2 == 0 for i in range(600)]  # more declines than the share: all go, the router sends almost none
    sent = held_decisions(questions, scores, ShareTarget(0.3), CALIBRATION, declined=half)
    assert sum(sent) / 600 >= 0.5 and sum(to_lc and not d for to_lc, d in zip(sent, half)) < 30
    assert held_decisions(questions, scores, ShareTarget(0.3), CALIBRATION) != \
        held_decisions(questions, scores, ShareTarget(0.3), CALIBRATION, declined=declined)
