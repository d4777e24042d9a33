"""Routing with strong readers, from LaRA's recorded answers: every router per reader and length, leave-one-reader-out.

Input: one `lcrag eval` run directory per reader, made from its recordings (benchmarks/run_eval_lara.sh):

    lcrag eval --dataset ../shared/data/lara --reader replay:../shared/data/lara/predictions/READER \
        --strategies lc,self-route --chunking sentence-splitter:600:100 -k 5 --out runs/lara/READER

Each question's LC answer and Self-Route RAG step are the reader's recorded LC and RAG answers, scored by the
offline scorer validated against LaRA's judge (benchmarks/results/lara_scorer.md); prompt tokens are what lcrag's
own prompts cost by the stand-in tokenizer; the router's features come from lcrag's own retrieval on the document.
The learned router for each reader is fitted on the other readers only (leave-one-reader-out); a second table
fits it leaving one document type out. The router fitted on the training part is written with --router-out (the
one lcrag ships as `--router lara`).

Everything is fitted, selected and calibrated on the locked split's training part only (issue 44:
lcrag.evaluation.locked_split; the other seven readers on the other documents): the test part (three readers on
30% of the documents) is read only by --test-router FILE, which scores it once, held at LC share 0.3.

    python benchmarks/route_lara.py runs/lara/* --out benchmarks/results/routing_lara.md \
        --plots benchmarks/results/routing_lara --router-out src/lcrag/strategies/routing/routers/lara.json
"""

from __future__ import annotations

import argparse
import hashlib
import math
import platform
import sys
import warnings
import zlib
from dataclasses import replace
from pathlib import Path

from lcrag.core.errors import InputError
from lcrag.evaluation.datasets import load_dataset
from lcrag.evaluation.routing.held_share import held_decisions
from lcrag.evaluation.locked_split import LockedSplit, fit_training_router
from lcrag.evaluation.prices import PriceTable
from lcrag.evaluation.report import _md_table
from lcrag.evaluation.routing.report import (
    MAX_COST, Point, Question, apgr_and_cpt, bootstrap, bootstrap_scores, evaluate, leave_one_out,
    load_questions, money, operating_point, oracle_gain_recovered, policies, random_quality, routers_left_out,
)
from lcrag.core.files import atomic_write_text
from lcrag.strategies.routing.learned import Router, declining
from lcrag.strategies.routing.calibration import (
    PRIOR_STRENGTH, Label, RoutingCalibration, answers_agree, disagreement_rates, group_of, router_prior,
)
from lcrag.strategies.routing.share_control import HORIZON, ShareTarget
from lcrag.core.types import Document
from lock_lara_split import reader_styles, style_table  # benchmarks/: the script that chose the split

MODEL = "trees"  # boosted trees on LC's gain: the logistic router cannot draw "declines, yet the terms are there"
DEFAULT_SHARE = 0.3  # the shipped router's operating point: LC share 30% (cost under 45% of LC's at 32K)
LOCK_COMMIT = "1134295450654312b21dff554361892f6c6c5e89"  # the commit that locked LaRA's test set (issue 44)


def reader_of(q: Question) -> str:
    return Path(q.run).name


def length_of(q: Question) -> str:
    return q.dataset.rsplit("-", 1)[-1]  # lara-32k -> 32k


def doc_type_of(q: Question) -> str:
    return q.item_id.split("/")[0].split("_")[1]  # 32k_book_location/17 -> book


def by_point(points: list[Point], name: str) -> Point:
    return next(p for p in points if p.router == name)


def at_share(points: list[Point], share: float) -> float:
    """The learned router's quality at an LC share, interpolated between its settings (always-RAG at 0)."""
    curve = sorted([(0.0, by_point(points, "always-RAG").quality)]
                   + [(p.share, p.quality) for p in points if p.router == "learned router"])
    for (s0, q0), (s1, q1) in zip(curve, curve[1:]):
        if s0 <= share <= s1:
            return q0 if s1 == s0 else q0 + (q1 - q0) * (share - s0) / (s1 - s0)
    return curve[-1][1]


def cell_rows(questions: list[Question], probabilities: list[float], prices: PriceTable) -> tuple[list, list, list]:
    """Per reader and length: the summary row, the frontier rows, and the points (for plots)."""
    summary, frontier, plotted = [], [], []
    cells = sorted({(reader_of(q), length_of(q)) for q in questions})
    for reader, length in cells:
        mine = [i for i, q in enumerate(questions) if (reader_of(q), length_of(q)) == (reader, length)]
        qs, ps = [questions[i] for i in mine], [probabilities[i] for i in mine]
        price = prices.prices.get(reader)
        points = policies(qs, ps, price)
        summary.append(summarise(reader, length, qs, points))
        frontier += [[reader, length, *row] for row in frontier_rows(qs, points)]
        plotted.append((reader, length, points))
    return summary, frontier, plotted


def summarise(reader: str, length: str, qs: list[Question], points: list[Point]) -> list:
    lc, rag, oracle = by_point(points, "always-LC"), by_point(points, "always-RAG"), by_point(points, "oracle")
    text = by_point(points, "self-route (text)")
    best = operating_point(points)  # route_report's: the one `lcrag route eval` reports
    gain = oracle_gain_recovered(best.quality, points) if best else math.nan
    area, c50, c80 = apgr_and_cpt([(p.share, p.quality) for p in points if p.router == "learned router"],
                                  rag.quality, lc.quality)
    cost = (best.money / lc.money) if best and best.money and lc.money else (best.tokens / lc.tokens if best else math.nan)
    learned_at_text = at_share(points, text.share)
    low, high = bootstrap(qs, best.to_lc) if best else (math.nan, math.nan)
    TARGETS.append({"reader": reader, "length": length, "lc_beats_rag": lc.quality > rag.quality,
                    "vs_lc": best.quality - lc.quality if best else math.nan, "gain": gain, "cost": cost,
                    "vs_rule": learned_at_text - text.quality, "share": best.share if best else math.nan})
    return [reader, length, len(qs), f"{lc.quality:.3f}", f"{rag.quality:.3f}", f"{oracle.quality:.3f}",
            f"{text.quality:.3f} @ {text.share:.2f}", f"{learned_at_text:.3f}",
            f"{best.quality:.3f} ({low:.3f}–{high:.3f}) @ {best.share:.1f}" if best else "—",
            f"{100 * cost:.0f}%", f"{100 * gain:.0f}%" if not math.isnan(gain) else "—",
            f"{best.quality - lc.quality:+.3f}" if best else "—", f"{area:.2f}", f"{c50:.2f}", f"{c80:.2f}",
            "yes" if lc.quality > rag.quality else "no"]


TARGETS: list[dict] = []  # the operating point of every (reader, length), for the targets paragraph


def targets_paragraph(cells: list[dict]) -> list[str]:
    """Where each target of the issue stands, over the (reader, length) cells."""
    lc_wins = [c for c in cells if c["lc_beats_rag"]]
    held = [c for c in lc_wins if c["vs_lc"] >= 0]
    gains = [c["gain"] for c in cells if not math.isnan(c["gain"])]
    rule = [c for c in cells if c["vs_rule"] > 0]
    cheap = [c for c in cells if c["cost"] <= MAX_COST]
    worst = min(lc_wins, key=lambda c: c["vs_lc"], default=None)
    return [f"- Quality ≥ always-LC at LC share ≤ 40% where LC beats RAG: **{len(held)} of {len(lc_wins)}** (reader, "
            f"length) cells" + (f"; the worst, {worst['reader']} {worst['length']}, is {worst['vs_lc']:+.3f}."
                                if worst and worst["vs_lc"] < 0 else "."),
            (f"- Oracle gain over max(LC, RAG) recovered, mean over cells: **{100 * sum(gains) / len(gains):.0f}%** "
             f"(target ≥ 50%; per cell from {100 * min(gains):.0f}% to {100 * max(gains):.0f}%)." if gains else
             "- Oracle gain over max(LC, RAG) recovered: no cell has one defined (no operating point within the "
             "budget, or no oracle gain over max(LC, RAG))."),
            f"- Cost ≤ 45% of always-LC's: **{len(cheap)} of {len(cells)}** cells (the operating point is chosen "
            "within that budget; where none fits, the cell shows —).",
            f"- Better than Self-Route's written rule at the rule's own LC share: **{len(rule)} of {len(cells)}** cells."]


SUMMARY_HEADER = ["reader", "length", "questions", "always-LC", "always-RAG", "oracle", "Self-Route rule @ LC share",
                  "learned @ rule's share", "learned at LC ≤ 40%, cost ≤ 45% (95% CI) @ share", "cost vs LC",
                  "oracle gain recovered", "vs always-LC", "APGR", "CPT(50%)", "CPT(80%)", "LC beats RAG"]


def frontier_rows(qs: list[Question], points: list[Point]) -> list[list]:
    lc = by_point(points, "always-LC")
    rows = []
    for p in points:
        if p.router.startswith("self-route P(") or p.router == "cache-aware router":
            continue  # recordings have no log-probabilities; the cache-aware router needs a server's prefix cache
        low, high = bootstrap(qs, p.to_lc)
        usd = f"{1000 * p.money:.2f}" if p.money is not None else "—"
        rows.append([p.router, p.setting, f"{p.quality:.3f}", f"{low:.3f}–{high:.3f}", f"{p.share:.2f}",
                     f"{p.tokens:.0f}", usd, f"{100 * (p.money or p.tokens) / (lc.money or lc.tokens):.0f}%",
                     f"{random_quality(qs, p.share):.3f}"])
    return rows


FRONTIER_HEADER = ["reader", "length", "router", "setting", "quality", "95% CI", "LC share", "prompt tokens / q",
                   "USD / 1K q", "% of LC cost", "random at this share"]


WARM_UP = 100  # the questions of a (reader, length) cell before its realized share is held to +-0.05
HELD_SHARE = 0.3
DOCUMENT_FOLDS = 5  # unseen documents: each held reader's documents in five folds, a router fitted per fold


def held_by_reader(questions: list[Question], scores: list[float], calibrations: dict,
                   horizon: float = HORIZON, declined: list[bool] | None = None) -> list[bool]:
    """Run-time share control at HELD_SHARE on the routers' ``scores``: every reader's questions decided in the
    order its run answered them (32K and 128K in one stream: one ledger per reader), warm-started from
    ``calibrations[reader]`` (the scores of the questions its routers were fitted on), errors paid back over
    ``horizon`` questions; ``declined`` questions go to LC whatever their score."""
    decisions = [False] * len(questions)
    for reader, calibration in calibrations.items():
        mine = [i for i, q in enumerate(questions) if reader_of(q) == reader]
        held = held_decisions([questions[i] for i in mine], [scores[i] for i in mine], ShareTarget(HELD_SHARE),
                              calibration, horizon, None if declined is None else [declined[i] for i in mine])
        for i, sent in zip(mine, held):
            decisions[i] = sent
    return decisions


def dataset_items(dataset: Path) -> dict:
    """The items of the dataset the runs were made from, by (dataset, id)."""
    return {(item.dataset, item.id): item for item in load_dataset(dataset).items}


def document_keys(items: dict, questions: list[Question]) -> list[str]:
    """Each question's document: a digest of its item's context (the item id where the dataset does not hold it)."""
    keys = []
    for q in questions:
        item = items.get((q.dataset, q.item_id))
        keys.append(hashlib.sha256(item.context.encode()).hexdigest() if item and item.context else q.item_id)
    return keys


def unseen_document_scores(questions: list[Question], documents: list[str],
                           split: LockedSplit) -> tuple[list[float], dict]:
    """Each question's score by a router fitted on the other readers' questions about other documents
    (DOCUMENT_FOLDS folds of documents): no router saw another reader's answer to the same question, or any
    question on its document — what a router meets on a user's own documents. The scores, and each reader's
    calibration (its first fold's)."""
    folds = [zlib.crc32(d.encode()) % DOCUMENT_FOLDS for d in documents]
    scores, calibrations = [0.0] * len(questions), {}
    for reader in sorted({reader_of(q) for q in questions}):
        for fold in range(DOCUMENT_FOLDS):
            train = [q for q, f in zip(questions, folds) if reader_of(q) != reader and f != fold]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                router = fit_training_router(train, split, MODEL)
            calibrations.setdefault(reader, router.calibration)
            for i, (q, f) in enumerate(zip(questions, folds)):
                if reader_of(q) == reader and f == fold:
                    scores[i] = router.probability(q.x)
    return scores, calibrations


def unseen_rows(questions: list[Question], documents: list[str], loro_held: list[bool],
                prices: PriceTable, split: LockedSplit) -> tuple[list[list], list[str]]:
    """Per (reader, length): run-time control at 0.3 with leave-one-reader-out routers (as above) against the same
    with routers that have not seen the documents either; and the summary lines."""
    scores, calibrations = unseen_document_scores(questions, documents, split)
    unseen = held_by_reader(questions, scores, calibrations)
    rows, cells = [], []
    for reader, length in sorted({(reader_of(q), length_of(q)) for q in questions}):
        mine = [i for i, q in enumerate(questions) if (reader_of(q), length_of(q)) == (reader, length)]
        qs = [questions[i] for i in mine]
        lc, rag = evaluate(qs, [True] * len(qs), False)[0], evaluate(qs, [False] * len(qs))[0]
        seen, new = evaluate(qs, [loro_held[i] for i in mine])[0], evaluate(qs, [unseen[i] for i in mine])[0]
        lc_cost = cost_of(qs, [True] * len(qs), False, prices.prices.get(reader))
        cost = cost_of(qs, [unseen[i] for i in mine], True, prices.prices.get(reader)) / lc_cost
        cells.append({"lc": lc, "rag": rag, "seen": seen, "new": new, "cost": cost, "reader": reader,
                      "length": length})
        rows.append([reader, length, len(qs), f"{lc:.3f}", f"{rag:.3f}", f"{seen:.3f}", f"{seen - lc:+.3f}",
                     f"{new:.3f}", f"{new - lc:+.3f}", f"{sum(unseen[i] for i in mine) / len(qs):.3f}",
                     f"{100 * cost:.0f}%", "yes" if lc > rag else "no"])
    return rows, unseen_paragraph(cells)


def unseen_paragraph(cells: list[dict]) -> list[str]:
    wins = [c for c in cells if c["lc"] > c["rag"]]

    def mean(key: str) -> float:
        return sum(c[key] - max(c["lc"], c["rag"]) for c in cells) / len(cells)

    def above(key: str) -> str:
        return f"**{sum(c[key] >= c['lc'] for c in wins)} of {len(wins)}**"

    return [f"- Quality ≥ always-LC where LC beats RAG: {above('seen')} cells with leave-one-reader-out routers, "
            f"{above('new')} "
            "with routers that have not seen the documents either.",
            f"- Mean over the {len(cells)} cells of quality − max(always-LC, always-RAG): **{mean('seen'):+.4f}** "
            f"(leave-one-reader-out), **{mean('new'):+.4f}** (unseen documents too); cost at most "
            f"{100 * max(c['cost'] for c in cells):.0f}% of always-LC's."]


def held_rows(questions: list[Question], routers: dict, scores: list[float],
              prices: PriceTable) -> tuple[list[list], list[dict], list]:
    """Per (reader, length): the shipped-style fixed threshold (calibrated for 0.3 on the other readers) against
    run-time control at 0.3, both with the reader's leave-one-reader-out router (``scores``: its scores)."""
    held = held_by_reader(questions, scores, {reader: router.calibration for reader, router in routers.items()})
    cut = hindsight_cuts(questions, scores)
    rows, cells = [], []
    for reader, length, mine in reader_cells(questions):
        fixed = routers[reader].threshold_for_share(HELD_SHARE)
        cell = held_cell([questions[i] for i in mine], [held[i] for i in mine], [scores[i] >= fixed for i in mine],
                         prices.prices.get(reader))
        hindsight = evaluate([questions[i] for i in mine], [cut[i] for i in mine])[0]
        cells.append(dict(cell, reader=reader, length=length, hindsight=hindsight))
        rows.append([reader, length, len(mine), *held_cell_row(cells[-1])])
    return rows, cells, held


def reader_cells(questions: list[Question]) -> list[tuple[str, str, list[int]]]:
    """Each (reader, length) and the indices of its questions, in run order."""
    cells = {}
    for i, q in enumerate(questions):
        cells.setdefault((reader_of(q), length_of(q)), []).append(i)
    return [(reader, length, mine) for (reader, length), mine in sorted(cells.items())]


def hindsight_cuts(questions: list[Question], scores: list[float]) -> list[bool]:
    """In each (reader, length) cell, the HELD_SHARE of its questions the router scores highest: a cut no router
    answering one question at a time can make (it knows every score of the cell), which tells what the ranking
    alone is worth."""
    cut = [False] * len(questions)
    for _, _, mine in reader_cells(questions):
        for i in sorted(mine, key=lambda i: -scores[i])[:round(HELD_SHARE * len(mine))]:
            cut[i] = True
    return cut


HORIZONS = (HORIZON, 30, 100)  # the shipped horizon and two slower ones
SHUFFLES = (0, 1, 2)  # seeds of the mixed orders


def horizon_rows(questions: list[Question], routers: dict, scores: list[float], shipped: list[bool],
                 prices: PriceTable) -> list[list]:
    """What holding the share question by question costs: run-time control at 0.3 with errors paid back over a few
    horizons (``shipped``: the decisions at the shipped one; a slower one lets a block of high-scoring questions take
    more LC), with each cell's questions in a mixed order, and the hindsight cut."""
    calibrations = {reader: router.calibration for reader, router in routers.items()}
    rows = [policy_row(f"held, errors paid back over {h:g} questions" + (" (shipped)" if h == HORIZON else ""),
                       questions, shipped if h == HORIZON else held_by_reader(questions, scores, calibrations, h),
                       prices) for h in HORIZONS]
    for seed in SHUFFLES:
        order = mixed_order(questions, seed)
        mixed = [questions[i] for i in order]
        rows.append(policy_row(f"held as shipped, each cell's questions in a random order (seed {seed})", mixed,
                               held_by_reader(mixed, [scores[i] for i in order], calibrations), prices))
    declined = [rag_declines(q) for q in questions]
    rows.append(policy_row(f"held as shipped, with `--option declines_to_lc=true` (RAG declines: "
                           f"{sum(declined) / len(declined):.0%} of answers)", questions,
                           held_by_reader(questions, scores, calibrations, declined=declined), prices))
    return [*rows, policy_row("hindsight cut at each cell's own 0.3 quantile", questions,
                              hindsight_cuts(questions, scores), prices)]


def rag_declines(q: Question) -> bool:
    """The question's RAG answer declines, as ``declines_to_lc`` reads it."""
    return declining(q.texts.get("rag") or "")


def mixed_order(questions: list[Question], seed: int) -> list[int]:
    """The questions' indices with each (reader, length) cell shuffled in place: cells still come one after the
    other, as the runs answered them, but the tasks within a cell mixed."""
    import random

    rng, order = random.Random(seed), []
    for _, _, mine in sorted(reader_cells(questions), key=lambda cell: cell[2][0]):
        order += rng.sample(mine, len(mine))
    return order


def policy_row(name: str, questions: list[Question], sent: list[bool], prices: PriceTable) -> list:
    """One routing of every question, in the order given, against the targets over the (reader, length) cells."""
    cells = [held_cell([questions[i] for i in mine], [sent[i] for i in mine], [sent[i] for i in mine],
                       prices.prices.get(reader)) for reader, _, mine in reader_cells(questions)]
    wins = [c for c in cells if c["lc"] > c["rag"]]
    return [name, f"{max(c['worst'] for c in cells):.3f}", f"{sum(c['worst'] <= 0.05 for c in cells)} of {len(cells)}",
            f"{100 * max(c['cost'] for c in cells):.0f}%", f"{sum(c['held'] >= c['lc'] for c in wins)} of {len(wins)}",
            f"{min(c['held'] - c['lc'] for c in wins):+.3f}",
            f"{sum(c['held'] - max(c['lc'], c['rag']) for c in cells) / len(cells):+.4f}"]


def held_cell(qs: list[Question], held: list[bool], fixed: list[bool], price) -> dict:
    running, sent = [], 0
    for i, to_lc in enumerate(held, 1):
        sent += to_lc
        running.append(sent / i)
    lc_cost = cost_of(qs, [True] * len(qs), False, price)
    return {"lc": evaluate(qs, [True] * len(qs), False)[0], "rag": evaluate(qs, [False] * len(qs))[0],
            "held": evaluate(qs, held)[0], "fixed": evaluate(qs, fixed)[0],
            "share": sum(held) / len(held), "after": sum(held[WARM_UP:]) / max(1, len(held) - WARM_UP),
            "worst": max((abs(r - HELD_SHARE) for r in running[WARM_UP - 1:]), default=0.0),
            "fixed_share": sum(fixed) / len(fixed), "cost": cost_of(qs, held, True, price) / lc_cost,
            "fixed_cost": cost_of(qs, fixed, True, price) / lc_cost,
            # paired: the same questions resampled for both policies, so the interval is of the difference itself
            "vs_lc_ci": bootstrap_scores([(0.0 if lc else q.rag_score - q.lc_score) for q, lc in zip(qs, held)])}


def cost_of(qs: list[Question], to_lc: list[bool], rag_first: bool, price) -> float:
    return money(qs, to_lc, price, rag_first) if price is not None else evaluate(qs, to_lc, rag_first)[2]


def held_cell_row(c: dict) -> list:
    return [f"{c['lc']:.3f}", f"{c['rag']:.3f}", f"{c['fixed']:.3f} @ {c['fixed_share']:.2f}",
            f"{100 * c['fixed_cost']:.0f}%", f"{c['held']:.3f}", f"{c['share']:.3f}", f"{c['after']:.3f}",
            f"{c['worst']:.3f}", f"{100 * c['cost']:.0f}%",
            f"{c['held'] - c['lc']:+.3f} ({c['vs_lc_ci'][0]:+.3f} to {c['vs_lc_ci'][1]:+.3f})",
            f"{c['hindsight']:.3f}", "yes" if c["lc"] > c["rag"] else "no"]


HELD_HEADER = ["reader", "length", "questions", "always-LC", "always-RAG", "fixed threshold (calibrated 0.3) @ share",
               "its cost vs LC", "held at 0.3: quality", "LC share", f"share after {WARM_UP}",
               f"max abs(running share - 0.3) after {WARM_UP}", "cost vs LC", "vs always-LC (paired 95% CI)",
               "hindsight cut at the cell's 0.3 quantile: quality", "LC beats RAG"]

HORIZON_HEADER = ["policy (LORO routers, LC share 0.3)", f"max abs(running share - 0.3) after {WARM_UP}",
                  "cells within 0.05", "max cost vs LC", "quality >= always-LC where LC beats RAG",
                  "worst of those vs always-LC", "mean quality - max(LC, RAG)"]
HORIZON_READING = [
    "Where the last quality points go. The same leave-one-reader-out scores, routed several ways: held as shipped "
    "(the realized share's error paid back over 10 questions), held more slowly (30, 100), held as shipped with each "
    "cell's questions answered in a random order (three seeds), and cut in hindsight at each cell's own 0.3 quantile "
    "— the best the ranking alone can do at this share, and what no router answering one question at a time can do. "
    "The runs answer their questions grouped by task (a block of location questions, then of comparison questions, "
    "...), so a share held within 0.05 from the 100th question on sends about 0.3 of every block, where quality "
    "wants more of the blocks LC gains most on: a slower horizon gains quality and loses the share. With each "
    "cell's tasks mixed, as a service's users ask, the shipped controller's quality comes near the hindsight cut's "
    "while its share stays about as close to 0.3 as chance allows (the realized share of 100 questions routed "
    "independently at 0.3 has a standard deviation of 0.046). Where even the hindsight cut is below always-LC, "
    "the ranking itself falls short at this share. With `declines_to_lc` every RAG answer that declines goes to "
    "LC as well, counted in the share: on LaRA, whose hallucination questions are a quarter of it and answered "
    "right by a decline, that costs quality and, where a block of declines outnumbers the share, the share itself.",
]


def horizon_section(rows: list[list]) -> list[str]:
    return ["### What holding the share question by question costs", "", *HORIZON_READING, "",
            _md_table(HORIZON_HEADER, rows), ""]


def held_paragraph(cells: list[dict]) -> list[str]:
    """Where run-time control stands against the issue's targets, over the (reader, length) cells."""
    held = [c for c in cells if c["worst"] <= 0.05]
    cheap = [c for c in cells if c["cost"] <= MAX_COST]
    lc_wins = [c for c in cells if c["lc"] > c["rag"]]
    above = [c for c in lc_wins if c["held"] >= c["lc"]]
    worst = max(cells, key=lambda c: c["worst"])
    fixed = [c["fixed_share"] for c in cells]
    return [f"- Realized LC share within ±0.05 of {HELD_SHARE} at every question after the first {WARM_UP} of a "
            f"cell: **{len(held)} of {len(cells)}** cells (worst: {worst['reader']} {worst['length']}, "
            f"{worst['worst']:.3f}). The fixed threshold calibrated for {HELD_SHARE} on the other readers sends "
            f"{min(fixed):.2f}–{max(fixed):.2f}.",
            f"- Cost ≤ 45% of always-LC's: **{len(cheap)} of {len(cells)}** cells (max "
            f"{100 * max(c['cost'] for c in cells):.0f}%).",
            f"- Quality ≥ always-LC where LC beats RAG: **{len(above)} of {len(lc_wins)}** cells" +
            "".join(f"; {c['reader']} {c['length']} {c['held'] - c['lc']:+.3f} (paired 95% interval "
                    f"{c['vs_lc_ci'][0]:+.3f} to {c['vs_lc_ci'][1]:+.3f})" for c in lc_wins if c not in above)
            + ". Below always-LC by more than the interval allows: "
            f"**{sum(c['vs_lc_ci'][1] < 0 for c in lc_wins)} of {len(lc_wins)}**."]


def eval_run_rows(run: Path) -> tuple[list[list], list[str]]:
    """`lcrag eval --strategies lc,self-route --router R --lc-share 0.3` on one reader, from its rows: per dataset,
    the realized LC share (all, after the first 100 questions, the worst running deviation after them), LC's share
    of prompt tokens, cost and quality against the run's own always-LC rows."""
    from lcrag.evaluation.report import load_rows

    rows = load_rows(run)
    body, problems = [], []
    for dataset in sorted({r["dataset"] for r in rows}):
        held = [r for r in rows if r["dataset"] == dataset and r.get("routing")]
        lc = {r["item_id"]: r for r in rows if r["dataset"] == dataset and r["strategy"] == "lc"}
        held = [r for r in held if r["item_id"] in lc]
        if not held:
            problems.append(f"{dataset}: no self-route row with a routing decision")
            continue
        body.append([dataset, len(held), *eval_cell([r["route"] == "lc" for r in held], held, [lc[r["item_id"]] for r in held])])
    return body, problems


def eval_cell(sent: list[bool], held: list[dict], lc: list[dict]) -> list:
    running = [sum(sent[:i]) / i for i in range(1, len(sent) + 1)]
    share = held[-1]["routing"].get("lc_share")
    lc_tokens = sum(c["prompt_tokens"] for r in held if r["route"] == "lc" for c in r["calls"] if c["stage"] == "answer")
    tokens = sum(r["prompt_tokens"] for r in held)
    worst = max((abs(x - share) for x in running[WARM_UP - 1:]), default=0.0)
    quality, lc_quality = (sum(r["score"] for r in rs) / len(rs) for rs in (held, lc))
    return [f"{sum(sent) / len(sent):.3f}", f"{sum(sent[WARM_UP:]) / max(1, len(sent) - WARM_UP):.3f}",
            f"{worst:.3f}", f"{lc_tokens / tokens:.3f}", f"{100 * tokens / sum(r['prompt_tokens'] for r in lc):.0f}%",
            f"{quality:.3f}", f"{lc_quality:.3f}", f"{quality - lc_quality:+.3f}"]


EVAL_HEADER = ["dataset", "questions", "LC share", f"after {WARM_UP}", f"max abs(running − S) after {WARM_UP}",
               "LC share of prompt tokens", "prompt tokens vs always-LC", "quality", "always-LC", "vs always-LC"]


def rescore(questions: list[Question]) -> None:
    """Every LC and RAG answer scored again by this version's offline scorer (runs made with an earlier one keep
    their own scores; warm_lara_vectors.py makes this a cache read)."""
    from lcrag.evaluation.freeform import FreeformScorer

    scorer = FreeformScorer()
    for q in questions:
        task = q.item_id.split("/")[0].rsplit("_", 1)[-1]  # 32k_book_location/17 -> location
        t = q.texts
        q.lc_score, q.rag_score = (max((scorer.score(t["question"], gold, t[mode], task) for gold in t["answers"]),
                                       default=0.0) for mode in ("lc", "rag"))


def measure_grounding(questions: list[Question], items: dict) -> int:
    """Runs made before the grounding signals (lcrag-route-3) recorded only their chunks' indices: re-chunk each
    document as its run did (its manifest's chunking over the bundled tokenizer its replay counted with), read the
    chunks the Self-Route row retrieved, and measure the RAG answer's grounding as `lcrag eval` records it now.
    ``items``: the dataset's items by (dataset, id). Returns how many questions were measured."""
    import json

    from lcrag.evaluation.report import load_rows
    from lcrag.strategies.routing.learned import grounding_features, numbers_in, text_signals
    from lcrag.core.text import content_words

    spans, documents, measured = ChunkSpans(), {}, 0
    for run in sorted({q.run for q in questions}):
        chunking = json.loads((Path(run) / "manifest.json").read_text())["chunking"]
        rows = {r["item_id"]: r for r in load_rows(run) if r["strategy"] == "self-route"}
        for q in (q for q in questions if q.run == run):
            row, item = rows[q.item_id], items.get((q.dataset, q.item_id))
            if "answer_grounding" in row or item is None or not isinstance(item.context, str):
                continue
            text, chunks = item.context, spans.get(chunking, item.context)
            if text not in documents:
                documents = {text: (content_words(text), numbers_in(text))}  # runs go document by document
            retrieved = " ".join(text[slice(*chunks[i])] for i in row.get("chunks") or [] if i < len(chunks))
            *_, g = text_signals(q.texts["question"], q.texts.get("rag") or "", *documents[text], retrieved)
            q.x = q.x[:-len(grounding_features(g))] + grounding_features(g)
            measured += 1
    return measured


class ChunkSpans:
    """A document's chunk spans under a chunking, as `lcrag eval` cut them (the bundled tokenizer, which the replay
    counts with), cached on disk under the cache directory: re-chunking a 128K document takes seconds."""

    def __init__(self):
        from lcrag.core.paths import default_cache_dir

        self.directory = default_cache_dir() / "route_lara_chunks"
        self.directory.mkdir(parents=True, exist_ok=True)
        self._reader, self._chunkers, self._spans = None, {}, {}

    def get(self, chunking: str, text: str) -> list[list[int]]:
        import json

        key = hashlib.sha256(f"{chunking}\0{text}".encode()).hexdigest()
        if key not in self._spans:
            path = self.directory / f"{key}.json"
            try:
                self._spans[key] = json.loads(path.read_text())
            except (OSError, ValueError):  # not made yet, or torn by a kill: made (again), written atomically
                self._spans[key] = [[c.start, c.end] for c in self._chunker(chunking).run(Document(text))]
                atomic_write_text(path, json.dumps(self._spans[key]))
        return self._spans[key]

    def _chunker(self, chunking: str):
        from lcrag.chunking.chunkers import make_chunker
        from lcrag.chunking.spec import parse_chunking
        from lcrag.readers.llamacpp import EmbeddedLlamaReader

        if chunking not in self._chunkers:
            self._reader = self._reader or EmbeddedLlamaReader(threads=2)  # kept: its tokenizer is its server
            unit, size, overlap = parse_chunking(chunking)
            self._chunkers[chunking] = make_chunker(unit, size, self._reader.tokenizer, overlap)
        return self._chunkers[chunking]


def write_loro_routers(routers: dict, directory: Path) -> None:
    """Each reader's leave-one-reader-out router, holding 0.3 by default (for `lcrag eval --router FILE`)."""
    directory.mkdir(parents=True, exist_ok=True)
    for reader, router in routers.items():
        replace(router, default_share=HELD_SHARE).save(directory / f"{reader}.json")


def fit_all(questions: list[Question], out: Path, split: LockedSplit) -> None:
    """The shipped router: fitted on the locked split's training part (refused if handed anything else)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        router = fit_training_router(questions, split, MODEL)
    fitted = dict(router.fitted_on, readers=sorted({reader_of(q) for q in questions}),
                  disagreement=disagreement_rates(agreement_labels(questions)),
                  split=f"{split.name}: training part only (locked at {LOCK_COMMIT[:7]})",
                  data="LaRA (ICML 2025) recorded LC and RAG answers, scored by lcrag's offline LaRA scorer",
                  refit="benchmarks/run_eval_lara.sh, then python benchmarks/route_lara.py RUNS --router-out FILE")
    fitted.pop("runs", None)  # local paths: not what a shipped file should carry
    replace(router, fitted_on=fitted, default_share=DEFAULT_SHARE).save(out)


def write_test_only(args, top: list[str]) -> int:
    """--test-only: the locked split and test sections, with the command."""
    command = ("python benchmarks/route_lara.py " + " ".join(str(r) for r in args.runs) + f" --out {args.out}"
               + (f" --router-out {args.router_out}" if args.router_out else "")
               + (f" --dataset {args.dataset}" if args.dataset else "") + f" --test-router {args.test_router} --test-only")
    lines = ["# Routing with strong readers: LaRA's locked test part", "", f"Command: `{command}`", "",
             f"Machine: {platform.machine()}, Python {platform.python_version()} (2 cores, no GPU).", "", *top]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 0


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="one lcrag eval run directory per reader")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--plots", type=Path, help="folder for the frontier plots (PNG, needs matplotlib)")
    parser.add_argument("--router-out", type=Path, help="write the router fitted on the training part here")
    parser.add_argument("--loro-routers", type=Path, help="write each reader's leave-one-reader-out router here")
    parser.add_argument("--eval-run", type=Path, help="an `lcrag eval --strategies lc,self-route --router R "
                        "--lc-share S` run of one reader: its rows' realized share, cost and quality")
    parser.add_argument("--eval-command", help="the command that made --eval-run (written with its table)")
    parser.add_argument("--rescore", action="store_true", help="score every answer again with this lcrag's scorer")
    parser.add_argument("--dataset", type=Path, help="the dataset the runs were made from (../shared/data/lara): "
                        "measures the RAG answers' grounding where the runs predate it, and adds run-time control with routers "
                        "that have not seen the held reader's documents either")
    parser.add_argument("--split", type=Path, help="the locked split (default: lcrag's, "
                        "lcrag/evaluation/calibration/lara_locked_split.json): everything is fitted, selected and "
                        "calibrated on its training part only")
    parser.add_argument("--test-only", action="store_true", help="with --test-router: write the locked test "
                        "part's sections only (the test, and the calibrated rows), not the training part's tables")
    parser.add_argument("--test-router", help="score the locked test part once with this router file (the shipped "
                        "one: src/lcrag/strategies/routing/routers/lara.json; the --router-out path: the router this run "
                        "fits), held at LC share 0.3")
    return parser.parse_args()


def main() -> int:
    args = arguments()
    fitted_here = args.router_out is not None and args.test_router == str(args.router_out)
    try:
        split = LockedSplit.load(args.split)
        tested = Router.parse(args.test_router) if args.test_router and not fitted_here else None
        everything, skipped = load_questions(args.runs)
    except InputError as error:
        print(f"route_lara.py: {error}", file=sys.stderr)
        return 2
    items = dataset_items(args.dataset) if args.dataset else None
    if items:
        print(f"grounding measured for {measure_grounding(everything, items)} questions", file=sys.stderr)
    if args.rescore:
        rescore(everything)
    questions, test, neither = split.partition(everything)
    print(f"locked split {split.name}: {len(questions)} training answers, {len(test)} test answers (scored only "
          f"with --test-router), {len(neither)} in neither part", file=sys.stderr)
    if not questions:
        print("route_lara.py: none of the runs' answers is on the locked split's training part", file=sys.stderr)
        return 2
    prices = PriceTable.load(None)
    if args.router_out:  # first: --test-router may name the router this run fits
        fit_all(questions, args.router_out, split)
        tested = Router.parse(args.router_out) if fitted_here else tested
    top = locked_section(split, reader_styles(args.dataset) if args.dataset else None,
                         (len(questions), len(test), len(neither)))
    if tested is not None:
        top += test_section(test, tested, args.test_router, split, prices)
        top += calibration_section(everything, test, tested, split, prices) if test else []
    if args.test_only:
        return write_test_only(args, top)
    analyse(args, split, questions, skipped, items, prices, top)
    return 0


def analyse(args, split: LockedSplit, questions: list[Question], skipped: int, items: dict | None,
            prices: PriceTable, top: list[str]) -> None:
    """Every training-part table (cross-validated on the training part alone), written after ``top``."""
    routers = routers_left_out(split.training_only(questions), reader_of, MODEL)
    loro = [routers[reader_of(q)].probability(q.x) for q in questions]
    held, held_cells, loro_held = held_rows(questions, routers, loro, prices)
    horizons = horizon_rows(questions, routers, loro, loro_held, prices)
    unseen = unseen_rows(questions, document_keys(items, questions), loro_held, prices, split) if items else None
    if args.loro_routers:
        write_loro_routers(routers, args.loro_routers)
    lodo = leave_one_out(split.training_only(questions), doc_type_of, model=MODEL)
    summary, frontier, plotted = cell_rows(questions, loro, prices)
    summary_types, _, _ = cell_rows(questions, lodo, prices)
    write(args, questions, skipped, summary, summary_types, frontier, (held, held_cells, horizons), unseen, top)
    if args.plots:
        for length in ("32k", "128k"):
            plot_grid([(r, p) for r, l, p in plotted if l == length], length, args.plots / f"frontier_{length}.png")


SHOWN = ("always-RAG", "always-LC", "oracle", "self-route (text)", "learned router")


def plot_grid(cells: list[tuple[str, list[Point]]], length: str, path: Path) -> None:
    """One panel per reader: quality against USD per 1,000 questions, each policy a series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = 5
    rows = max(1, math.ceil(len(cells) / columns))
    fig, axes = plt.subplots(rows, columns, figsize=(4 * columns, 3.2 * rows), squeeze=False)
    for ax, (reader, points) in zip(axes.flat, cells):
        for name in SHOWN:
            mine = sorted((p for p in points if p.router == name), key=lambda p: p.money or p.tokens)
            ax.plot([1000 * (p.money or 0) if p.money is not None else p.tokens for p in mine],
                    [p.quality for p in mine], marker="o", markersize=3, label=name,
                    linestyle="-" if len(mine) > 1 else "none")
        ax.set_title(f"{reader} ({length})", fontsize=9)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(cells):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    fig.supxlabel("USD per 1,000 questions (list price; prompt tokens where unpriced)", fontsize=9)
    fig.supylabel("quality (offline LaRA scorer)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


READING = [
    "**How to read it.** Each (reader, question) pair is answered twice from LaRA's recordings: the reader's LC answer "
    "and its RAG answer (LaRA's own RAG: 5 chunks of 600 tokens, hybrid retrieval). A policy picks one per question; "
    "*quality* is the mean probability that LaRA's GPT-4o judge says True, by lcrag's offline scorer (validated "
    "against the judge's table: benchmarks/results/lara_scorer.md; a judge run is `lcrag route eval --judge MODEL`). "
    "Every policy but always-LC pays the RAG step; LC costs the whole document. Prompt tokens are lcrag's own LaRA "
    "prompts counted by the bundled SmolLM2 tokenizer standing in for the readers' own (not available offline; it "
    "counts a LaRA \"32K\" document at ~40K tokens); USD at each reader's list price (lcrag/evaluation/prices.py). The "
    "learned router is boosted trees on the router features (lcrag-route-3: retrieval scores, the question's terms "
    "in the document and in the chunks, the RAG answer's decline/hedge/length and its grounding (its own words and "
    "figures found in the chunks and the document), the question's form; no log-probabilities), fitted on the "
    "other training readers only; its operating point is the best of its LC-share "
    "settings (0.1–0.4) whose cost stays within 45% of always-LC's. *Self-Route rule*: the RAG answer declines in its "
    "own words (\"not mentioned in the text\") → LC. Intervals: 95% bootstrap over questions. APGR and CPT are "
    "RouteLLM's, LC as the strong model; where RAG beats LC they are not meaningful (negative or > 1).",
]
WHY = [
    "**Why the oracle-gain target is missed.** The router sees the question, the retrieval and the RAG answer, never "
    "the LC answer, and the per-question winner is mostly decided by the LC answer: LC wins on comparison and "
    "reasoning questions broadly but not on every one, and on LaRA's hallucination questions a RAG decline is right "
    "while LC often invents. The features separate those cases only partly (a decline with every key term in the "
    "document → LC; a decline with terms absent → stay), which is enough to hold always-LC's quality at a third of "
    "its cost on most cells and beat Self-Route's rule on all, but recovers about a fifth of the oracle's gain, not half. Most "
    "of that gain (a median 81% per cell) sits on questions where LC and RAG differ by ≥ 0.3, so it is not scorer "
    "noise. The RAG answer's grounding in its chunks (lcrag-route-3) helped where lcrag-route-2 stopped: over the 20 "
    "cells held at 0.3, quality − max(always-LC, always-RAG) went from +0.008 to +0.010 with leave-one-reader-out "
    "routers and from -0.006 to -0.003 with documents unseen too, and LC-winning cells at or above always-LC from 8 "
    "to 10 of 11. What would help next: a small judge of the RAG answer, or a cheap LC probe — not tuning. The "
    "model class (trees over a logistic "
    "regression) was chosen once on a partial leave-one-reader-out run of four readers; no setting was tuned per "
    "reader.",
]


def eval_section(args) -> list[str]:
    if not args.eval_run:
        return []
    body, problems = eval_run_rows(args.eval_run)
    return ["### The same through `lcrag eval` (rows, not offline math)", "",
            f"Command: `{args.eval_command or '(not given)'}`; rows of {args.eval_run.name}. Each self-route row carries "
            "the router's decision (`routing`); the LC rows are the same run's always-LC answers. Cost here is prompt "
            "tokens (the row's own calls).", "", _md_table(EVAL_HEADER, body), "", *problems, ""]


HELD_READING = [
    "`--lc-share 0.3` as `lcrag ask`/`eval`/`serve` apply it (lcrag.strategies.routing.share_control): each reader's "
    "questions are decided one by one in the order its run answered them (32K, then 128K: one ledger per reader), "
    "the threshold the 0.3-quantile of the router's recent scores (warm-started from the router's calibration on the "
    "other training readers) corrected by the realized share's error. The router is the reader's leave-one-reader-out "
    "router. *Fixed threshold*: the same router's threshold calibrated for 0.3 on its fitting readers, carried to "
    "this reader as a shipped router's default would be. Cost: USD at the reader's list price, RAG step included. "
    "*Max abs(running share − 0.3)*: the realized share counted from the cell's first question, at every question "
    "after its first 100.",
]


UNSEEN_READING = [
    "Leave-one-reader-out keeps the held reader's answers out of its router, but not the questions: the other training "
    "readers answered the same questions on the same documents, and a router can learn a question's LC gain from "
    "them. A user's documents are new. Here each held reader's documents are split into five folds, and each fold is "
    "scored by a router fitted on the other readers' questions about the other folds' documents (no reader's answer "
    "on those documents), then held at 0.3 as above. The difference between the two is what the leave-one-reader-out "
    "figures owe to having seen the questions.",
]
UNSEEN_HEADER = ["reader", "length", "questions", "always-LC", "always-RAG", "held at 0.3, LORO router",
                 "vs always-LC", "held at 0.3, documents unseen too", "vs always-LC", "LC share", "cost vs LC",
                 "LC beats RAG"]


def unseen_section(unseen: tuple[list[list], list[str]] | None) -> list[str]:
    if unseen is None:
        return []
    return ["### Unseen documents (leave-one-reader-out and leave-documents-out)", "", *UNSEEN_READING, "",
            *unseen[1], "", _md_table(UNSEEN_HEADER, unseen[0]), ""]


def write(args, questions, skipped, summary, summary_types, frontier, held, unseen=None, top=()) -> None:
    command = "python benchmarks/route_lara.py " + " ".join(str(r) for r in args.runs) + f" --out {args.out}"
    lines = ["# Routing with strong readers: LaRA's recorded answers", "", *top,
             "## The training part", "",
             f"Command: `{command}`" + (f" `--plots {args.plots}`" if args.plots else "")
             + (f" `--router-out {args.router_out}`" if args.router_out else "")
             + (f" `--loro-routers {args.loro_routers}`" if args.loro_routers else "")
             + (" `--rescore`" if args.rescore else "") + (f" `--dataset {args.dataset}`" if args.dataset else "")
             + (f" `--split {args.split}`" if args.split else "")
             + (f" `--test-router {args.test_router}`" if args.test_router else ""), "",
             f"Machine: {platform.machine()}, Python {platform.python_version()}. {len(questions)} (reader, question) "
             f"pairs of the training part with both an LC and a Self-Route row ({skipped} skipped).", "",
             *READING, "", "## Targets (leave-one-reader-out)", "", *targets_paragraph(TARGETS[:len(summary)]), "",
             *WHY, "",
             "## Run-time share control at 0.3 (leave-one-reader-out)", "", *HELD_READING, "",
             *held_paragraph(held[1]), "", _md_table(HELD_HEADER, held[0]), "", *horizon_section(held[2]),
             *unseen_section(unseen),
             *eval_section(args),
             "## Leave-one-reader-out", "", _md_table(SUMMARY_HEADER, summary), "",
             "## Leave-one-document-type-out", "", _md_table(SUMMARY_HEADER, summary_types), "",
             "## Every policy (leave-one-reader-out)", "", _md_table(FRONTIER_HEADER, frontier), ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines[:40]))


LOCKED_RULE = (
    "**The rule.** Every choice — scorer calibration, features, model capacity, thresholds, policy — is made by "
    "cross-validation on the training part (every section after this one: leave-one-reader-out over the training "
    "readers, on the training documents only); the test part is scored once per shipped router, in the section "
    "below and nowhere else, and README's claims are its figures. The test readers' answers on training documents "
    "and the training readers' answers on test documents are in neither part.")


def locked_section(split: LockedSplit, styles: dict | None, counts: tuple[int, int, int] | None) -> list[str]:
    """The split: which readers and why (their answer styles), which documents, the commit that locked it."""
    test_docs = sorted(split.test_documents)
    strata = sorted({d.rsplit("/", 1)[0] for d in split.test_documents | split.train_documents})
    per_stratum = ", ".join(f"{s} {sum(d.startswith(s + '/') for d in test_docs)} of "
                            f"{sum(d.startswith(s + '/') for d in split.test_documents | split.train_documents)}"
                            for s in strata)
    questions = sum(split.document_of[i] in split.test_documents for i in split.document_of)
    lines = ["## Locked test set", "",
             f"Locked at commit `{LOCK_COMMIT[:7]}` ({LOCK_COMMIT}), before any further fitting: "
             "`src/lcrag/evaluation/calibration/lara_locked_split.json`, chosen by `python benchmarks/lock_lara_split.py "
             "../shared/data/lara --out src/lcrag/evaluation/calibration/lara_locked_split.json`; "
             "`lcrag.evaluation.locked_split` answers whether a (reader, document) is train or test.", "",
             f"- **Test readers: {', '.join(sorted(split.test_readers))}**: the most different answer styles of the "
             "ten (the table: mean words, and the rates of hedging, declining anywhere in the answer, and declining "
             "where the document holds the answer, by lcrag.core.text's `hedges`/`declines`, the router's own features). "
             "Of the triples that leave no twin of a test reader in training (gpt-4o/gpt-4o-0806, "
             "llama-3.3-70b/-turbo: one model under two names), the one whose closest pair, in standardised style, "
             "is farthest apart.",
             f"- **Test documents: {len(test_docs)} of {len(split.test_documents | split.train_documents)}** "
             f"({questions} questions): in each (length, type) stratum the 30% first by sha256(\"lcrag-lara-locked-1:\" "
             f"+ document) ({per_stratum}); every (length, type, task) cell keeps questions on both sides.",
             f"- **Training: {', '.join(sorted(split.train_readers))}** on the other documents.",
             *([f"- This run: {counts[0]} training answers, {counts[1]} test answers, {counts[2]} in neither part."]
               if counts else []), "", LOCKED_RULE, ""]
    if styles:
        lines += [style_table(styles, sorted(split.test_readers)), ""]
    return lines + [f"Test documents: {'; '.join(test_docs)}.", ""]


TEST_HEADER = ["reader", "length", "questions", "always-LC", "always-RAG", "held at 0.3: quality",
               "vs always-LC (paired 95% CI)", "LC's gain over RAG recovered (paired 95% CI)", "LC share",
               f"max abs(running share − 0.3) after {WARM_UP}", "cost vs LC", "Self-Route rule @ its LC share",
               "random at the held share", "LC beats RAG"]


def gain_recovered(qs: list[Question], to_lc: list[bool], resamples: int = 1000, seed: int = 0) -> tuple[float, ...]:
    """The fraction of LC's gain over RAG a routing keeps, (quality − RAG) / (LC − RAG), and its 95% interval with
    the questions resampled (the routing, LC and RAG on the same resample: paired)."""
    import random

    kept = [q.lc_score - q.rag_score if lc else 0.0 for q, lc in zip(qs, to_lc)]
    gain = [q.lc_score - q.rag_score for q in qs]

    def ratio(sample) -> float:
        total = sum(gain[i] for i in sample)
        return sum(kept[i] for i in sample) / total if total else math.nan

    rng, n = random.Random(seed), len(qs)
    values = sorted(v for v in (ratio([rng.randrange(n) for _ in range(n)]) for _ in range(resamples))
                    if not math.isnan(v))
    return ratio(range(n)), values[int(0.025 * len(values))], values[int(0.975 * len(values)) - 1]


def test_cells(test: list[Question], router: Router, prices: PriceTable) -> list[dict]:
    """The test part routed by ``router`` held at 0.3 (its own calibration the warm start), per (reader, length)."""
    scores = [router.probability(q.x) for q in test]
    held = held_by_reader(test, scores, {reader_of(q): router.calibration for q in test})
    cells = []
    for reader, length, mine in reader_cells(test):
        qs, sent = [test[i] for i in mine], [held[i] for i in mine]
        rule = [q.text_routed for q in qs]
        cell = held_cell(qs, sent, sent, prices.prices.get(reader))
        cells.append(dict(cell, reader=reader, length=length, n=len(qs), gain=gain_recovered(qs, sent),
                          rule=evaluate(qs, rule)[0], rule_share=sum(rule) / len(qs),
                          random=random_quality(qs, cell["share"])))
    return cells


def test_row(c: dict) -> list:
    gain = c["gain"]
    return [c["reader"], c["length"], c["n"], f"{c['lc']:.3f}", f"{c['rag']:.3f}", f"{c['held']:.3f}",
            f"{c['held'] - c['lc']:+.3f} ({c['vs_lc_ci'][0]:+.3f} to {c['vs_lc_ci'][1]:+.3f})",
            f"{100 * gain[0]:.0f}% ({100 * gain[1]:.0f}% to {100 * gain[2]:.0f}%)" if c["lc"] > c["rag"] else "— (RAG wins)",
            f"{c['share']:.3f}", f"{c['worst']:.3f}", f"{100 * c['cost']:.0f}%",
            f"{c['rule']:.3f} @ {c['rule_share']:.2f}", f"{c['random']:.3f}", "yes" if c["lc"] > c["rag"] else "no"]


def router_digest(router: Router) -> str:
    """The first 12 hex digits of the router's content digest (as its share ledgers name it)."""
    import json

    return hashlib.sha256(json.dumps(router.to_dict(), sort_keys=True).encode("utf-8")).hexdigest()[:12]


def test_section(test: list[Question], router: Router, name: str, split: LockedSplit, prices: PriceTable) -> list[str]:
    """The locked test part scored once by the router in ``name``, held at 0.3: labelled, with where it stands."""
    if not test:
        return ["## Locked test set: scored once", "", "No answer of the runs is on the test part: nothing scored.", ""]
    cells = test_cells(test, router, prices)
    wins = [c for c in cells if c["lc"] > c["rag"]]
    fitted = router.fitted_on or {}
    readers = fitted.get("readers") or sorted({Path(run).name for run in fitted.get("runs") or []})
    seen = sorted(set(readers) & split.test_readers)
    return ["## Locked test set: scored once", "",
            f"**Router `{name}`** (digest {router_digest(router)}; fitted on {', '.join(readers) or '?'}"
            f"{'; ' + fitted['split'] if fitted.get('split') else ''}), on the test part only: "
            f"{', '.join(sorted(split.test_readers))} on the {len(split.test_documents)} test documents, "
            f"each reader's questions decided in its run's order under `--lc-share 0.3` (warm-started from the "
            "router's own calibration). Quality by lcrag's offline scorer; intervals paired 95% bootstrap over "
            "questions.", "",
            *([f"**Not a held-out measure: this router was fitted on the test readers {', '.join(seen)}.**", ""]
              if seen else []),
            f"- Realized LC share within ±0.05 of 0.3 after the first {WARM_UP} questions: "
            f"**{sum(c['worst'] <= 0.05 for c in cells)} of {len(cells)}** cells; cost ≤ 45% of always-LC's: "
            f"**{sum(c['cost'] <= MAX_COST for c in cells)} of {len(cells)}** (max "
            f"{100 * max(c['cost'] for c in cells):.0f}%).",
            f"- Quality ≥ always-LC where LC beats RAG: **{sum(c['held'] >= c['lc'] for c in wins)} of {len(wins)}**; "
            f"below it by more than the interval allows: **{sum(c['vs_lc_ci'][1] < 0 for c in wins)} of "
            f"{len(wins)}**.", "", _md_table(TEST_HEADER, [test_row(c) for c in cells]), ""]


CALIBRATION_SIZES = (50, 100, 200)  # the reader's own questions a calibration is made from (issue 44)
CALIBRATION_SEED = 0  # the order the calibration questions are drawn in (each N the first N: nested)
CALIBRATION_HEADER = ["reader", "length", "policy (LC share 0.3)", "quality", "vs always-LC (paired 95% CI)",
                      "LC's gain over RAG recovered (paired 95% CI)", "LC share", "cost vs LC"]


def question_group(q: Question) -> str:
    return group_of(q.texts["question"], q.texts.get("rag") or "")


def agreement_labels(questions: list[Question]) -> list[tuple[str, bool]]:
    """Each question's group and whether its recorded RAG and LC answers disagree: read from the two answers
    alone, no score (what `lcrag route calibrate` reads of a user's reader)."""
    return [(question_group(q), not answers_agree(q.texts["question"], q.texts.get("rag") or "",
                                                  q.texts.get("lc") or "")) for q in questions]


def calibration_pool(everything: list[Question], split: LockedSplit, reader: str) -> list[Question]:
    """A test reader's answers about the training documents (in neither part of the split: never fitted on, and
    not the test part), in a seeded random order: the questions a user would calibrate with."""
    import random

    pool = [q for q in everything if reader_of(q) == reader and split.document_of.get(q.item_id) in split.train_documents]
    return random.Random(f"{CALIBRATION_SEED}:{reader}").sample(pool, len(pool))


def reader_calibrations(everything: list[Question], readers: list[str], router: Router, split: LockedSplit,
                        size: int) -> dict[str, RoutingCalibration]:
    """Each reader's calibration of ``router`` from the agreement of its first ``size`` pool questions."""
    prior = router_prior(router.fitted_on)
    return {reader: RoutingCalibration(reader, router.digest, tuple(
        Label(group, disagree) for group, disagree in agreement_labels(calibration_pool(everything, split, reader)[:size])),
        prior, PRIOR_STRENGTH) for reader in readers}


def calibrated_routes(test: list[Question], router: Router, calibrations: dict | None) -> list[bool]:
    """The test part held at 0.3 with the router's scores, each adapted by its reader's calibration (None: as
    shipped)."""
    scores = [router.probability(q.x) for q in test]
    if calibrations is not None:
        scores = [calibrations[reader_of(q)].adapt(s, question_group(q)) for q, s in zip(test, scores)]
    return held_by_reader(test, scores, {reader_of(q): router.calibration for q in test})


def calibration_row(reader: str, length: str, name: str, qs: list[Question], sent: list[bool], price) -> list:
    lc = evaluate(qs, [True] * len(qs), False)[0]
    quality, share, _ = evaluate(qs, sent)
    low, high = bootstrap_scores([(0.0 if to_lc else q.rag_score - q.lc_score) for q, to_lc in zip(qs, sent)])
    gain = gain_recovered(qs, sent)
    cost = cost_of(qs, sent, True, price) / cost_of(qs, [True] * len(qs), False, price)
    return [reader, length, name, f"{quality:.3f}", f"{quality - lc:+.3f} ({low:+.3f} to {high:+.3f})",
            f"{100 * gain[0]:.0f}% ({100 * gain[1]:.0f}% to {100 * gain[2]:.0f}%)", f"{share:.3f}",
            f"{100 * cost:.0f}%"]


def calibration_section(everything: list[Question], test: list[Question], router: Router, split: LockedSplit,
                        prices: PriceTable) -> list[str]:
    """Shipped vs calibrated on each test reader's own LC/RAG agreement (N = 50/100/200) vs Self-Route's rule vs
    random, on the test part held at 0.3, per (reader, length)."""
    readers = sorted({reader_of(q) for q in test})
    routes = {"shipped router": calibrated_routes(test, router, None)}
    factors = {}
    for size in CALIBRATION_SIZES:
        calibrations = reader_calibrations(everything, readers, router, split, size)
        routes[f"calibrated, N = {size}"] = calibrated_routes(test, router, calibrations)
        factors[size] = calibrations
    rows, verdicts = [], {name: [] for name in routes}
    for reader, length, mine in reader_cells(test):
        qs, price = [test[i] for i in mine], prices.prices.get(reader)
        lc, rag = evaluate(qs, [True] * len(qs), False)[0], evaluate(qs, [False] * len(qs))[0]
        for name, sent in routes.items():
            rows.append(calibration_row(reader, length, name, qs, [sent[i] for i in mine], price))
            if lc > rag:
                verdicts[name].append(evaluate(qs, [sent[i] for i in mine])[0] - lc)
        rows.append(calibration_row(reader, length, "Self-Route rule (its own share)", qs,
                                    [q.text_routed for q in qs], price))
        rows.append([reader, length, "random at 0.3 (expected)", f"{random_quality(qs, HELD_SHARE):.3f}",
                     f"{random_quality(qs, HELD_SHARE) - lc:+.3f}", "30%", "0.300", "—"])
    return ["## Calibrated on the reader's own answers (no judge, no score)", "", *CALIBRATION_READING, "",
            *agreement_lines(everything, split, readers, factors),
            *(f"- {name}: quality ≥ always-LC in **{sum(v >= 0 for v in d)} of {len(d)}** LC-winning cells (mean "
              f"{sum(d) / len(d):+.4f} vs always-LC)." for name, d in verdicts.items() if d), "",
            _md_table(CALIBRATION_HEADER, rows), ""]


def agreement_lines(everything: list[Question], split: LockedSplit, readers: list[str], factors: dict) -> list[str]:
    """Per test reader: its calibration pool, how often its answers agree, and how much of LC's gain (measured by
    the scorer, only here, to say what the label is worth) sits on the questions where they disagree."""
    lines = []
    for reader in readers:
        pool = calibration_pool(everything, split, reader)
        labels = agreement_labels(pool)
        moved = sum(abs(q.lc_score - q.rag_score) for q, (_, d) in zip(pool, labels) if d)
        total = sum(abs(q.lc_score - q.rag_score) for q in pool) or math.nan
        biggest = factors[max(CALIBRATION_SIZES)][reader].factors()
        shown = ", ".join(f"{g} ×{f:.2f}" for g, f in sorted(biggest.items(), key=lambda gf: -abs(math.log(gf[1])))[:4])
        lines.append(f"- {reader}: {len(pool)} answers on training documents; RAG and LC agree on "
                     f"{100 * (1 - sum(d for _, d in labels) / len(labels)):.0f}%, and the disagreeing questions hold "
                     f"{100 * moved / total:.0f}% of |LC − RAG| (scorer, measured here only). Largest factors at "
                     f"N = {max(CALIBRATION_SIZES)}: {shown}.")
    return [*lines, ""]


CALIBRATION_READING = [
    "`lcrag route calibrate` as run on a user's reader: for each locked test reader, the router is adapted from that "
    "reader's own LC and RAG answers on N of its questions about the *training* documents (drawn in a seeded order; "
    "pairs the split puts in neither part, so never fitted on), labelled only by whether the two answers agree "
    "(lcrag.strategies.routing.calibration.answers_agree: no score, no judge). The router's score per group (question "
    "form × RAG answer declines) is multiplied by the reader's disagreement rate over the fitting readers' "
    f"(`fitted_on.disagreement`), shrunk toward it with a strength of {PRIOR_STRENGTH:g} questions. Then the test "
    "part is routed held at 0.3, as the shipped router is above. Intervals: paired 95% bootstrap over questions.",
]


if __name__ == "__main__":
    sys.exit(main())
