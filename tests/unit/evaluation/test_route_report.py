"""Routing evaluated offline: pairing rows, features, the fitted router file, policies, APGR/CPT, bootstrap,
leave-one-dataset-out, and `lcrag route fit/eval`."""

from __future__ import annotations

import json
import math
import sys

import pytest
from route_runs import write_run

from lcrag.core.errors import InputError
from lcrag.core.text import content_words
from lcrag.evaluation.routing.report import (
    Point, Question, apgr_and_cpt, bootstrap, evaluate, fit_router, leave_one_dataset_out, load_questions,
    operating_point, oracle_gain_recovered, policies, summary_table,
)
from lcrag.strategies.routing.learned import (
    FEATURES, AnswerGrounding, RouteSignals, Router, features, numbers_in, term_share, text_signals,
)


def test_features_are_the_same_from_rows_and_answers():
    x = features(RouteSignals("Who wrote it?", [0.2, 0.9, 0.5], "unanswerable", None, 999, 100, 0.5, 0.25))
    assert len(x) == len(FEATURES)
    named = dict(zip(FEATURES, x))
    assert named["top_score"] == 0.9 and named["margin"] == pytest.approx(0.4)
    assert named["answer_declines"] == 1.0 and named["decline_missing"] == 1.0 and named["decline_probability"] == 0.5
    assert named["question_who"] == 1.0 and named["log_document_tokens"] == pytest.approx(math.log(1000))
    assert named["question_terms_in_document"] == 0.5 and named["question_terms_in_chunks"] == 0.25


def test_declines_in_the_readers_own_words_are_signals():
    named = dict(zip(FEATURES, features(RouteSignals(
        "How do papers 0 and 1 differ?", [1.0], "The provided chunks do not mention it.", None, 10, 5))))
    assert named["answer_declines"] == 0.0  # not the word "unanswerable"...
    assert named["answer_declines_in_words"] == 1.0 and named["answer_declines_first"] == 1.0  # ...but a decline
    assert named["question_compares"] == 1.0
    plain = dict(zip(FEATURES, features(RouteSignals("Who is Bob?", [1.0], "Bob is a baker.", None, 10, 5))))
    assert plain["answer_declines_in_words"] == 0.0 and plain["question_compares"] == 0.0


def test_grounding_measures_the_rag_answers_own_words_and_figures():
    """What the answer adds to the question, found in the chunks or only somewhere in the document; a figure must
    be written the same way to count (36.6 is not 36,600,000)."""
    document = "The harbour fee rose to 36.6 million in 2019. Later the pentagram closed. Its keeper was Mara."
    words, figures = content_words(document), numbers_in(document)
    assert figures == {"36.6", "2019"}
    *_, g = text_signals("What did the harbour fee rise to?", "It rose to 36,600,000 in 2019, says the keeper.",
                         words, figures, retrieved="The harbour fee rose to 36.6 million in 2019.")
    # rose, says, keeper, 36, 600, 000, 2019 ("harbour" and "fee" are the question's); "says" is nowhere, "keeper"
    # only outside the chunks, "600" and "000" only in the answer's way of writing the figure
    assert g.new_terms == 7
    assert g.terms_in_chunks == pytest.approx(3 / 7) and g.terms_in_document == pytest.approx(4 / 7)
    assert (g.numbers, g.numbers_in_chunks, g.numbers_in_document) == (2, 0.5, 0.5)
    named = dict(zip(FEATURES, features(RouteSignals("q?", [1.0], "a", None, 10, 5, 1.0, 1.0, g))))
    assert named["answer_new_terms"] == 7 and named["answer_numbers_in_chunks"] == 0.5
    assert AnswerGrounding.from_row(g.to_row()) == AnswerGrounding.from_row(dict(g.to_row(), later="ignored"))
    assert AnswerGrounding.from_row(None) == AnswerGrounding()  # rows from before: nothing added, all found


def test_term_share_counts_the_questions_key_terms():
    terms = {"pentagram", "harbour"}
    assert term_share(terms, "The harbour was quiet.") == 0.5
    assert term_share(terms, {"pentagram", "harbour", "x"}) == 1.0
    assert term_share(set(), "anything") == 1.0


def test_pairs_lc_and_self_route_rows(tmp_path):
    questions, skipped = load_questions([write_run(tmp_path / "r", n=10)])
    assert len(questions) == 10 and skipped == 0
    q = questions[0]
    assert q.lc_tokens == 5000 and q.rag_tokens == 1500 and q.x[FEATURES.index("log_document_tokens")] == pytest.approx(
        math.log(5101))


def test_policies_oracle_and_token_accounting(tmp_path):
    questions, _ = load_questions([write_run(tmp_path / "r")])
    points = {p.router: p for p in policies(questions)}
    lc, rag, oracle = points["always-LC"], points["always-RAG"], points["oracle"]
    assert oracle.quality >= max(lc.quality, rag.quality)
    assert lc.tokens == 5000 and rag.tokens == 1500  # always-LC does not pay a RAG step
    assert oracle.tokens == pytest.approx(1500 + 5000 * oracle.share)


def test_apgr_and_cpt_on_a_hand_computed_curve():
    # q_rag 0.2, q_lc 0.6; points (0.5, 0.5) -> PGR 0.75; curve (0,0) (0.5,0.75) (1,1): area 0.1875 + 0.4375 = 0.625
    area, c50, c80 = apgr_and_cpt([(0.5, 0.5)], 0.2, 0.6)
    assert area == pytest.approx(0.625) and c50 == 0.5 and c80 == 1.0
    assert math.isnan(apgr_and_cpt([(0.5, 0.5)], 0.4, 0.4)[0])


def test_the_router_file_round_trips_and_applies_without_sklearn(tmp_path, monkeypatch):
    questions, _ = load_questions([write_run(tmp_path / "r")])
    router = fit_router(questions)
    router.save(tmp_path / "router.json")
    monkeypatch.setitem(sys.modules, "sklearn", None)  # applying it must not need scikit-learn
    loaded = Router.load(tmp_path / "router.json")
    assert [loaded.probability(q.x) for q in questions] == pytest.approx([router.probability(q.x) for q in questions])
    better = [q.lc_better for q in questions]
    probs = [loaded.probability(q.x) for q in questions]
    assert sum(p >= 0.5 for p, b in zip(probs, better) if b) > sum(p >= 0.5 for p, b in zip(probs, better) if not b)


@pytest.mark.parametrize("share", [0.1, 0.3, 0.5])
def test_lc_share_calibration_reaches_the_share_on_the_fitting_data(tmp_path, share):
    questions, _ = load_questions([write_run(tmp_path / "r")])
    router = fit_router(questions)
    threshold = router.threshold_for_share(share)
    sent = sum(router.probability(q.x) >= threshold - 1e-12 for q in questions)
    assert abs(sent - share * len(questions)) <= 1


def test_bad_router_files_are_one_line(tmp_path):
    for text, message in [("{", "not a router file"), ('{"format": "x"}', "not a router file"),
                          ('{"format": "lcrag-router", "feature_set": "old"}', "fitted for feature set")]:
        (tmp_path / "r.json").write_text(text)
        with pytest.raises(InputError, match=message):
            Router.load(tmp_path / "r.json")


def test_few_questions_warn(tmp_path):
    questions, _ = load_questions([write_run(tmp_path / "r", n=20)])
    with pytest.warns(UserWarning, match="only 20 labelled questions"):
        fit_router(questions)


def test_leave_one_dataset_out_never_sees_the_held_out_dataset(tmp_path, monkeypatch):
    questions, _ = load_questions([write_run(tmp_path / "r")])
    seen = []
    import lcrag.evaluation.routing.report as rr

    real = rr.fit_router
    monkeypatch.setattr(rr, "fit_router", lambda qs, model="logistic": seen.append({q.dataset for q in qs}) or real(qs, model))
    probabilities = leave_one_dataset_out(questions)
    assert seen == [{"b", "c"}, {"a", "c"}, {"a", "b"}] and len(probabilities) == len(questions)


def test_bootstrap_interval_contains_the_estimate(tmp_path):
    questions, _ = load_questions([write_run(tmp_path / "r")])
    to_lc = [q.lc_better for q in questions]
    low, high = bootstrap(questions, to_lc)
    assert low <= evaluate(questions, to_lc)[0] <= high


def test_summary_reports_every_router(tmp_path):
    questions, _ = load_questions([write_run(tmp_path / "r")])
    header, body = summary_table(policies(questions, leave_one_dataset_out(questions)))
    assert [r[0] for r in body] == ["oracle", "self-route (text)", "self-route P(decline)", "learned router"]


def test_money_bills_a_documents_prefix_as_cached_only_after_lc_read_it(tmp_path):
    from lcrag.evaluation.routing.report import cache_aware, money
    from lcrag.evaluation.prices import Price

    price = Price(1.0, 0.1, 0.0)

    def q(i, cached):
        return Question("r", f"d-{i}", "a", 1.0, 0.0, 1000, 300, [0.0] * len(FEATURES), None, False,
                        {"prompt_tokens": 1000, "cached_prompt_tokens": cached}, {"prompt_tokens": 300}, chain=1)

    questions = [q(0, 0), q(1, 900), q(2, 900)]
    # LC on the first question only: one cold read, and RAG on all three
    assert money(questions, [True, False, False], price) == pytest.approx((3 * 300 + 1000) / 1e6 / 3)
    # LC on the last two only: the second is cold (nothing read the document before), the third warm
    assert money(questions, [False, True, True], price) == pytest.approx((3 * 300 + 1000 + 100 + 90) / 1e6 / 3)
    # cache-aware: once the document is read, a warm LC (190) costs less than the RAG step (300): straight to LC
    to_lc, firsts = cache_aware(questions, [0.9, 0.0, 0.0], 0.5, price)
    assert to_lc == [True, True, True] and firsts == [True, False, False]


def test_route_eval_prices_every_policy(tmp_path):
    from lcrag.evaluation.prices import PriceTable

    questions, _ = load_questions([write_run(tmp_path / "r")])
    points = policies(questions, leave_one_dataset_out(questions), PriceTable().require("gpt-4o-mini"))
    assert all(p.money is not None and p.money > 0 for p in points)
    assert any(p.router == "cache-aware router" for p in points)


def _cascade_question(i, decline, wide_decline, scores=(0.0, 0.5, 1.0)):
    from lcrag.evaluation.routing.report import WideStep

    q = Question("r", f"c-{i}", "a", scores[2], scores[0], 1000, 300, [0.0] * len(FEATURES), decline, False,
                 {"prompt_tokens": 1000}, {"prompt_tokens": 300}, chain=i)
    q.wide = WideStep(scores[1], 800, wide_decline, {"prompt_tokens": 800})
    return q


def test_a_cascade_pays_each_step_it_takes_and_scores_the_last():
    from lcrag.evaluation.prices import Price
    from lcrag.evaluation.routing.report import cascade_point

    questions = [_cascade_question(0, 0.9, 0.9), _cascade_question(1, 0.9, 0.1), _cascade_question(2, 0.1, 0.9)]
    point = cascade_point(questions, 0.5, 0.5, Price(1.0, 1.0, 0.0))
    assert point.scores == [1.0, 0.5, 0.0]  # LC, the wide step, the first RAG step
    assert point.tokens == pytest.approx((300 + 800 + 1000 + 300 + 800 + 300) / 3)
    assert point.wide_share == pytest.approx(2 / 3) and point.lc_share == pytest.approx(1 / 3)
    assert point.money == pytest.approx(point.tokens / 1e6)
    assert cascade_point(questions, 0.0, 0.0, None).scores == [1.0, 1.0, 1.0]  # every gate open: LC everywhere


def test_two_way_quality_at_equal_cost_is_interpolated_along_its_frontier():
    from lcrag.evaluation.routing.report import Point, at_equal_cost

    points = [Point("always-RAG", "", [], quality=0.2, tokens=300), Point("r", "a", [], quality=0.4, tokens=800),
              Point("r", "b", [], quality=0.5, tokens=1300)]
    assert at_equal_cost(points, "r", 550) == pytest.approx(0.3)
    assert at_equal_cost(points, "r", 1300) == pytest.approx(0.5)
    assert math.isnan(at_equal_cost(points, "r", 2000))


def test_a_trees_router_matches_scikit_learn_and_round_trips(tmp_path, monkeypatch):
    import numpy as np
    from sklearn.ensemble import HistGradientBoostingRegressor

    questions, _ = load_questions([write_run(tmp_path / "r", n=120)])
    router = fit_router(questions, "trees")
    x = np.array([q.x for q in questions])
    reference = HistGradientBoostingRegressor(max_depth=3, max_iter=200, learning_rate=0.05, random_state=0).fit(
        x, [q.lc_score - q.rag_score for q in questions])
    assert [router.probability(row) for row in x.tolist()] == pytest.approx(reference.predict(x).tolist(), abs=1e-12)
    router.save(tmp_path / "trees.json")
    monkeypatch.setitem(sys.modules, "sklearn", None)  # applying it needs only the standard library
    loaded = Router.load(tmp_path / "trees.json")
    assert loaded.trees is not None and loaded.probability(x[0].tolist()) == router.probability(x[0].tolist())
    gains = [loaded.probability(q.x) for q in questions]  # weak retrieval: LC gains; elsewhere it does not
    assert np.mean([g for g, q in zip(gains, questions) if q.lc_better]) > np.mean(
        [g for g, q in zip(gains, questions) if not q.lc_better])


def test_a_damaged_tree_is_refused(tmp_path):
    questions, _ = load_questions([write_run(tmp_path / "r", n=120)])
    data = json.loads(json.dumps(fit_router(questions, "trees").to_dict()))
    data["trees"]["trees"][0][0] = [0, 0.5, 99, 100, 0.0]  # children outside the tree
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match="not a router file"):
        Router.load(tmp_path / "bad.json")


def test_the_shipped_lara_router_loads_by_name():
    router = Router.load("lara")
    assert router.trees is not None and router.default_share is not None
    assert "gpt-4o" in router.fitted_on["readers"]
    at_or_above = [s for s in router.calibration if s >= router.default_threshold]
    assert 0 < len(at_or_above) / len(router.calibration) <= 0.5


def _point(router, quality, share, tokens, n=100):
    return Point(router, "", [False] * n, quality, share, tokens)


def test_the_operating_point_and_the_oracle_gain_it_recovers_are_routing_laras():
    """Issue 44: one definition: the best setting at LC share <= 40% and cost <= 45% of always-LC's, and the share of
    the oracle's gain over max(LC, RAG) it recovers there (route eval had its best at share <= 50%)."""
    points = [_point("always-LC", 0.70, 1.0, 1000), _point("always-RAG", 0.60, 0.0, 200),
              _point("oracle", 0.80, 0.3, 400),
              _point("learned router", 0.72, 0.2, 400), _point("learned router", 0.75, 0.4, 460),  # 46% of LC's cost
              _point("learned router", 0.78, 0.5, 400), _point("learned router", 0.71, 0.41, 420)]  # a tie's question
    best = operating_point(points)
    assert (best.quality, best.share) == (0.72, 0.2)
    assert oracle_gain_recovered(best.quality, points) == pytest.approx(0.2)  # (0.72 - 0.70) / (0.80 - 0.70)
    assert operating_point(points, max_cost=0.5).quality == 0.75
    assert operating_point(points, max_share=0.5).quality == 0.78
    header, body = summary_table(points)
    rows = {row[0]: dict(zip(header, row)) for row in body}
    assert rows["learned router"]["oracle gain recovered"] == "20.0%"
    assert rows["learned router"]["vs always-LC"] == "+0.0200"
    assert rows["oracle"]["oracle gain recovered"] == "100.0%"
    worse = [_point("always-LC", 0.7, 1.0, 1000), _point("always-RAG", 0.6, 0.0, 200), _point("oracle", 0.7, 0.0, 200)]
    assert math.isnan(oracle_gain_recovered(0.7, worse))  # no gain to recover: no figure


def test_route_lara_uses_route_evals_operating_point_and_oracle_gain(monkeypatch):
    import importlib.util
    from pathlib import Path

    from lcrag.evaluation.routing import report as route_report

    path = Path(__file__).parents[3] / "benchmarks" / "route_lara.py"
    monkeypatch.syspath_prepend(str(path.parent))  # as when it runs: its sibling scripts import
    spec = importlib.util.spec_from_file_location("route_lara_for_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.operating_point is route_report.operating_point
    assert module.oracle_gain_recovered is route_report.oracle_gain_recovered


def test_questions_fall_into_cells_by_run_dataset_and_length(tmp_path):
    from lcrag.evaluation.routing.report import cells, split_length

    assert split_length("lara-32k") == ("lara", "32k") and split_length("lara-128K") == ("lara", "128k")
    assert split_length("hotpotqa") == ("hotpotqa", "—")
    runs = [write_run(tmp_path / name, n=20, datasets=("lara-32k", "lara-128k")) for name in ("a", "b")]
    questions, _ = load_questions(runs)
    found = cells(questions)
    assert list(found) == [(str(run), "lara", length) for run in runs for length in ("128k", "32k")]
    assert all(len(mine) == 10 for mine in found.values())
    assert all(questions[i].dataset == f"lara-{length}" for (_, _, length), mine in found.items() for i in mine)


def test_the_written_rule_reads_the_rag_answer_not_the_runs_own_route(tmp_path):
    """A run made with a router (or a threshold) took its routes by that: Self-Route's rule is the RAG answer's
    decline, whatever the row's route."""
    from lcrag.evaluation.routing.report import written_rule

    assert not written_rule({"route": "lc", "raw_route_answer": "Bob is her brother."})  # the router sent it
    assert written_rule({"route": "rag", "raw_route_answer": "The text does not say."})
    assert written_rule({"route": "lc"})  # a row without the answer: its route is all there is
