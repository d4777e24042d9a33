"""A router adapted to the reader in use from where its RAG and LC answers agree (issue 44, item 3): the agreement
reading, the shrinkage toward the router, the calibration kept per reader and router (concurrent writers, a damaged
file), and a router in use loading it."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest

from lcrag.strategies.routing.learned import Router, RouterCondition, RouteSignals
from lcrag.strategies.routing.calibration import (
    FACTOR_LIMITS, CalibrationStore, Label, RoutingCalibration, answers_agree, disagreement_rates, group_of,
)
from lcrag.strategies.routing.share_control import ShareLedgers
from lcrag.core.types import Answer

pytestmark = pytest.mark.unit

Q = "What is the population of Tallinn?"


@pytest.mark.parametrize("rag, lc, agree", [
    ("The text does not say.", "The document does not mention it.", True),  # both decline: LC was not needed
    ("The text does not say.", "About 450,000 people live there.", False),
    ("About 450,000 people live there.", "Tallinn has roughly 450,000 inhabitants.", True),  # the same figure
    ("About 450,000 people live there.", "Around 400,000 people live there.", False),  # another figure
    ("Yes, it was signed in Paris.", "No, it was signed in Rome.", False),
    ("The treaty was signed by the king and the bishop.", "The king and the bishop signed the treaty.", True),
    ("The treaty was signed by the king and the bishop.", "A merchant guild drafted a trade charter.", False),
])
def test_agreement_is_read_from_the_two_answers(rag, lc, agree):
    assert answers_agree(Q, rag, lc) is agree


def test_a_group_is_the_question_form_and_whether_rag_declines():
    assert group_of(Q, "The text does not say.") == "what/declines"
    assert group_of("Who wrote it?", "Anna wrote it.") == "who/answers"
    assert disagreement_rates([("a", True), ("a", False), ("b", True)]) == {"*": 0.6667, "a": 0.5, "b": 1.0}


def calibration(n: int, disagree: float, prior: dict | None = None) -> RoutingCalibration:
    labels = tuple(Label("what/answers", i < disagree * n) for i in range(n))
    return RoutingCalibration("reader", "digest", labels, {"what/answers": 0.5, "*": 0.5} if prior is None else prior)


def test_the_adaptation_is_shrunk_toward_the_router_more_questions_move_it_more():
    """A reader that disagrees everywhere where the router's readers disagreed half the time: 50 questions move the
    group's factor little, 200 more, none not at all; a group without questions keeps the router's score."""
    full = 2.0  # the unshrunk factor: rate 1.0 over 0.5 (within FACTOR_LIMITS)
    assert FACTOR_LIMITS[0] < 1.0 / full and full < FACTOR_LIMITS[1]
    f0, f50, f200 = (calibration(n, 1.0).factor("what/answers") for n in (0, 50, 200))
    assert f0 == 1.0
    assert 1.0 < f50 < 1.0 + 0.6 * (full - 1.0) < f200 < full
    assert calibration(200, 0.0).factor("what/answers") < calibration(50, 0.0).factor("what/answers") < 1.0
    assert calibration(200, 1.0).factor("who/answers") == 1.0
    assert calibration(200, 1.0).adapt(0.2, "what/answers") == pytest.approx(0.2 * f200)
    # the router's own rate matched: nothing moves however many questions
    assert calibration(200, 0.5).factor("what/answers") == pytest.approx(1.0)


def test_a_calibration_is_kept_per_reader_and_router_and_read_back(tmp_path):
    store = CalibrationStore(tmp_path)
    made = calibration(60, 0.8)
    path = store.save(made)
    assert path.parent == tmp_path and json.loads(path.read_text())["questions"] == 60
    loaded = CalibrationStore(tmp_path).load("reader", "digest")
    assert loaded.labels == made.labels and loaded.factor("what/answers") == made.factor("what/answers")
    assert store.load("another reader", "digest") is None and store.load("reader", "another router") is None


def test_exploration_is_a_share_of_questions_fixed_by_their_key():
    keys = [f"question {i}" for i in range(2000)]
    explored = [k for k in keys if replace(calibration(10, 1.0), explore=0.1).explores(k)]
    assert 0.07 < len(explored) / len(keys) < 0.13
    assert explored == [k for k in keys if replace(calibration(10, 1.0), explore=0.1).explores(k)]  # the same again
    assert not any(calibration(10, 1.0).explores(k) for k in keys)  # explore 0: none
    assert set(explored) <= {k for k in keys if replace(calibration(10, 1.0), explore=0.3).explores(k)}


def test_a_damaged_calibration_is_reported_and_started_afresh(tmp_path, caplog):
    store = CalibrationStore(tmp_path)
    path = store.save(calibration(30, 1.0))
    path.write_text('{"format": "lcrag-routing-calibration", "labels": [[')  # torn
    with caplog.at_level(logging.WARNING):
        assert CalibrationStore(tmp_path).load("reader", "digest") is None  # routes as shipped
    assert "damaged routing calibration" in caplog.text
    rebuilt = store.add("reader", "digest", [Label("what/answers", True, "explore")], {})
    assert len(rebuilt.labels) == 1 and CalibrationStore(tmp_path).load("reader", "digest").labels == rebuilt.labels


def test_a_router_in_use_adapts_its_score_by_the_readers_calibration_and_says_so(tmp_path):
    router = Router.load("lara")
    ledgers = ShareLedgers(tmp_path / "routing-shares")
    answer = Answer("The text does not say.", Q, "self-route", "rag")
    signals = RouteSignals(Q, [0.5, 0.2], answer.text, None, 30000, 1500)
    condition = RouterCondition(router)
    shipped, none = condition.score(answer, signals, ledgers, "reader")
    assert none is None
    labels = tuple(Label("what/declines", True) for _ in range(200))
    ledgers.calibrations.save(RoutingCalibration("reader", router.digest, labels, {"what/declines": 0.25}))
    adapted, found = RouterCondition(router).score(answer, signals, ShareLedgers(tmp_path / "routing-shares"), "reader")
    assert len(found.labels) == 200 and found.factor("what/declines") > 1.0
    assert adapted == pytest.approx(shipped * found.factor("what/declines"))
    # another reader's routing is the shipped router's
    assert condition.score(answer, signals, ledgers, "another reader") == (shipped, None)
