"""Where a router lands on runs it was not fitted on: its fixed threshold against run-time share control.

A router file's threshold is calibrated on its fitting questions; carried to another reader it sends another share
of questions to LC. :func:`held_decisions` replays each run's questions in their order through the same
:class:`~lcrag.strategies.routing.share_control.ShareState` the live router uses (``--lc-share``, ``--lc-cost-share``), so
``lcrag route eval --router`` shows the realized LC share, cost and quality of both, next to always-LC, always-RAG,
the oracle and Self-Route's written rule.
"""

from __future__ import annotations

from collections.abc import Sequence

from lcrag.evaluation.prices import Price
from lcrag.evaluation.routing.report import Point, Question, cells, evaluate, money
from lcrag.strategies.routing.learned import Router
from lcrag.strategies.routing.share_control import HORIZON, TOKENS, ShareState, ShareTarget

BASELINES = ("always-RAG", "always-LC", "oracle", "self-route (text)")
# The router's rows are replayed offline over the recorded questions, not what a run did: their labels say so.
FIXED = "router, fixed threshold (offline replay)"
HELD = "router, held at run time (offline replay)"
RECORDED = "the run's own routes (recorded)"


def held_decisions(questions: Sequence[Question], scores: Sequence[float], target: ShareTarget,
                   calibration: tuple[float, ...], horizon: float = HORIZON,
                   declined: Sequence[bool] | None = None) -> list[bool]:
    """Which questions a router holding ``target`` sends to LC, deciding each run's questions in order with one
    state per run (a run is one reader), warm-started from ``calibration``; ``horizon``: over how many questions
    the realized share's error is paid back (:data:`lcrag.strategies.routing.share_control.HORIZON`); ``declined``: the
    questions sent to LC whatever their score (``declines_to_lc``: their RAG answer declined)."""
    states: dict[str, ShareState] = {}
    decisions = []
    for i, (q, score) in enumerate(zip(questions, scores)):
        state = states.get(q.run)
        if state is None:
            state = states[q.run] = ShareState(horizon=horizon)
            state.warm(calibration, q.lc_tokens, q.rag_tokens)
        decisions.append(bool(state.decide(target, score, q.lc_tokens, q.rag_tokens,
                                           declined=declined is not None and declined[i])))
    return decisions


def landing_points(questions: list[Question], scores: list[float], router: Router, share: float | None,
                   cost_share: float | None) -> list[Point]:
    """The router at its fixed threshold, and held at ``share`` of questions and ``cost_share`` of tokens (those
    given), as :class:`Point` (not yet evaluated)."""
    fixed = router.default_threshold
    how = (f"calibrated for share {router.default_share:g}" if router.default_share is not None else "default")
    points = [Point(FIXED, f"T={fixed:.4g} ({how})", [s >= fixed for s in scores])]
    for value, by, name in ((share, "questions", "LC share"), (cost_share, TOKENS, "LC cost share")):
        if value is not None:
            target = ShareTarget(value, by)
            points.append(Point(HELD, f"{name} {value:g}",
                                held_decisions(questions, scores, target, router.calibration)))
    return points


def landing_table(questions: list[Question], baselines: list[Point], landed: list[Point],
                  price: Price | None) -> tuple[list[str], list[list]]:
    """Per (run, dataset, length) cell: each policy's quality, realized LC share, LC's share of prompt tokens and
    its cost as a share of always-LC's (USD when priced, else prompt tokens); the routes each run itself took
    (its Self-Route rows) beside the offline replays."""
    header = ["run", "dataset", "length", "policy", "setting", "quality", "LC share", "LC share of prompt tokens",
              "% of always-LC cost"]
    recorded = Point(RECORDED, "", [q.recorded_route == "lc" for q in questions])
    shown = [p for p in baselines if p.router in BASELINES] + [recorded] + landed
    body = []
    for cell, mine in cells(questions).items():
        qs = [questions[i] for i in mine]
        lc_cost = _cost(qs, [True] * len(qs), False, price)
        for p in shown:
            to_lc = [p.to_lc[i] for i in mine]
            first = p.router != "always-LC"
            quality, lc_share, _ = evaluate(qs, to_lc, first)
            cost = 100 * _cost(qs, to_lc, first, price) / lc_cost
            body.append([*cell, p.router, p.setting, f"{quality:.3f}", f"{lc_share:.3f}",
                         f"{token_share(qs, to_lc, first):.3f}", f"{cost:.0f}%"])
    return header, body


def token_share(questions: Sequence[Question], to_lc: Sequence[bool], rag_first: bool = True) -> float:
    """LC's share of the prompt tokens when ``to_lc`` questions go to LC (RAG steps counted where they run)."""
    lc = sum(q.lc_tokens for q, sent in zip(questions, to_lc) if sent)
    rag = sum(q.rag_tokens for q in questions) if rag_first else 0
    return lc / (lc + rag) if lc + rag else 0.0


def _cost(questions: Sequence[Question], to_lc: Sequence[bool], rag_first: bool, price: Price | None) -> float:
    if price is not None:
        return money(list(questions), list(to_lc), price, rag_first)
    return evaluate(list(questions), list(to_lc), rag_first)[2]
