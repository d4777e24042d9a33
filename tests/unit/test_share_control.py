"""Holding a learned router's LC share at run time (lcrag.strategies.routing.share_control)."""

from __future__ import annotations

import json
import random
from collections import OrderedDict

import pytest
from share_control_runs import (  # noqa: F401 - small_window: a fixture
    CALIBRATION, Unanswered, clustered_scores, eval_session, ledger_file, resume_questions, small_window,
)

from lcrag.strategies.routing.share_control import (
    TOKENS,
    WINDOW,
    ShareLedger,
    ShareLedgers,
    ShareState,
    ShareTarget,
    cost_threshold,
    quantile_threshold,
)


def realized(decisions: list[bool]) -> list[float]:
    shares, sent = [], 0
    for i, to_lc in enumerate(decisions, 1):
        sent += to_lc
        shares.append(sent / i)
    return shares


@pytest.mark.parametrize("share", [0.1, 0.3, 0.5])
def test_the_share_of_questions_is_held_on_a_reader_the_calibration_never_saw(share):
    state, target = ShareState(), ShareTarget(share)
    state.warm(CALIBRATION, 1000, 100)
    scores = clustered_scores(1500, seed=int(share * 10))
    static = sum(s >= quantile_threshold(list(CALIBRATION), share) for s in scores) / len(scores)
    assert abs(static - share) > 0.2  # the calibrated threshold alone misses badly on this reader
    decisions = [bool(state.decide(target, s, 1000, 100)) for s in scores]
    worst = max(abs(x - share) for x in realized(decisions)[99:])
    assert worst <= 0.05


def test_a_slower_horizon_routes_more_by_score_and_holds_the_share_less():
    """The trade route_lara.py measures: the shipped horizon holds the share through runs of same-kind questions;
    a slow one lets a run of high scores take more LC (closer to a cut by score alone), and the share drifts."""
    scores = clustered_scores(1500, seed=7)
    cut = quantile_threshold(scores, 0.3)  # the hindsight cut: the top 0.3 of every score
    outcomes = {}
    for horizon in (10, 1000):
        state = ShareState(horizon=horizon)
        state.warm(CALIBRATION, 1000, 100)
        decisions = [bool(state.decide(ShareTarget(0.3), s, 1000, 100)) for s in scores]
        agree = sum(d == (s >= cut) for d, s in zip(decisions, scores)) / len(scores)
        outcomes[horizon] = agree, max(abs(x - 0.3) for x in realized(decisions)[99:])
    assert outcomes[1000][0] > outcomes[10][0]
    assert outcomes[10][1] <= 0.05 < outcomes[1000][1]
    assert "horizon" not in json.dumps(ShareState(horizon=1000).to_dict())  # a policy, not state


def test_lc_s_share_of_prompt_tokens_is_held():
    rng = random.Random(3)
    state, target = ShareState(), ShareTarget(0.45, TOKENS)
    state.warm(CALIBRATION, 40_000, 3_000)
    lc_all = rag_all = lc_sent = 0.0
    worst = 0.0
    for i, score in enumerate(clustered_scores(1500, seed=5)):
        document = 40_000 if (i // 300) % 2 == 0 else 130_000  # 32K and 128K documents, in runs
        rag = rng.randint(2_500, 3_500)
        decision = state.decide(target, score, document, rag)
        rag_all += rag
        lc_sent += document if decision else 0
        lc_all = lc_sent / (rag_all + lc_sent)
        if i >= 99:
            worst = max(worst, abs(lc_all - 0.45))
    assert worst <= 0.05


def test_thresholds_at_the_edges():
    assert quantile_threshold([1.0, 2.0, 3.0, 4.0], 0.5) == 3.0
    assert quantile_threshold([1.0, 2.0], 0.0) == float("inf") and quantile_threshold([1.0], 1.0) == float("-inf")
    # questions (score, LC tokens, RAG tokens): sending the top one costs 100 of 130 tokens; the top two 200 of 230
    recent = [(0.9, 100, 10), (0.5, 100, 10), (0.1, 100, 10)]
    assert cost_threshold(recent, 0.8) == 0.9 and cost_threshold(recent, 0.9) == 0.5
    assert cost_threshold(recent, 0.5) == float("inf")


def test_a_decision_says_what_it_held():
    state = ShareState()
    decision = state.decide(ShareTarget(0.3), 0.7, 5000, 300)
    data = decision.to_dict()
    assert data["lc_share"] == 0.3 and data["questions"] == 1 and {"score", "threshold"} <= set(data)
    assert data["realized_lc_share"] == float(bool(decision))


def test_processes_share_one_ledger_through_the_cache(tmp_path):
    first = ShareLedgers(tmp_path).get("reader-a", "router-1", CALIBRATION)
    second = ShareLedgers(tmp_path).get("reader-a", "router-1", CALIBRATION)  # another process's view
    for score in clustered_scores(30):
        first.decide(ShareTarget(0.3), score, 1000, 100)
        second.decide(ShareTarget(0.3), score, 1000, 100)
    assert second.state.questions == 60 and first.decide(ShareTarget(0.3), 0.0, 1000, 100).questions == 61
    other = ShareLedgers(tmp_path).get("reader-b", "router-1", CALIBRATION)
    assert other.decide(ShareTarget(0.3), 0.0, 1000, 100).questions == 1  # another reader: its own share


def test_a_damaged_ledger_starts_afresh_and_says_so(tmp_path, caplog):
    path = tmp_path / "ledger.json"
    path.write_text('{"format": "lcrag-share-ledger", "recent": [[1, 2]]')
    decision = ShareLedger(path, CALIBRATION).decide(ShareTarget(0.3), 0.1, 1000, 100)
    assert decision.questions == 1 and "damaged LC-share ledger" in caplog.text
    assert json.loads(path.read_text())["questions"] == 1


def test_a_target_out_of_range_is_refused():
    with pytest.raises(ValueError):
        ShareTarget(1.5)


def test_a_question_asked_again_keeps_its_route_and_is_counted_once(tmp_path):
    ledger = ShareLedgers(tmp_path).get("reader-a", "router-1", CALIBRATION)
    scores = clustered_scores(40)
    first = [ledger.decide(ShareTarget(0.3), s, 1000, 100, f"q{i}") for i, s in enumerate(scores)]
    reopened = ShareLedgers(tmp_path).get("reader-a", "router-1", CALIBRATION)  # another process, after a kill
    again = [reopened.decide(ShareTarget(0.3), s, 1000, 100, f"q{i}") for i, s in enumerate(scores)]
    assert [bool(d) for d in again] == [bool(d) for d in first] and all(d.repeated for d in again)
    assert {d.questions for d in again} == {40} and again[0].to_dict()["repeated"] is True
    assert "repeated" not in first[0].to_dict()
    other = reopened.decide(ShareTarget(0.5), scores[0], 1000, 100, "q0")  # another target: routed afresh
    assert not other.repeated and other.questions == 41


def test_a_ledger_keeps_the_routes_of_its_recent_questions_only():
    state = ShareState()
    for i in range(WINDOW + 5):
        state.decide(ShareTarget(0.3), 0.1, 1000, 100, f"q{i}")
    assert len(state.routed) == WINDOW and not state.decide(ShareTarget(0.3), 0.1, 1000, 100, "q0").repeated
    old = state.to_dict()
    del old["routed"]  # a ledger written before routes were kept
    assert ShareState.from_dict(old).routed == OrderedDict()
    kept = ShareState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert kept.routed == state.routed


def test_asking_a_question_again_changes_nothing_in_the_ledger():
    """Not even its place among the routes remembered: a resume re-asks questions an unbroken run asked once."""
    state = ShareState()
    for i, score in enumerate(clustered_scores(50)):
        state.decide(ShareTarget(0.3), score, 1000, 100, f"q{i}", declined=i == 3)
    before = json.dumps(state.to_dict())
    again = state.decide(ShareTarget(0.3), 0.0, 1000, 100, "q3")  # asked again with another score
    assert again.repeated and json.dumps(state.to_dict()) == before
    assert again.to_lc and again.declined  # sent to LC by its decline the first time: says so again


def test_a_run_killed_twice_resumes_as_an_unbroken_one(tmp_path, small_window):
    questions = resume_questions(120)
    unbroken: dict = {}
    eval_session(tmp_path / "unbroken", questions, unbroken)
    rows: dict = {}
    for kill in ((3, "routed"), (60, "routed"), (100, "before")):
        assert not eval_session(tmp_path / "killed", questions, rows, kill=kill)
    assert eval_session(tmp_path / "killed", questions, rows)
    assert eval_session(tmp_path / "killed", questions, rows)  # run again once complete: the unanswered re-asked
    assert rows == unbroken and ledger_file(tmp_path / "killed") == ledger_file(tmp_path / "unbroken")


def test_without_pinning_a_resume_counts_an_unanswered_question_twice(tmp_path, small_window):
    """What the pins prevent, shown: the same sessions with the unanswered questions' routes left to the window."""
    questions = resume_questions(120)
    unbroken: dict = {}
    eval_session(tmp_path / "unbroken", questions, unbroken)
    rows: dict = {}
    eval_session(tmp_path / "killed", questions, rows, kill=(100, "before"))
    path = next((tmp_path / "killed").glob("*.json"))
    data = json.loads(path.read_text())
    data["pinned"] = []
    path.write_text(json.dumps(data))
    eval_session(tmp_path / "killed", questions, rows)
    assert ledger_file(tmp_path / "killed")["questions"] > ledger_file(tmp_path / "unbroken")["questions"]


def test_pinned_routes_are_kept_written_and_bounded(tmp_path, monkeypatch):
    from lcrag.strategies.routing import share_control

    monkeypatch.setattr(share_control, "PINNED_KEPT", 3)
    ledgers = ShareLedgers(tmp_path)
    ledger = ledgers.get("reader", "router", CALIBRATION)
    for i in range(5):
        with pytest.raises(Unanswered), ledgers.answering():
            ledger.decide(ShareTarget(0.3), 0.1, 1000, 100, f"q{i}")
            raise Unanswered
    with ledgers.answering():  # answered: nothing pinned
        ledger.decide(ShareTarget(0.3), 0.1, 1000, 100, "q5")
    data = ledger_file(tmp_path)
    assert [k.split("\n")[1] for k, _, _ in data["pinned"]] == ["q2", "q3", "q4"]  # the oldest dropped
    assert ShareState.from_dict(data).pinned == ledger.state.pinned
    memory = ShareLedgers()  # no directory: pinned in memory only
    with pytest.raises(Unanswered), memory.answering():
        memory.get("reader", "router", CALIBRATION).decide(ShareTarget(0.3), 0.1, 1000, 100, "q0")
        raise Unanswered
    assert list(memory.get("reader", "router", CALIBRATION).state.pinned) == ["questions:0.3\nq0"]
