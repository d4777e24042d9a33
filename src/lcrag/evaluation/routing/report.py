"""Routing evaluated offline, on evaluation runs that hold LC and Self-Route rows for the same questions.

Every router is a per-question choice between Self-Route's RAG answer (``route_score``: its first step, scored) and
LC's answer. A router that runs RAG first pays RAG's prompt tokens on every question and LC's on those it sends
there. Metrics after RouteLLM (Ong et al. 2024), with LC as the strong model and RAG as the weak one:
PGR = (q − q_RAG) / (q_LC − q_RAG); APGR = the area under PGR over the LC share from 0 to 1 (the curve runs from
always-RAG at share 0 to always-LC at share 1); CPT(x) = the smallest LC share at which PGR ≥ x. The oracle sends a
question to LC only where LC scores strictly better. Intervals: 95% percentile bootstrap over questions.
"""

from __future__ import annotations

import math
import random
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lcrag.core.errors import InputError
from lcrag.evaluation.report import load_rows
from lcrag.evaluation.prices import Price
from lcrag.strategies.routing.learned import FEATURES, AnswerGrounding, RouteSignals, Router, Trees, features
from lcrag.core.text import declines

MIN_QUESTIONS = 50  # fewer labelled questions than this: the fitted router is mostly noise, and a warning says so
SHARES = tuple(i / 10 for i in range(11))
# The operating point (as benchmarks/results/routing_lara.md): a router's best setting sending at most MAX_SHARE of
# the questions to LC at no more than MAX_COST of always-LC's cost (USD when priced, else prompt tokens).
MAX_SHARE = 0.4
MAX_COST = 0.45
TIE_WEIGHT = 0.1  # the weight of a question LC and RAG score the same on, against 1.0 for a question only one gets


@dataclass
class WideStep:
    """The cascade's middle step for one question: Self-Route's RAG step over more chunks (a run at a larger k)."""

    score: float
    tokens: int
    decline: float | None
    call: dict = field(default_factory=dict)


@dataclass
class Question:
    """One question answered both ways."""

    run: str
    item_id: str
    dataset: str
    lc_score: float
    rag_score: float
    lc_tokens: int
    rag_tokens: int
    x: list[float]  # the router's features
    decline: float | None
    text_routed: bool  # Self-Route's written decline sent it to LC
    lc_call: dict = field(default_factory=dict)  # the recorded LC call (model, prompt/completion/cached tokens)
    rag_call: dict = field(default_factory=dict)  # Self-Route's RAG step call
    chain: int = 0  # questions whose LC prompts share a document prefix (the server reused it) share a chain
    wide: WideStep | None = None  # the cascade's middle step (RAG over more chunks), when a wide run recorded it
    texts: dict = field(default_factory=dict)  # question, gold answers, metric, LC answer, RAG answer (to re-judge)
    grounded: bool = True  # its row measured the RAG answer's grounding (runs before lcrag-route-3 did not)
    recorded_route: str | None = None  # the route the run itself took (its own policy: a rule, a router...)

    @property
    def lc_better(self) -> bool:
        return self.lc_score > self.rag_score


def _route_step(row: dict) -> tuple[float, int]:
    """Self-Route's RAG step: its score and prompt tokens (the first call)."""
    score = row.get("route_score")
    if score is None:  # runs before route_score: a row that stayed on RAG scored its RAG answer
        score = row["score"] if row.get("route") == "rag" else 0.0
    calls = row.get("calls") or []
    return float(score), int(calls[0]["prompt_tokens"]) if calls else int(row["prompt_tokens"])


def signals(lc: dict, sr: dict, rag_tokens: int) -> RouteSignals:
    """What the router read for a question, from its LC row and its Self-Route row (runs before the term and
    grounding signals count every term as found)."""
    terms = sr.get("question_terms") or {}
    return RouteSignals(sr["question"], sr.get("chunk_scores") or [], sr.get("raw_route_answer") or "",
                        sr.get("decline_probability"), int(lc["prompt_tokens"]) + int(lc.get("truncated_tokens") or 0),
                        rag_tokens, float(terms.get("document", 1.0)), float(terms.get("chunks", 1.0)),
                        AnswerGrounding.from_row(sr.get("answer_grounding")))


def written_rule(sr: dict) -> bool:
    """Self-Route's written rule on a recorded RAG answer: LC when it declines. The row's own route only for rows
    without the answer: a run made with a router or a threshold routed by that, not by the rule."""
    raw = sr.get("raw_route_answer")
    return declines(raw) if raw is not None else sr.get("route") == "lc"


def load_questions(run_dirs: Sequence[str | Path]) -> tuple[list[Question], int]:
    """The questions with an LC row and a Self-Route row in the same run, and how many were skipped."""
    questions, skipped = [], 0
    for run in run_dirs:
        rows = load_rows(run)
        by_item: dict[str, dict[str, dict]] = {}
        for row in rows:
            by_item.setdefault(row["item_id"], {})[row["strategy"]] = row
        for item_id, got in by_item.items():
            lc, sr = got.get("lc"), got.get("self-route")
            if lc is None or sr is None:
                skipped += 1
                continue
            rag_score, rag_tokens = _route_step(sr)
            x = features(signals(lc, sr, rag_tokens))
            questions.append(Question(str(run), item_id, sr["dataset"], float(lc["score"]), rag_score,
                                      int(lc["prompt_tokens"]), rag_tokens, x, sr.get("decline_probability"),
                                      written_rule(sr),
                                      (lc.get("calls") or [{}])[0],
                                      (sr.get("calls") or [{}])[0],
                                      texts={"question": sr["question"], "answers": sr.get("answers") or [],
                                             "metric": sr.get("metric"), "lc": lc.get("prediction"),
                                             "rag": sr.get("raw_route_answer")},
                                      grounded="answer_grounding" in sr, recorded_route=sr.get("route")))
    _chain(questions)
    return questions, skipped


def judge_questions(questions: list[Question], judge) -> tuple[list[Question], list[str]]:
    """The questions with their LC and RAG answers scored by ``judge`` (:class:`lcrag.evaluation.judge.Judge`)
    instead of the runs' metric; a question whose verdict is neither True nor False is left out and said why."""
    kept, skipped = [], []
    for q in questions:
        lc, rag, why = judge_pair(q, judge)
        if why:
            skipped.append(why)
            continue
        q.lc_score, q.rag_score = lc, rag
        kept.append(q)
    return kept, skipped


def judge_pair(q: Question, judge) -> tuple[float | None, float | None, str]:
    """The judge's verdicts on a question's LC and RAG answers, and, when either has none, why (its reply quoted)."""
    t, absent = q.texts, q.texts.get("metric") == "lara_hallu"
    lc, lc_reply = judge.score(t["question"], t["answers"], t["lc"], absent)
    rag, rag_reply = judge.score(t["question"], t["answers"], t["rag"], absent)
    if lc is not None and rag is not None:
        return lc, rag, ""
    reply = lc_reply if lc is None else rag_reply
    return lc, rag, f"{q.run}/rows.jsonl item {q.item_id}: the judge answered {reply[:60]!r}"


def attach_wide(questions: list[Question], wide_runs: Sequence[str | Path]) -> list[Question]:
    """The questions that a wide run (``lcrag eval --strategies self-route -k K`` with a larger K) also answered,
    each with that run's RAG step as its :class:`WideStep`."""
    steps: dict[tuple[str, str], WideStep] = {}
    for run in wide_runs:
        for row in load_rows(run):
            if row["strategy"] == "self-route":
                score, tokens = _route_step(row)
                steps[(row["dataset"], row["item_id"])] = WideStep(score, tokens, row.get("decline_probability"),
                                                                   (row.get("calls") or [{}])[0])
    found = []
    for q in questions:
        q.wide = steps.get((q.dataset, q.item_id))
        if q.wide is not None:
            found.append(q)
    return found


def _chain(questions: list[Question]) -> None:
    """Number the runs of questions that read one document: in run order, an LC call that reused most of its prompt
    from the server's cache (recorded while every question went to LC) read the previous question's document."""
    chain = 0
    for previous, q in zip([None, *questions], questions):
        warm = int(q.lc_call.get("cached_prompt_tokens") or 0) >= 0.5 * max(1, q.lc_tokens)
        if previous is None or previous.run != q.run or not warm:
            chain += 1
        q.chain = chain


MODELS = ("logistic", "trees")


def fit_router(questions: list[Question], model: str = "logistic") -> Router:
    """A router (scikit-learn, ``pip install -e '.[route]' in lcrag's checkout``): a logistic regression predicting "LC scores
    better", or boosted regression trees predicting LC's gain over RAG (``model="trees"``: interactions such as
    "the RAG answer declines, yet every key term of the question is in the document", which a linear model cannot
    draw)."""
    if model not in MODELS:
        raise InputError(f"router model must be one of {', '.join(MODELS)}, not {model!r}")
    try:
        import sklearn  # noqa: F401
    except ImportError:
        raise InputError("fitting a router needs scikit-learn: pip install -e '.[route]' in lcrag's checkout") from None
    positives = sum(q.lc_better for q in questions)
    if positives in (0, len(questions)):
        raise InputError(f"cannot fit a router: LC is better on {positives} of {len(questions)} questions")
    if len(questions) < MIN_QUESTIONS:
        warnings.warn(f"fitting a router on only {len(questions)} labelled questions (fewer than {MIN_QUESTIONS}): "
                      "expect it to be mostly noise", stacklevel=2)
    fitted_on = {"questions": len(questions), "positives": positives, "model": model,
                 "datasets": sorted({q.dataset for q in questions}), "runs": sorted({q.run for q in questions})}
    return (_fit_trees if model == "trees" else _fit_logistic)(questions, fitted_on)


def _fit_logistic(questions: list[Question], fitted_on: dict) -> Router:
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    x = np.array([q.x for q in questions], dtype=float)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    # Each question weighs what routing it right is worth: |LC − RAG|, plus TIE_WEIGHT because sending a tie to LC
    # still costs LC's tokens. With graded scores (F1, a judge's probability) a near-tie then teaches little.
    weights = np.array([abs(q.lc_score - q.rag_score) + TIE_WEIGHT for q in questions])
    model = LogisticRegression(C=1.0, max_iter=1000).fit((x - mean) / scale, [q.lc_better for q in questions],
                                                           sample_weight=weights)
    probabilities = model.predict_proba((x - mean) / scale)[:, 1]
    return Router(tuple(mean.tolist()), tuple(scale.tolist()), tuple(model.coef_[0].tolist()),
                  float(model.intercept_[0]), tuple(sorted(probabilities.tolist())), fitted_on)


def _fit_trees(questions: list[Question], fitted_on: dict) -> Router:
    import numpy as np
    from sklearn.ensemble import HistGradientBoostingRegressor

    x = np.array([q.x for q in questions], dtype=float)
    gain = np.array([q.lc_score - q.rag_score for q in questions])
    # Shallow trees, a slow rate, a fixed seed: a few hundred small trees that a JSON file carries. The export reads
    # the fitted model's predictors (scikit-learn has no public tree export for this estimator); the tests check
    # the exported trees predict exactly what scikit-learn predicts, so a change there fails loudly.
    model = HistGradientBoostingRegressor(max_depth=3, max_iter=200, learning_rate=0.05, random_state=0).fit(x, gain)
    trees = Trees(float(np.ravel(model._baseline_prediction)[0]), tuple(
        tuple((-1.0, 0.0, 0.0, 0.0, float(n["value"])) if n["is_leaf"] else
              (float(n["feature_idx"]), float(n["num_threshold"]), float(n["left"]), float(n["right"]), 0.0)
              for n in predictor[0].nodes) for predictor in model._predictors))
    n = len(FEATURES)  # a trees router reads raw features: no scaling, no coefficients
    scores = tuple(sorted(trees.predict(row) for row in x.tolist()))
    return Router((0.0,) * n, (1.0,) * n, (0.0,) * n, 0.0, scores, fitted_on, trees)


@dataclass
class Point:
    """One policy at one setting: which questions it sends to LC, and what that gives."""

    router: str
    setting: str
    to_lc: list[bool]
    quality: float = 0.0
    share: float = 0.0
    tokens: float = 0.0
    interval: tuple[float, float] = field(default=(math.nan, math.nan))
    firsts: list[bool] | None = None  # which questions ran the RAG step first (None: all, or none for always-LC)
    money: float | None = None  # mean USD per question, when priced


def evaluate(questions: list[Question], to_lc: list[bool], rag_first: Sequence[bool] | bool = True
             ) -> tuple[float, float, float]:
    """(mean quality, LC share, mean prompt tokens) of sending ``to_lc`` questions to LC."""
    n = len(questions)
    firsts = [rag_first] * n if isinstance(rag_first, bool) else rag_first
    quality = sum(q.lc_score if lc else q.rag_score for q, lc in zip(questions, to_lc)) / n
    tokens = sum((q.rag_tokens if first else 0) + (q.lc_tokens if lc else 0)
                 for q, lc, first in zip(questions, to_lc, firsts))
    return quality, sum(to_lc) / n, tokens / n


def policies(questions: list[Question], router_probabilities: list[float] | None = None,
             price: Price | None = None) -> list[Point]:
    """Every router at every setting: always-RAG/LC, oracle, Self-Route (text; decline probability thresholds),
    the learned router at each LC share of its own predictions (when given), and, priced, the cache-aware router."""
    n = len(questions)
    points = [Point("always-RAG", "", [False] * n), Point("always-LC", "", [True] * n),
              Point("oracle", "", [q.lc_better for q in questions]),
              Point("self-route (text)", "", [q.text_routed for q in questions])]
    declines = [q.decline for q in questions]
    if any(d is not None for d in declines):
        for share in SHARES[1:-1]:
            t = _threshold([d if d is not None else 0.0 for d in declines], share)
            points.append(Point("self-route P(decline)", f"T={t:.4f}", [(d or 0.0) >= t for d in declines]))
    if router_probabilities is not None:
        for share in SHARES[1:-1]:
            t = _threshold(router_probabilities, share)
            points.append(Point("learned router", f"share {share:.1f}", [p >= t for p in router_probabilities]))
    if router_probabilities is not None and price is not None:
        for share in SHARES[1:-1]:
            to_lc, firsts = cache_aware(questions, router_probabilities, _threshold(router_probabilities, share), price)
            points.append(Point("cache-aware router", f"share {share:.1f}", to_lc, firsts=firsts))
    for point in points:
        firsts = point.firsts if point.firsts is not None else point.router != "always-LC"
        point.quality, point.share, point.tokens = evaluate(questions, point.to_lc, firsts)
        point.money = money(questions, point.to_lc, price, firsts) if price is not None else None
    return points


def _threshold(values: Sequence[float], share: float) -> float:
    """The smallest value that sends about ``share`` of questions to LC (values at or above it)."""
    ranked = sorted(values, reverse=True)
    return ranked[max(0, min(len(ranked) - 1, math.ceil(share * len(ranked)) - 1))]


def money(questions: list[Question], to_lc: list[bool], price: Price, rag_first: Sequence[bool] | bool = True) -> float:
    """Mean cost per question in USD when ``to_lc`` questions go to LC: RAG's call where RAG runs first, and LC's,
    whose document prefix is billed at the cached price only if this policy already sent an earlier question of the
    same document (chain) to LC, so the server holds it."""
    firsts = [rag_first] * len(questions) if isinstance(rag_first, bool) else rag_first
    read: set[int] = set()
    total = 0.0
    for q, lc, first in zip(questions, to_lc, firsts):
        if first:
            c = q.rag_call
            total += price.cost(int(c.get("prompt_tokens") or q.rag_tokens), int(c.get("completion_tokens") or 0),
                                int(c.get("cached_prompt_tokens") or 0))
        if lc:
            c = q.lc_call
            cached = int(c.get("cached_prompt_tokens") or 0) if q.chain in read else 0
            total += price.cost(int(c.get("prompt_tokens") or q.lc_tokens), int(c.get("completion_tokens") or 0),
                                cached)
            read.add(q.chain)
    return total / len(questions)


def cache_aware(questions: list[Question], probabilities: list[float], threshold: float,
                price: Price) -> tuple[list[bool], list[bool]]:
    """The learned router, aware of the prefix cache: a question whose document was just read in full (an earlier
    question of its chain went to LC) goes straight to LC, without the RAG step, when LC with the cached prefix costs
    no more than the RAG step; other questions are routed as usual. Returns (to LC, ran RAG first)."""
    read: set[int] = set()
    to_lc, firsts = [], []
    for q, p in zip(questions, probabilities):
        c, r = q.lc_call, q.rag_call
        warm_lc = price.cost(q.lc_tokens, int(c.get("completion_tokens") or 0), int(c.get("cached_prompt_tokens") or 0))
        rag = price.cost(q.rag_tokens, int(r.get("completion_tokens") or 0), int(r.get("cached_prompt_tokens") or 0))
        direct = q.chain in read and warm_lc <= rag
        lc = direct or p >= threshold
        to_lc.append(lc)
        firsts.append(not direct)
        if lc:
            read.add(q.chain)
    return to_lc, firsts


@dataclass
class CascadePoint:
    """RAG -> wider RAG -> LC at one pair of gates: the share escalated at each step and what that gives."""

    setting: str
    scores: list[float]
    tokens: float
    wide_share: float
    lc_share: float
    money: float | None = None


def _call_cost(price: Price, call: dict, tokens: int, cached: bool = True) -> float:
    return price.cost(int(call.get("prompt_tokens") or tokens), int(call.get("completion_tokens") or 0),
                      int(call.get("cached_prompt_tokens") or 0) if cached else 0)


def cascade_point(questions: list[Question], t1: float, t2: float, price: Price | None) -> CascadePoint:
    """Every question runs RAG; those with P(decline) >= t1 run the wide step; of those, P(decline) >= t2 go to LC
    (the LC prefix billed as cached only after this policy sent an earlier question of the document to LC)."""
    scores, tokens, wide, lc, usd, read = [], 0, 0, 0, 0.0, set()
    for q in questions:
        score, spent = q.rag_score, q.rag_tokens
        usd += _call_cost(price, q.rag_call, q.rag_tokens) if price else 0.0
        if (q.decline or 0.0) >= t1:
            wide += 1
            score, spent = q.wide.score, spent + q.wide.tokens
            usd += _call_cost(price, q.wide.call, q.wide.tokens) if price else 0.0
            if (q.wide.decline or 0.0) >= t2:
                lc += 1
                score, spent = q.lc_score, spent + q.lc_tokens
                usd += _call_cost(price, q.lc_call, q.lc_tokens, q.chain in read) if price else 0.0
                read.add(q.chain)
        scores.append(score)
        tokens += spent
    n = len(questions)
    return CascadePoint(f"T1={t1:.4f} T2={t2:.4f}", scores, tokens / n, wide / n, lc / n, usd / n if price else None)


def cascades(questions: list[Question], price: Price | None = None) -> list[CascadePoint]:
    """Cascades over a grid of gates: the first gate sends 20–80% of questions to the wide step, the second sends
    25–100% of those on to LC (thresholds at those shares of the recorded decline probabilities)."""
    first = [q.decline or 0.0 for q in questions]
    gates: dict[tuple[float, float], None] = {}  # a small sample gives the same gates for several shares: once each
    for s1 in (0.2, 0.4, 0.6, 0.8):
        t1 = _threshold(first, s1)
        escalated = [q.wide.decline or 0.0 for q in questions if (q.decline or 0.0) >= t1]
        for s2 in (0.25, 0.5, 0.75, 1.0):
            gates[(t1, _threshold(escalated, s2) if s2 < 1.0 else 0.0)] = None
    return [cascade_point(questions, t1, t2, price) for t1, t2 in gates]


def at_equal_cost(points: list[Point], router: str, tokens: float) -> float:
    """A two-way router's quality at ``tokens`` mean prompt tokens, interpolated along its frontier (its points
    with RAG first, from always-RAG to every question also sent to LC); NaN outside the frontier's range."""
    mine = sorted(((p.tokens, p.quality) for p in points if p.router in (router, "always-RAG")))
    for (x0, y0), (x1, y1) in zip(mine, mine[1:]):
        if x0 <= tokens <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (tokens - x0) / (x1 - x0)
    return math.nan


def _or_dash(value: float, form: str = "{:.4f}") -> str:
    """A figure, or a dash where there is none (a two-way router cannot spend that much; the oracle sends more than
    half its questions to LC)."""
    return "—" if math.isnan(value) else form.format(value)


def cascade_table(questions: list[Question], points: list[Point], price: Price | None) -> tuple[list[str], list[list]]:
    """Each cascade point beside the two-way routers (decline-probability threshold; learned router) at the same
    mean prompt tokens, on the questions the wide run answered."""
    header = ["cascade gates", "quality", "95% CI", "to wide RAG", "to LC", "prompt tokens / question",
              *(["USD / 1K questions"] if price else []), "self-route P(decline) at equal tokens",
              "learned router at equal tokens"]
    body = []
    for c in cascades(questions, price):
        low, high = bootstrap_scores(c.scores)
        body.append([c.setting, f"{sum(c.scores) / len(c.scores):.4f}", f"{low:.3f}–{high:.3f}",
                     f"{c.wide_share:.2f}", f"{c.lc_share:.2f}", f"{c.tokens:.0f}",
                     *([f"{1000 * c.money:.3f}"] if price else []),
                     *(_or_dash(at_equal_cost(points, name, c.tokens))
                       for name in ("self-route P(decline)", "learned router"))])
    return header, body


def random_quality(questions: list[Question], share: float) -> float:
    """Expected quality of sending a random ``share`` of questions to LC."""
    return sum(share * q.lc_score + (1 - share) * q.rag_score for q in questions) / len(questions)


def pgr(quality: float, q_rag: float, q_lc: float) -> float:
    return (quality - q_rag) / (q_lc - q_rag) if q_lc != q_rag else math.nan


def apgr_and_cpt(curve: list[tuple[float, float]], q_rag: float, q_lc: float) -> tuple[float, float, float]:
    """APGR and CPT(50%), CPT(80%) of a router's (LC share, quality) points, with always-RAG and always-LC as the
    curve's ends; NaN when LC and RAG score the same (no gap to recover)."""
    if q_lc == q_rag:
        return math.nan, math.nan, math.nan
    points = sorted({(0.0, 0.0), (1.0, 1.0), *((s, pgr(q, q_rag, q_lc)) for s, q in curve)})
    area = sum((s1 - s0) * (p0 + p1) / 2 for (s0, p0), (s1, p1) in zip(points, points[1:]))
    cpt = [next((s for s, p in points if p >= x), math.nan) for x in (0.5, 0.8)]
    return area, cpt[0], cpt[1]


def bootstrap(questions: list[Question], to_lc: list[bool], resamples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of a policy's mean quality, resampling questions."""
    return bootstrap_scores([q.lc_score if lc else q.rag_score for q, lc in zip(questions, to_lc)], resamples, seed)


def bootstrap_scores(scores: list[float], resamples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean of per-question scores, resampling questions."""
    rng = random.Random(seed)
    n = len(scores)
    means = sorted(sum(scores[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def leave_one_out(questions: list[Question], group: Callable[[Question], str] = lambda q: q.dataset,
                  model: str = "logistic") -> list[float]:
    """Each question's router probability from a router fitted on the other groups only (its own never seen): by
    dataset (the default), by run (a reader's recorded answers: leave-one-reader-out), or any other grouping.
    Groups whose complement cannot be fitted (one class only) get 0.5."""
    routers = routers_left_out(questions, group, model)
    return [routers[group(q)].probability(q.x) if routers[group(q)] else 0.5 for q in questions]


def routers_left_out(questions: list[Question], group: Callable[[Question], str] = lambda q: q.dataset,
                     model: str = "logistic") -> dict[str, Router | None]:
    """Per group, the router fitted on the other groups (None where they hold one class only)."""
    routers: dict[str, Router | None] = {}
    for name in sorted({group(q) for q in questions}):
        train = [q for q in questions if group(q) != name]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                routers[name] = fit_router(train, model)
        except InputError:
            routers[name] = None
    return routers


def leave_one_dataset_out(questions: list[Question], model: str = "logistic") -> list[float]:
    """:func:`leave_one_out` by dataset."""
    return leave_one_out(questions, model=model)


def frontier_table(questions: list[Question], points: list[Point]) -> tuple[list[str], list[list]]:
    """Markdown rows: every policy point with its quality (and interval), LC share, tokens and PGR."""
    lc = next(p for p in points if p.router == "always-LC")
    rag = next(p for p in points if p.router == "always-RAG")
    priced = lc.money is not None
    header = ["router", "setting", "quality", "95% CI", "LC share", "prompt tokens / question", "% of LC tokens",
              *(["USD / 1K questions", "% of LC cost"] if priced else []), "PGR", "random at this share"]
    body = []
    for p in points:
        p.interval = bootstrap(questions, p.to_lc)
        cost = [f"{1000 * p.money:.3f}", f"{100 * p.money / lc.money:.1f}"] if priced and lc.money else []
        body.append([p.router, p.setting, f"{p.quality:.4f}", f"{p.interval[0]:.3f}–{p.interval[1]:.3f}",
                     f"{p.share:.2f}", f"{p.tokens:.0f}", f"{100 * p.tokens / lc.tokens:.1f}", *cost,
                     _or_dash(pgr(p.quality, rag.quality, lc.quality), "{:.2f}"),
                     f"{random_quality(questions, p.share):.4f}"])
    return header, body


def by_router(points: list[Point], name: str) -> Point:
    """The (first) point of the router called ``name``: always-LC, always-RAG, the oracle have one."""
    return next(p for p in points if p.router == name)


def cost_of(point: Point) -> float:
    """What a policy costs per question: USD when priced, else prompt tokens."""
    return point.money if point.money is not None else point.tokens


def operating_point(points: list[Point], router: str = "learned router", max_share: float = MAX_SHARE,
                    max_cost: float = MAX_COST) -> Point | None:
    """A router's best setting within the budget: LC share <= ``max_share`` (a setting's realized share may pass its
    nominal one by a question's worth: ties at the threshold) and cost <= ``max_cost`` of always-LC's; None when no
    setting fits. The operating point of benchmarks/results/routing_lara.md."""
    lc = by_router(points, "always-LC")
    fits = [p for p in points if p.router == router and p.share <= max_share + 1 / len(p.to_lc) + 1e-9
            and cost_of(p) <= max_cost * cost_of(lc)]
    return max(fits, key=lambda p: p.quality, default=None)


def oracle_gain_recovered(quality: float, points: list[Point]) -> float:
    """The share of the oracle's gain over the better fixed policy that ``quality`` recovers: (quality − max(LC,
    RAG)) / (oracle − max(LC, RAG)), routing_lara.md's "oracle gain recovered"; NaN where the oracle gains nothing."""
    best_fixed = max(by_router(points, "always-LC").quality, by_router(points, "always-RAG").quality)
    oracle = by_router(points, "oracle").quality
    return (quality - best_fixed) / (oracle - best_fixed) if oracle > best_fixed else math.nan


def summary_table(points: list[Point], max_share: float = MAX_SHARE,
                  max_cost: float = MAX_COST) -> tuple[list[str], list[list]]:
    """Per router: APGR, CPT(50%), CPT(80%), its operating point (:func:`operating_point`), the oracle gain it
    recovers there (:func:`oracle_gain_recovered`) and its difference to always-LC."""
    lc = by_router(points, "always-LC").quality
    rag = by_router(points, "always-RAG").quality
    header = ["router", "APGR", "CPT(50%)", "CPT(80%)",
              f"operating point: best at LC share ≤ {max_share:.0%}, cost ≤ {max_cost:.0%} of always-LC "
              "(quality @ share)",
              "oracle gain recovered", "vs always-LC"]
    body = []
    for name in dict.fromkeys(p.router for p in points if not p.router.startswith("always-")):
        area, c50, c80 = apgr_and_cpt([(p.share, p.quality) for p in points if p.router == name], rag, lc)
        best = operating_point(points, name, max_share, max_cost)
        # no setting within the budget (the oracle sends more than that to LC), no gap between LC and RAG, a PGR
        # never reached: a dash, not nan
        gain = oracle_gain_recovered(best.quality, points) if best else math.nan
        body.append([name, _or_dash(area, "{:.3f}"), _or_dash(c50, "{:.2f}"), _or_dash(c80, "{:.2f}"),
                     f"{best.quality:.4f} @ {best.share:.2f}" if best else "—", _or_dash(100 * gain, "{:.1f}%"),
                     f"{best.quality - lc:+.4f}" if best else "—"])
    return header, body


SUMMARY_NOTE = ("oracle gain recovered = (quality at the operating point − max(always-LC, always-RAG)) / (oracle − "
                "max(always-LC, always-RAG)), as benchmarks/results/routing_lara.md defines it.")


def split_length(dataset: str) -> tuple[str, str]:
    """A dataset named for its documents' length (``lara-32k``) as (name, length); any other as (name, "—")."""
    found = re.fullmatch(r"(.+?)[-_](\d+[kKmM])", dataset)
    return (found.group(1), found.group(2).lower()) if found else (dataset, "—")


def cell_of(q: Question) -> tuple[str, str, str]:
    """The cell a question is reported in: its run (one reader), its dataset and its documents' length."""
    return (q.run, *split_length(q.dataset))


def cells(questions: list[Question]) -> dict[tuple[str, str, str], list[int]]:
    """The questions' indices per cell (:func:`cell_of`), cells sorted."""
    found: dict[tuple[str, str, str], list[int]] = {}
    for i, q in enumerate(questions):
        found.setdefault(cell_of(q), []).append(i)
    return dict(sorted(found.items()))


def plot_frontier(points: list[Point], path: Path) -> bool:
    """Quality against mean prompt tokens, one series per router; False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in dict.fromkeys(p.router for p in points):
        mine = sorted((p for p in points if p.router == name), key=lambda p: p.tokens)
        ax.plot([p.tokens for p in mine], [p.quality for p in mine], marker="o", label=name,
                linestyle="-" if len(mine) > 1 else "none")
    ax.set_xlabel("mean prompt tokens per question")
    ax.set_ylabel("mean score")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


__all__ = ["FEATURES", "MAX_COST", "MAX_SHARE", "CascadePoint", "Point", "Question", "WideStep", "apgr_and_cpt",
           "at_equal_cost", "attach_wide", "bootstrap", "by_router", "cascade_table", "cascades", "cell_of", "cells",
           "evaluate", "fit_router", "frontier_table", "leave_one_dataset_out", "leave_one_out", "load_questions",
           "operating_point", "oracle_gain_recovered", "plot_frontier", "policies", "summary_table"]
